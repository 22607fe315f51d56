// A session's page: the spans of its requests as a timeline (one row per depth of the
// span tree), each span's details on click.
"use strict";

(function () {
  const root = document.getElementById("session");
  const tl = document.getElementById("timeline");
  const status = document.getElementById("timeline-status");
  const detail = document.getElementById("span-detail");
  if (!root || !tl) return;
  const id = root.dataset.sessionId;
  const W = 800, ROW = 18, TOP = 4, AXIS = 16;

  function describe(s) {
    const attrs = s.attributes || {};
    const parts = Object.keys(attrs).sort().map(function (k) { return k + "=" + JSON.stringify(attrs[k]); });
    return s.name + " · " + tuft.num(s.duration_ms) + " ms · " + s.status + " · " + tuft.time(s.start) + (parts.length ? " · " + parts.join(" ") : "");
  }

  function draw(spans) {
    tl.replaceChildren();
    if (spans.length === 0) {
      status.textContent = "no spans recorded";
      return;
    }
    const byId = new Map(spans.map(function (s) { return [s.span_id, s]; }));
    const depthOf = new Map();
    function depth(s) {
      if (depthOf.has(s.span_id)) return depthOf.get(s.span_id);
      depthOf.set(s.span_id, 0); // a cycle stops here
      const p = s.parent_span_id && byId.get(s.parent_span_id);
      const d = p ? depth(p) + 1 : 0;
      depthOf.set(s.span_id, d);
      return d;
    }
    let t0 = Infinity, t1 = -Infinity, maxDepth = 0;
    for (const s of spans) {
      t0 = Math.min(t0, Date.parse(s.start));
      t1 = Math.max(t1, Date.parse(s.end));
      maxDepth = Math.max(maxDepth, depth(s));
    }
    if (!(t1 > t0)) t1 = t0 + 1;
    const H = TOP + (maxDepth + 1) * ROW + AXIS;
    tl.setAttribute("viewBox", "0 0 " + W + " " + H);
    tl.setAttribute("height", String(H));
    const X = function (t) { return (t - t0) / (t1 - t0) * (W - 2) + 1; };
    for (const s of spans) {
      const x = X(Date.parse(s.start));
      const w = Math.max(1, X(Date.parse(s.end)) - x);
      const g = tuft.svg("g", {});
      const r = tuft.svg("rect", {
        class: "span" + (s.status === "error" ? " error" : ""), x: x.toFixed(1), y: TOP + depth(s) * ROW,
        width: w.toFixed(1), height: ROW - 3, "data-span-id": s.span_id, "data-name": s.name,
      });
      r.appendChild(tuft.svg("title", {}, describe(s)));
      r.addEventListener("click", function () { detail.textContent = describe(s); });
      g.appendChild(r);
      if (w > 60) {
        g.appendChild(tuft.svg("text", { x: (x + 3).toFixed(1), y: TOP + depth(s) * ROW + 11, class: "span-label" }, s.name));
      }
      tl.appendChild(g);
    }
    tl.appendChild(tuft.svg("text", { x: 2, y: H - 3, class: "tick x start" }, tuft.time(new Date(t0).toISOString())));
    tl.appendChild(tuft.svg("text", { x: W - 2, y: H - 3, class: "tick x end" }, "+" + tuft.num(t1 - t0) + " ms"));
  }

  async function load() {
    const resp = await tuft.api("GET", "/api/v1/sessions/" + encodeURIComponent(id) + "/spans");
    if (!resp.ok) {
      status.textContent = "spans unavailable: " + (await tuft.errorText(resp));
      return;
    }
    const d = await resp.json();
    const spans = d.spans || [];
    draw(spans);
    status.textContent = spans.length + " spans" + (d.dropped ? " (" + d.dropped + " oldest dropped)" : "");
  }

  load();
})();
