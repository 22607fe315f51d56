// The checkpoints page: deleting asks first. The forms post to the console (with the
// CSRF token) and work without this script too.
"use strict";

(function () {
  document.addEventListener("submit", function (e) {
    const b = e.submitter;
    if (b && b.dataset.action === "delete") {
      const tr = b.closest("tr");
      const what = tr ? tr.dataset.checkpoint : "this checkpoint";
      if (!window.confirm("Delete " + what + "? This cannot be undone.")) {
        e.preventDefault();
      }
    }
  });
})();
