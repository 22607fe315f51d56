// A run's page: every metric forward_backward and optim_step returned, as a curve over
// steps (SVG), from the run's metric history and then live from its event stream, with
// exponential smoothing and a log scale.
"use strict";

(function () {
  const root = document.getElementById("run");
  const chart = document.getElementById("chart");
  if (!root || !chart) return;
  const runId = root.dataset.runId;
  const metricSel = document.getElementById("metric");
  const smoothing = document.getElementById("smoothing");
  const smoothingOut = document.getElementById("smoothing-value");
  const logScale = document.getElementById("log-scale");
  const status = document.getElementById("chart-status");
  const axes = chart.querySelector("g.axes");
  const rawPath = chart.querySelector("path.series.raw");
  const smoothPath = chart.querySelector("path.series.smooth");
  const W = 800, H = 300, ML = 56, MR = 10, MT = 10, MB = 24;
  const base = "/api/v1/training_runs/" + encodeURIComponent(runId) + "/metrics";

  const points = [];
  const seen = new Set();
  const keys = new Set();
  let lastSeq = 0;
  let chosen = false;
  let pending = false;

  function preferred() {
    for (const k of ["loss:sum", "loss:mean", "loss"]) {
      if (keys.has(k)) return k;
    }
    for (const k of keys) {
      if (k.indexOf("loss") >= 0) return k;
    }
    return keys.values().next().value;
  }

  function addKey(k) {
    if (keys.has(k)) return;
    keys.add(k);
    const opts = Array.from(metricSel.options).map(function (o) { return o.value; });
    opts.push(k);
    opts.sort();
    const current = metricSel.value;
    metricSel.replaceChildren.apply(metricSel, opts.map(function (v) { return tuft.el("option", { value: v }, v); }));
    metricSel.value = chosen ? current : preferred();
  }

  function add(p) {
    if (!p || seen.has(p.seq)) return;
    seen.add(p.seq);
    points.push(p);
    if (p.seq > lastSeq) lastSeq = p.seq;
    for (const k in p.metrics || {}) {
      if (typeof p.metrics[k] === "number") addKey(k);
    }
  }

  // facts keeps the run's steps and last loss current as points arrive (the run JSON's
  // steps count completed optim_steps; its last loss is the last forward_backward's).
  const stepsFact = document.querySelector('[data-fact="steps"]');
  const lossFact = document.querySelector('[data-fact="last-loss"]');
  function facts(p) {
    if (p.seq < lastSeq) return;
    if (stepsFact) stepsFact.textContent = String(p.op === "optim_step" ? p.step + 1 : p.step);
    if (lossFact && p.op === "forward_backward" && p.metrics && typeof p.metrics["loss:sum"] === "number") {
      lossFact.textContent = tuft.num(p.metrics["loss:sum"]);
    }
  }

  function schedule() {
    if (pending) return;
    pending = true;
    window.requestAnimationFrame(function () { pending = false; draw(); });
  }

  // series is the chosen metric's (step, value) pairs in the order they happened.
  function series() {
    const m = metricSel.value;
    const log = logScale.checked;
    const out = [];
    points.sort(function (a, b) { return a.seq - b.seq; });
    for (const p of points) {
      const v = p.metrics ? p.metrics[m] : undefined;
      if (typeof v !== "number" || !isFinite(v)) continue;
      if (log && v <= 0) continue;
      out.push({ x: p.step, y: v });
    }
    return out;
  }

  // smooth is an exponential moving average, debiased so the first points are not
  // pulled toward zero (as TensorBoard smooths).
  function smooth(s, f) {
    let last = 0, n = 0;
    return s.map(function (p) {
      n++;
      last = last * f + (1 - f) * p.y;
      return { x: p.x, y: last / (1 - Math.pow(f, n)) };
    });
  }

  function ticks(lo, hi, log) {
    const out = [];
    if (log) {
      for (let e = Math.floor(Math.log10(lo)); e <= Math.ceil(Math.log10(hi)); e++) {
        const v = Math.pow(10, e);
        if (v >= lo && v <= hi) out.push(v);
      }
      return out.length ? out : [lo, hi];
    }
    const n = 5;
    for (let i = 0; i <= n; i++) out.push(lo + (hi - lo) * i / n);
    return out;
  }

  function draw() {
    const log = logScale.checked;
    const f = Math.min(0.99, Math.max(0, Number(smoothing.value) || 0));
    smoothingOut.textContent = f.toFixed(2);
    const s = series();
    const sm = f > 0 ? smooth(s, f) : s;
    axes.replaceChildren();
    if (s.length === 0) {
      rawPath.setAttribute("d", "");
      smoothPath.setAttribute("d", "");
      rawPath.setAttribute("data-points", "0");
      smoothPath.setAttribute("data-points", "0");
      return;
    }
    const ty = log ? Math.log10 : function (v) { return v; };
    let x0 = Infinity, x1 = -Infinity, y0 = Infinity, y1 = -Infinity;
    for (const p of s.concat(sm)) {
      x0 = Math.min(x0, p.x); x1 = Math.max(x1, p.x);
      y0 = Math.min(y0, p.y); y1 = Math.max(y1, p.y);
    }
    if (x1 === x0) { x1 = x0 + 1; }
    if (y1 === y0) { y1 = log ? y0 * 10 : y0 + 1; if (!log) y0 = y0 - 1; }
    const X = function (x) { return ML + (x - x0) / (x1 - x0) * (W - ML - MR); };
    const Y = function (y) { return H - MB - (ty(y) - ty(y0)) / (ty(y1) - ty(y0)) * (H - MT - MB); };
    const path = function (ps) {
      return ps.map(function (p, i) { return (i ? "L" : "M") + X(p.x).toFixed(1) + " " + Y(p.y).toFixed(1); }).join(" ");
    };
    for (const v of ticks(y0, y1, log)) {
      axes.appendChild(tuft.svg("line", { x1: ML, x2: W - MR, y1: Y(v), y2: Y(v), class: "grid" }));
      axes.appendChild(tuft.svg("text", { x: ML - 4, y: Y(v) + 4, class: "tick y" }, tuft.num(v)));
    }
    axes.appendChild(tuft.svg("text", { x: ML, y: H - 6, class: "tick x start" }, "step " + x0));
    axes.appendChild(tuft.svg("text", { x: W - MR, y: H - 6, class: "tick x end" }, "step " + x1));
    rawPath.setAttribute("d", f > 0 ? path(s) : "");
    rawPath.setAttribute("data-points", String(s.length));
    smoothPath.setAttribute("d", path(sm));
    smoothPath.setAttribute("data-points", String(sm.length));
  }

  async function history() {
    let after = 0;
    for (;;) {
      const resp = await tuft.api("GET", base + "?after=" + after);
      if (!resp.ok) {
        status.textContent = "metrics unavailable: " + (await tuft.errorText(resp));
        return false;
      }
      const d = await resp.json();
      const ps = d.points || [];
      ps.forEach(add);
      if (ps.length === 0 || !(d.next_after > after)) break;
      after = d.next_after;
    }
    return true;
  }

  function stream() {
    const es = new EventSource("/console/api" + base + "/stream?after=" + lastSeq);
    es.addEventListener("open", function () { status.textContent = "live"; });
    es.addEventListener("point", function (e) {
      let p;
      try { p = JSON.parse(e.data); } catch (err) { return; }
      add(p);
      facts(p);
      schedule();
    });
    es.addEventListener("end", function () {
      es.close();
      status.textContent = "the run has ended";
    });
    es.addEventListener("error", function () {
      if (es.readyState === EventSource.CLOSED) status.textContent = "stream closed";
      else status.textContent = "reconnecting…";
    });
  }

  metricSel.addEventListener("change", function () { chosen = true; schedule(); });
  smoothing.addEventListener("input", schedule);
  logScale.addEventListener("change", schedule);

  history().then(function (ok) {
    draw();
    if (ok) {
      status.textContent = points.length + " points";
      stream();
    }
  });
})();
