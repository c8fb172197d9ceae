// tether dashboard, part 1 of 4 (util.js, views.js, rollout.js, app.js: loaded in this order by index.html as
// plain deferred scripts sharing one global scope): state, DOM builders, formatting and routing.
// Every value from the store goes into the page as text (never as HTML).
"use strict";

const POLL_MS = 3000;
const PAGE = 50;
const state = { sources: [], route: null, timer: null, metrics: {}, busy: false };

// -- small helpers ------------------------------------------------------------------------------------------

function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k === "class") el.className = v;
    else if (k === "text") el.textContent = v;
    else if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else if (k === "dataset") Object.assign(el.dataset, v);
    else if (k === "style") Object.assign(el.style, v); // CSSOM, which the page's CSP allows (style="" is not)
    else el.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children.flat(Infinity)) {
    if (c === null || c === undefined || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

const SVG = "http://www.w3.org/2000/svg";
function s(tag, attrs, ...children) {
  const el = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs || {})) if (v !== null && v !== undefined) el.setAttribute(k, v);
  for (const c of children.flat()) if (c !== null && c !== undefined) el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return el;
}

async function api(path, params) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params || {})) if (v !== null && v !== undefined && v !== "") q.set(k, v);
  const res = await fetch(`api/${path}?${q}`, { headers: { Accept: "application/json" } });
  const body = await res.json().catch(() => null);
  if (!res.ok) throw new Error(body && body.error ? body.error.message : `${res.status} ${res.statusText}`);
  return body;
}

const fmtInt = (n) => (n === null || n === undefined ? "–" : Number(n).toLocaleString("en-US"));
function fmtNum(x, digits = 3) {
  if (x === null || x === undefined || Number.isNaN(x)) return "–";
  const v = Number(x);
  if (Number.isInteger(v)) return String(v);
  return v.toFixed(Math.abs(v) >= 100 ? 1 : digits).replace(/0+$/, "").replace(/\.$/, "");
}
function fmtDuration(sec) {
  if (sec === null || sec === undefined) return "–";
  if (sec < 1) return `${Math.round(sec * 1000)} ms`;
  if (sec < 60) return `${sec.toFixed(sec < 10 ? 2 : 1)} s`;
  const m = Math.floor(sec / 60);
  if (m < 60) return `${m}m ${Math.round(sec % 60)}s`;
  return `${Math.floor(m / 60)}h ${m % 60}m`;
}
function fmtAgo(ts) {
  if (!ts) return "–";
  const d = Date.now() / 1000 - ts;
  if (d < 5) return "just now";
  if (d < 60) return `${Math.round(d)} s ago`;
  if (d < 3600) return `${Math.round(d / 60)} min ago`;
  if (d < 86400) return `${Math.round(d / 3600)} h ago`;
  return new Date(ts * 1000).toLocaleDateString();
}
const fmtTime = (ts) => (ts ? new Date(ts * 1000).toLocaleString() : "–");
const pct = (x) => (x === null || x === undefined ? "–" : `${(x * 100).toFixed(1)} %`);
function json(v) {
  if (typeof v === "string") return v;
  try { return JSON.stringify(v, null, 2); } catch (e) { return String(v); }
}
function oneLine(v, n = 140) {
  const t = (typeof v === "string" ? v : JSON.stringify(v) || "").replace(/\s+/g, " ").trim();
  return t.length > n ? t.slice(0, n - 1) + "…" : t;
}

function agentColor(name) {
  let x = 0;
  for (const ch of name) x = (x * 31 + ch.charCodeAt(0)) >>> 0;
  const hue = x % 360;
  return { color: `hsl(${hue} 55% 32%)`, background: `hsl(${hue} 70% 95%)`, borderColor: `hsl(${hue} 55% 85%)` };
}
function agentBadge(name) {
  const el = h("span", { class: "agent", title: "sub-agent" }, name || "unnamed");
  Object.assign(el.style, name ? agentColor(name) : { color: "var(--muted)", background: "var(--line-soft)" });
  return el;
}
const statusPill = (st) => h("span", { class: `pill st-${st}` }, st);

// -- routing ------------------------------------------------------------------------------------------------
// #/s/<source>/<view>[/<rollout id>]?<filters>

function parseRoute() {
  const raw = location.hash.replace(/^#/, "");
  const [path, query] = raw.split("?");
  const parts = path.split("/").filter(Boolean).map(decodeURIComponent);
  const params = Object.fromEntries(new URLSearchParams(query || ""));
  if (parts[0] !== "s" || !parts[1]) return { view: "home", params };
  return { source: parts[1], view: parts[2] || "overview", id: parts[3], params };
}
function href(source, view, id, params) {
  let out = `#/s/${encodeURIComponent(source)}/${view}`;
  if (id) out += `/${encodeURIComponent(id)}`;
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params || {})) if (v !== null && v !== undefined && v !== "") q.set(k, v);
  const qs = q.toString();
  return qs ? `${out}?${qs}` : out;
}
function go(url) { if (location.hash !== url) location.hash = url; else render(); }
