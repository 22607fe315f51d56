// The console's shared helpers: calls to /console/api/ (the API, as the signed-in
// tenant) and DOM building. Every user-supplied string goes into the page as text
// (textContent, attribute values), never as HTML.
"use strict";

window.tuft = (function () {
  function csrf() {
    const m = document.querySelector('meta[name="csrf-token"]');
    return m ? m.content : "";
  }

  // api calls the API route path (e.g. "/api/v1/training_runs") through the console.
  function api(method, path, body, extra) {
    const headers = { Accept: "application/json" };
    if (method !== "GET" && method !== "HEAD") {
      headers["X-CSRF-Token"] = csrf();
    }
    const init = { method: method, headers: headers, credentials: "same-origin", cache: "no-store" };
    if (body !== undefined) {
      headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(body);
    }
    if (extra && extra.signal) {
      init.signal = extra.signal;
    }
    return fetch("/console/api" + path, init);
  }

  // errorText reads an API error reply's message.
  async function errorText(resp) {
    try {
      const j = await resp.json();
      if (j.detail) return resp.status + ": " + j.detail;
      if (j.error && j.error.message) return resp.status + ": " + j.error.message;
    } catch (e) {
      // not JSON
    }
    return resp.status + " " + resp.statusText;
  }

  // fill sets e's attributes and text content (as text, never HTML) and returns e.
  function fill(e, attrs, text) {
    for (const k in attrs || {}) {
      e.setAttribute(k, attrs[k]);
    }
    if (text !== undefined && text !== null) {
      e.textContent = String(text);
    }
    return e;
  }

  // el makes an element with attributes and text content.
  function el(tag, attrs, text) {
    return fill(document.createElement(tag), attrs, text);
  }

  const SVGNS = "http://www.w3.org/2000/svg";

  // svg makes an SVG element with attributes and text content.
  function svg(tag, attrs, text) {
    return fill(document.createElementNS(SVGNS, tag), attrs, text);
  }

  function num(x) {
    if (x === null || x === undefined || x === "") return "";
    if (typeof x !== "number") return String(x);
    if (Number.isInteger(x)) return String(x);
    return Number(x.toPrecision(4)).toString();
  }

  function time(iso) {
    if (!iso) return "";
    const d = new Date(iso);
    if (isNaN(d.getTime())) return "";
    return d.toISOString().replace("T", " ").replace(/\.\d+Z$/, "Z");
  }

  function seg(s) {
    return String(s).split("/").map(encodeURIComponent).join("/");
  }

  return { api: api, errorText: errorText, el: el, svg: svg, num: num, time: time, seg: seg, csrf: csrf };
})();
