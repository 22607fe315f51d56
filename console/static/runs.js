// The runs page: filter and search over the table, and live updates (the list is read
// again every few seconds while the page is visible).
"use strict";

(function () {
  const filter = document.getElementById("run-filter");
  const table = document.getElementById("runs");
  const count = document.getElementById("runs-count");
  const live = document.getElementById("runs-live");
  if (!filter || !table) return;
  const tbody = table.tBodies[0];
  let total = tbody.rows.length;
  const REFRESH_MS = 3000;

  function applyFilter() {
    const words = filter.value.trim().toLowerCase().split(/\s+/).filter(Boolean);
    let shown = 0;
    for (const tr of tbody.rows) {
      const text = tr.textContent.toLowerCase();
      const ok = words.every(function (w) { return text.includes(w); });
      tr.hidden = !ok;
      if (ok) shown++;
    }
    count.textContent = shown + " of " + total;
    const u = new URL(window.location.href);
    if (filter.value) u.searchParams.set("q", filter.value); else u.searchParams.delete("q");
    window.history.replaceState(null, "", u);
  }

  function runName(r) {
    return (r.user_metadata && r.user_metadata.name) || r.training_run_id;
  }

  function state(r) {
    return r.state || (r.corrupted ? "corrupted" : "");
  }

  function row(r) {
    const tr = tuft.el("tr", { "data-run-id": r.training_run_id });
    const name = tuft.el("td", { class: "run-name" });
    name.appendChild(tuft.el("a", { href: "/console/runs/" + encodeURIComponent(r.training_run_id) }, runName(r)));
    tr.appendChild(name);
    tr.appendChild(tuft.el("td", { class: "run-model" }, r.base_model));
    tr.appendChild(tuft.el("td", { class: "run-rank" }, tuft.num(r.lora_rank)));
    tr.appendChild(tuft.el("td", { class: "run-state" }, state(r)));
    tr.appendChild(tuft.el("td", { class: "run-steps" }, tuft.num(r.steps)));
    tr.appendChild(tuft.el("td", { class: "run-loss" }, tuft.num(r.last_loss)));
    tr.appendChild(tuft.el("td", { class: "run-created" }, tuft.time(r.created_at)));
    const sess = tuft.el("td", { class: "run-session" });
    if (r.session_id) {
      sess.appendChild(tuft.el("a", { href: "/console/sessions/" + encodeURIComponent(r.session_id) }, r.session_id));
    }
    tr.appendChild(sess);
    return tr;
  }

  async function refresh() {
    if (document.hidden) return;
    try {
      const resp = await tuft.api("GET", "/api/v1/training_runs?limit=1000");
      if (!resp.ok) {
        live.textContent = "update failed: " + (await tuft.errorText(resp));
        return;
      }
      const d = await resp.json();
      const rows = (d.training_runs || []).map(row);
      tbody.replaceChildren.apply(tbody, rows);
      total = (d.cursor && d.cursor.total_count) || rows.length;
      const empty = document.getElementById("runs-empty");
      if (empty) empty.hidden = rows.length > 0;
      live.textContent = "updated " + new Date().toLocaleTimeString();
      applyFilter();
    } catch (e) {
      live.textContent = "update failed: " + e;
    }
  }

  filter.addEventListener("input", applyFilter);
  applyFilter();
  window.setInterval(refresh, REFRESH_MS);
  document.addEventListener("visibilitychange", refresh);
})();
