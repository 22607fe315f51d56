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
  let W = 800;
  const ROW = 18, TOP = 4, AXIS = 16, GAP_W = 10, GAP_MS = 250;

  function describe(s) {
    const attrs = s.attributes || {};
    const parts = Object.keys(attrs).sort().map(function (k) { return k + "=" + JSON.stringify(attrs[k]); });
    return s.name + " · " + tuft.num(s.duration_ms) + " ms · " + s.status + " · " + tuft.time(s.start) + (parts.length ? " · " + parts.join(" ") : "");
  }

  // timeAxis maps a time to x. A session's requests come in bursts with idle time between
  // them (a training loop, then a pause): each burst (spans that overlap or nearly touch)
  // gets width in proportion to its length, and each idle gap a fixed narrow break, so
  // an hour of idling does not squeeze the requests into slivers. X.breaks are the
  // breaks' x positions.
  function timeAxis(spans, t0, t1) {
    const iv = spans.map(function (s) { return [Date.parse(s.start), Date.parse(s.end)]; }).sort(function (a, b) { return a[0] - b[0]; });
    const bursts = [];
    for (const [a, b] of iv) {
      const last = bursts[bursts.length - 1];
      if (last && a - last[1] <= Math.max(GAP_MS, 0.25 * (last[1] - last[0]))) {
        last[1] = Math.max(last[1], b);
      } else {
        bursts.push([a, b]);
      }
    }
    const gaps = bursts.length - 1;
    const avail = W - 2 - gaps * GAP_W;
    const total = bursts.reduce(function (n, b) { return n + Math.max(b[1] - b[0], 1); }, 0);
    let x = 1;
    const laid = bursts.map(function (b) {
      const w = avail * Math.max(b[1] - b[0], 1) / total;
      const out = { a: b[0], b: Math.max(b[1], b[0] + 1), x: x, w: w };
      x += w + GAP_W;
      return out;
    });
    const f = function (t) {
      let lo = 0, hi = laid.length - 1;
      while (lo < hi) {
        const mid = (lo + hi + 1) >> 1;
        if (laid[mid].a <= t) lo = mid; else hi = mid - 1;
      }
      const c = laid[lo];
      return c.x + Math.min(1, Math.max(0, (t - c.a) / (c.b - c.a))) * c.w;
    };
    f.breaks = laid.slice(1).map(function (c) { return c.x - GAP_W / 2; });
    return f;
  }

  function draw(spans) {
    // The drawing's width is the element's, so text keeps its size at any screen width.
    W = Math.max(600, Math.round(tl.getBoundingClientRect().width) || 800);
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
    const X = timeAxis(spans, t0, t1);
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
      const fit = Math.floor((w - 6) / 6); // characters of 10px text that fit the bar
      if (fit >= 4) {
        const label = s.name.length > fit ? s.name.slice(0, fit - 1) + "…" : s.name;
        g.appendChild(tuft.svg("text", { x: (x + 3).toFixed(1), y: TOP + depth(s) * ROW + 11, class: "span-label" }, label));
      }
      tl.appendChild(g);
    }
    for (const bx of X.breaks) {
      tl.appendChild(tuft.svg("line", { x1: bx, x2: bx, y1: TOP, y2: H - AXIS, class: "gap" }));
    }
    tl.appendChild(tuft.svg("text", { x: 2, y: H - 3, class: "tick x start" }, tuft.time(new Date(t0).toISOString())));
    tl.appendChild(tuft.svg("text", { x: W - 2, y: H - 3, class: "tick x end" }, "+" + tuft.num(t1 - t0) + " ms" + (X.breaks.length ? " (" + X.breaks.length + " idle gaps cut)" : "")));
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
    let timer = 0;
    window.addEventListener("resize", function () {
      window.clearTimeout(timer);
      timer = window.setTimeout(function () { draw(spans); }, 150);
    });
    status.textContent = spans.length + " spans" + (d.dropped ? " (" + d.dropped + " oldest dropped)" : "");
  }

  load();
})();
