// tether dashboard: a small single-page app over the JSON under api/. Hand-written, no dependencies.
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

// -- sidebar ------------------------------------------------------------------------------------------------

async function loadSources() {
  const data = await api("sources");
  state.sources = data.sources;
  const list = document.getElementById("sources");
  const current = state.route && state.route.source;
  list.replaceChildren(
    ...data.sources.map((src) => {
      const bits = [];
      if (src.step !== undefined) bits.push(`step ${src.step}`);
      if (src.reward !== undefined) bits.push(`reward ${fmtNum(src.reward, 2)}`);
      if (src.accuracy !== undefined) bits.push(`acc ${pct(src.accuracy)}`);
      if (!bits.length) bits.push(src.has_store ? src.store || "store" : "no metrics yet");
      const live = src.updated_at && Date.now() / 1000 - src.updated_at < 120;
      return h("li", {},
        h("a", { href: href(src.name, "overview"), class: src.name === current ? "active" : null, title: src.path || src.store || src.name },
          h("div", { class: "source-name" }, h("span", { class: "txt" }, src.name), h("span", { class: "kind" }, src.kind),
            live ? h("span", { class: "pill st-running", title: "metrics written in the last 2 minutes" }, "live") : null),
          h("div", { class: "source-meta" }, bits.join(" · "))));
    }));
  const hint = document.getElementById("sources-hint");
  hint.textContent = data.sources.length ? "" :
    `Nothing to show yet: no run folders in ${data.runs_root || "the runs folder"} and no --store.`;
  return data;
}

// -- views --------------------------------------------------------------------------------------------------

async function render() {
  const route = parseRoute();
  state.route = route;
  const main = document.getElementById("main");
  try {
    if (!state.sources.length) await loadSources();
    if (route.view === "home") {
      if (state.sources.length) { location.replace(href(state.sources[0].name, state.sources[0].has_metrics ? "overview" : "rollouts")); return; }
      main.replaceChildren(emptyHome());
      return;
    }
    const src = state.sources.find((x) => x.name === route.source);
    if (!src) { await loadSources(); }
    const source = state.sources.find((x) => x.name === route.source);
    if (!source) { main.replaceChildren(errorBanner(`No run or store named “${route.source}”.`)); return; }
    markActive(source.name);
    if (route.view === "rollout") await renderRollout(main, source, route.id, route.params);
    else if (route.view === "rollouts") await renderRollouts(main, source, route.params);
    else if (route.view === "resources") await renderResources(main, source, route.params);
    else await renderOverview(main, source);
  } catch (err) {
    main.replaceChildren(errorBanner(err.message));
  }
}

function markActive(name) {
  for (const a of document.querySelectorAll(".source-list a")) {
    a.classList.toggle("active", a.querySelector(".txt").textContent === name);
  }
}

const errorBanner = (msg) => h("div", { class: "error-banner", role: "alert" }, msg);

function emptyHome() {
  return h("div", { class: "empty-box" },
    h("h2", {}, "Nothing to show yet"),
    h("p", {}, "Start the dashboard with a store, or next to a folder of runs:"),
    h("p", {}, h("code", {}, "tether dashboard --store sqlite:///runs/tether.db --runs runs")),
    h("p", {}, "Run folders appear here as ", h("code", {}, "Trainer.fit"), " writes them."));
}

function sourceHead(source, view) {
  const tabs = [["overview", "Overview"], ["rollouts", "Rollouts"], ["resources", "Resources"]];
  const where = [source.kind === "run" ? `run folder ${source.path}` : null, source.store ? `store ${source.store}` : null]
    .filter(Boolean).join(" · ");
  return [
    h("div", { class: "page-head" }, h("div", {}, h("h1", {}, source.name), h("div", { class: "subtitle" }, where))),
    h("nav", { class: "tabs" }, tabs.map(([v, label]) =>
      h("a", { href: href(source.name, v), class: v === view ? "active" : null }, label))),
  ];
}

// -- overview: curves ------------------------------------------------------------------------------------------

async function renderOverview(main, source) {
  const cache = state.metrics[source.name] || (state.metrics[source.name] = { records: [], next: 0 });
  if (source.has_metrics) {
    const got = await api("metrics", { source: source.name, since: cache.next });
    if (got.reset) cache.records = [];
    cache.records.push(...got.records);
    cache.next = got.next;
  }
  let counts = null;
  if (source.has_store) {
    try { counts = (await api("rollouts", { source: source.name, limit: 1 })).counts; } catch (e) { counts = null; }
  }
  const recs = cache.records;
  const train = recs.filter((r) => r.kind === "train");
  const evals = recs.filter((r) => r.kind === "eval");
  const lastTrain = train[train.length - 1];
  const accKey = evals.some((r) => r.greedy_accuracy !== undefined) ? "greedy_accuracy" : "sampled_accuracy";
  const accs = evals.map((r) => r[accKey]).filter((x) => typeof x === "number");
  const stats = h("div", { class: "stats" },
    stat("Steps", fmtInt(Math.max(lastTrain ? lastTrain.step : 0, ...evals.map((r) => r.step || 0))),
      recs.length ? `last written ${fmtAgo(recs[recs.length - 1].time)}` : "no metrics yet"),
    stat("Train reward", lastTrain ? fmtNum(lastTrain.reward) : "–",
      lastTrain ? `mean of ${fmtInt(lastTrain.rollouts)} rollouts at step ${lastTrain.step}` : "sampled, per step"),
    stat("Held-out accuracy", accs.length ? pct(accs[accs.length - 1]) : "–",
      accs.length ? `best ${pct(Math.max(...accs))} · ${accKey === "greedy_accuracy" ? "greedy" : "T=1"}` : "from eval steps"),
    stat("Rollouts in store", counts ? fmtInt(counts.all) : "–",
      counts ? `${fmtInt(counts.running)} running · ${fmtInt(counts.queued)} queued · ${fmtInt(counts.failed)} failed` : (source.has_store ? "" : "no store for this run")));
  const chartCard = h("div", { class: "card" },
    h("div", { class: "card-head" }, h("h2", {}, "Reward and held-out accuracy"),
      h("span", { class: "card-note" }, source.has_metrics ? `${fmtInt(recs.length)} records from metrics.jsonl` : "")));
  if (!train.length && !evals.length) {
    chartCard.append(h("div", { class: "empty" },
      source.has_metrics ? "No train or eval records yet: the curve appears as fit writes them."
        : "This source has no metrics.jsonl. Curves come from run folders: start the dashboard with --runs <folder> next to Trainer.fit's runs."));
  } else {
    const series = [
      { label: "train reward (sampled)", color: "#6366f1", points: train.map((r) => [r.step, r.reward]) },
      { label: "held-out accuracy (greedy)", color: "#059669", points: evals.filter((r) => typeof r.greedy_accuracy === "number").map((r) => [r.step, r.greedy_accuracy]), dots: true },
      { label: "held-out accuracy (T=1)", color: "#d97706", points: evals.filter((r) => typeof r.sampled_accuracy === "number").map((r) => [r.step, r.sampled_accuracy]), dots: true },
    ].filter((x) => x.points.length);
    chartCard.append(legend(series), lineChart(series));
  }
  const extra = lastTrain ? h("div", { class: "card" }, h("h2", {}, `Last train step (${lastTrain.step})`),
    h("dl", { class: "kv" }, Object.entries(lastTrain).filter(([k]) => !["kind", "time"].includes(k)).flatMap(([k, v]) =>
      [h("dt", {}, k), h("dd", {}, typeof v === "number" ? fmtNum(v, 4) : json(v))]))) : null;
  main.replaceChildren(...sourceHead(source, "overview"), stats, chartCard, extra || "");
}

const stat = (label, value, sub) =>
  h("div", { class: "stat" }, h("div", { class: "stat-label" }, label), h("div", { class: "stat-value" }, value), h("div", { class: "stat-sub" }, sub || ""));

function legend(series) {
  return h("div", { class: "legend" }, series.map((x) => h("span", {}, h("i", { style: { background: x.color } }), x.label)));
}

function lineChart(series) {
  const W = 960, H = 300, m = { l: 44, r: 16, t: 14, b: 34 };
  const xs = series.flatMap((x) => x.points.map((p) => p[0]));
  const ys = series.flatMap((x) => x.points.map((p) => p[1]));
  let x0 = Math.min(...xs), x1 = Math.max(...xs);
  if (x0 === x1) { x0 -= 1; x1 += 1; }
  const y0 = Math.min(0, ...ys), y1 = Math.max(1, ...ys);
  const X = (v) => m.l + ((v - x0) / (x1 - x0)) * (W - m.l - m.r);
  const Y = (v) => H - m.b - ((v - y0) / (y1 - y0)) * (H - m.t - m.b);
  const svg = s("svg", { class: "chart", viewBox: `0 0 ${W} ${H}`, preserveAspectRatio: "none", role: "img", "aria-label": "reward and accuracy by step" });
  const grid = s("g", { class: "grid" }), axis = s("g", { class: "axis" });
  for (let i = 0; i <= 5; i++) {
    const v = y0 + ((y1 - y0) * i) / 5;
    grid.append(s("line", { x1: m.l, x2: W - m.r, y1: Y(v), y2: Y(v) }));
    axis.append(s("text", { x: m.l - 8, y: Y(v) + 4, "text-anchor": "end" }, fmtNum(v, 2)));
  }
  const ticks = Math.min(8, Math.max(1, Math.round(x1 - x0)));
  for (let i = 0; i <= ticks; i++) {
    const v = x0 + ((x1 - x0) * i) / ticks;
    axis.append(s("text", { x: X(v), y: H - m.b + 16, "text-anchor": "middle" }, fmtNum(Math.round(v * 10) / 10, 1)));
  }
  axis.append(s("text", { class: "axis-title", x: W - m.r, y: H - 4, "text-anchor": "end" }, "step"));
  svg.append(grid, axis);
  for (const x of series) {
    const d = x.points.map((p, i) => `${i ? "L" : "M"}${X(p[0]).toFixed(1)},${Y(p[1]).toFixed(1)}`).join("");
    svg.append(s("path", { class: "series", d, stroke: x.color, "vector-effect": "non-scaling-stroke" }));
    if (x.dots || x.points.length < 40) {
      for (const p of x.points) {
        svg.append(s("circle", { cx: X(p[0]), cy: Y(p[1]), r: 3.2, fill: x.color },
          s("title", {}, `${x.label} · step ${p[0]}: ${fmtNum(p[1], 4)}`)));
      }
    }
  }
  return svg;
}

// -- rollouts ---------------------------------------------------------------------------------------------

const STATUSES = ["succeeded", "failed", "running", "queued", "cancelled"];

async function renderRollouts(main, source, params) {
  if (!source.has_store) {
    main.replaceChildren(...sourceHead(source, "rollouts"), h("div", { class: "empty-box" }, "This run has no store.db: it used another store. Start the dashboard with --store <url> to see its rollouts."));
    return;
  }
  const offset = Number(params.offset || 0);
  const data = await api("rollouts", { source: source.name, ...params, offset, limit: PAGE });
  const set = (changes) => go(href(source.name, "rollouts", null, { ...params, offset: 0, ...changes }));
  // counts: taken in the background and shown with their time; null while the first count of a big store runs
  const counts = data.counts || {};
  const chips = h("div", { class: "chips", role: "group", "aria-label": "status",
    title: data.counts ? `counted at ${new Date(data.refreshed_at * 1000).toLocaleTimeString()} (taken again every few seconds)` : "counting…" },
    [["", "All", counts.all], ...STATUSES.map((st) => [st, st[0].toUpperCase() + st.slice(1), counts[st]])].map(([st, label, n]) =>
      h("button", { class: `chip ${(params.status || "") === st ? "active" : ""}`, dataset: { status: st || "all" }, onclick: () => set({ status: st }) },
        label, h("span", { class: "count" }, n === undefined ? "…" : fmtInt(n)))));
  const agentList = h("datalist", { id: "agent-names" }, data.agents.map((a) => h("option", { value: a })));
  const input = (name, attrs) => h("input", { name, value: params[name] || "", ...attrs,
    onchange: (e) => set({ [name]: e.target.value.trim() }) });
  const filters = h("div", { class: "filters" }, chips,
    h("label", { class: "field" }, "Sub-agent", input("agent", { class: "agent", list: "agent-names", placeholder: "any" }), agentList),
    h("label", { class: "field" }, "Reward", input("min_reward", { class: "num", type: "number", step: "any", placeholder: "min" }), "–",
      input("max_reward", { class: "num", type: "number", step: "any", placeholder: "max" })),
    h("label", { class: "field" }, "Mode", h("select", { name: "mode", onchange: (e) => set({ mode: e.target.value }) },
      [["", "all"], ["train", "train"], ["val", "val"]].map(([v, l]) => h("option", { value: v, selected: (params.mode || "") === v }, l)))),
    h("label", { class: "field" }, "Sort", h("select", { name: "sort", onchange: (e) => set({ sort: e.target.value }) },
      [["newest", "newest first"], ["oldest", "oldest first"], ["reward_desc", "reward, high first"], ["reward_asc", "reward, low first"]]
        .map(([v, l]) => h("option", { value: v, selected: (params.sort || "newest") === v }, l)))),
    h("label", { class: "field" }, input("q", { class: "search", type: "search", placeholder: "Search rollout or task id", "aria-label": "search by rollout id" })));
  const open = (row) => go(href(source.name, "rollout", row.rollout_id, { back: location.hash }));
  const table = h("table", { class: "rows" },
    h("thead", {}, h("tr", {}, ["Rollout", "Status", "Reward", "Attempts", "Duration", "Sub-agents", "Calls", "Version", "Created"]
      .map((t, i) => h("th", { class: [2, 3, 4, 6].includes(i) ? "num" : null }, t)))),
    h("tbody", {}, data.rows.length ? data.rows.map((r) => h("tr", { class: "clickable", dataset: { id: r.rollout_id }, onclick: () => open(r) },
      h("td", { class: "id-cell" }, h("div", { class: "mono" }, h("a", { href: href(source.name, "rollout", r.rollout_id), onclick: (e) => { e.preventDefault(); } }, r.rollout_id)),
        h("div", { class: "sub ellipsis", title: r.task_id }, r.task_id === r.rollout_id ? "" : r.task_id, r.mode === "train" ? h("span", { class: "tag train" }, "train") : h("span", { class: "tag" }, r.mode),
          r.candidate ? h("span", { class: "tag" }, `APO ${r.candidate}`) : null,
          r.record ? h("span", { class: "tag" }, `${r.record} record`) : null)),
      h("td", {}, statusPill(r.status), r.error ? h("div", { class: "sub ellipsis err-text", title: r.error }, r.error) : null),
      h("td", { class: "num" }, fmtNum(r.reward), r.reward !== null ? h("span", { class: "rewardbar" }, h("i", { style: { width: `${Math.max(0, Math.min(1, r.reward)) * 100}%` } })) : null),
      h("td", { class: "num" }, `${r.attempts} / ${r.max_attempts}`),
      h("td", { class: "num" }, fmtDuration(r.duration_s)),
      h("td", {}, r.agents.length ? r.agents.map(agentBadge) : h("span", { class: "sub" }, "–")),
      h("td", { class: "num" }, `${r.llm_calls} LLM · ${r.tool_calls} tool`, r.tool_errors ? h("span", { class: "err-text" }, ` · ${r.tool_errors} err`) : null),
      h("td", {}, r.resources_version !== null ? `v${r.resources_version}` : "–"),
      h("td", { title: fmtTime(r.created_at) }, fmtAgo(r.created_at))))
      : h("tr", {}, h("td", { colspan: 9, class: "empty" }, "No rollout matches these filters."))));
  const pager = makePager(data, params, (o) => go(href(source.name, "rollouts", null, { ...params, offset: o })));
  main.replaceChildren(...sourceHead(source, "rollouts"), filters, h("div", { class: "table-wrap" }, table), pager);
  state.refreshed = data.refreshed_at;
}

function makePager(data, params, to) {
  // total null: a reward or search filter, not counted (that would read the whole store); next_offset says if more follow
  const counted = data.total !== null;
  const first = data.rows.length || (counted && data.total) ? data.offset + 1 : 0;
  const of = counted ? ` of ${fmtInt(data.total)}` : (data.next_offset !== null ? " (more follow)" : "");
  const stack = (params.prev || "").split(",").filter(Boolean).map(Number);
  let info;
  if (params.agent) {
    info = `${fmtInt(data.rows.length)} match${data.rows.length === 1 ? "" : "es"} for sub-agent “${params.agent}” · scanned rows ${fmtInt(data.offset + (data.scanned ? 1 : 0))}–${fmtInt(data.offset + data.scanned)}${of}`
      + (data.exact ? "" : " (stopped early: more may match)");
  } else {
    info = `Showing ${fmtInt(first)}–${fmtInt(data.offset + data.rows.length)}${of}`;
  }
  const pages = counted ? Math.max(1, Math.ceil(data.total / PAGE)) : Math.floor(data.offset / PAGE) + (data.next_offset !== null ? 2 : 1);
  const page = Math.floor(data.offset / PAGE) + 1;
  const controls = h("div", { class: "controls" });
  if (params.agent) {
    const prev = stack.length ? stack[stack.length - 1] : null;
    controls.append(
      h("button", { class: "btn", disabled: data.offset === 0, onclick: () => go(hashWith({ offset: 0, prev: "" })) }, "« First"),
      h("button", { class: "btn", disabled: prev === null, onclick: () => go(hashWith({ offset: prev, prev: stack.slice(0, -1).join(",") })) }, "‹ Prev"),
      h("button", { class: "btn", disabled: data.next_offset === null, onclick: () => go(hashWith({ offset: data.next_offset, prev: [...stack, data.offset].join(",") })) }, "Next ›"));
  } else {
    const pageInput = h("input", { type: "number", min: 1, max: pages, value: page, "aria-label": "page",
      onchange: (e) => to(Math.max(0, Math.min(pages - 1, Number(e.target.value) - 1)) * PAGE) });
    controls.append(
      h("button", { class: "btn", disabled: data.offset === 0, onclick: () => to(0) }, "« First"),
      h("button", { class: "btn", disabled: data.offset === 0, onclick: () => to(Math.max(0, data.offset - PAGE)) }, "‹ Prev"),
      h("span", {}, "Page"), pageInput, h("span", {}, counted ? `of ${fmtInt(pages)}` : ""),
      h("button", { class: "btn", disabled: data.next_offset === null, onclick: () => to(data.next_offset) }, "Next ›"),
      h("button", { class: "btn", disabled: data.next_offset === null || !counted, onclick: () => to((pages - 1) * PAGE) }, "Last »"));
  }
  return h("div", { class: "pager" }, h("span", { class: "pager-info" }, info), controls);
}

function hashWith(changes) {
  const r = parseRoute();
  return href(r.source, r.view, r.id, { ...r.params, ...changes });
}

// -- one rollout -------------------------------------------------------------------------------------------

async function renderRollout(main, source, id, params) {
  const d = await api("rollout", { source: source.name, id, attempt: params.attempt });
  const r = d.rollout;
  const attempt = d.attempts.find((a) => a.attempt_id === d.attempt_id);
  const started = d.attempts.length ? d.attempts[0].started_at : null;
  const ended = d.attempts.length ? d.attempts[d.attempts.length - 1].finished_at : null;
  // only a route of this page (``#/...``): never a javascript: or another site's address
  const back = typeof params.back === "string" && params.back.startsWith("#/") ? params.back : href(source.name, "rollouts");
  const agents = [...new Set(d.tree.flatMap(collectAgents))];
  const head = h("div", {},
    h("div", { class: "crumbs" }, h("a", { href: back }, `← ${source.name} · rollouts`)),
    h("div", { class: "page-head" }, h("div", {},
      h("h1", { class: "mono" }, r.rollout_id),
      h("div", { class: "subtitle" }, `task ${r.task_id} · ${r.mode} · created ${fmtTime(r.created_at)}`))));
  const stats = h("div", { class: "stats" },
    stat("Status", statusPill(r.status), r.error ? oneLine(r.error, 80) : ""),
    stat("Reward", fmtNum(r.reward), d.transitions.length && d.transitions[0].advantage !== null ? `advantage ${fmtNum(d.transitions[0].advantage)} in a group of ${d.group_size}` : (r.mode === "train" ? "" : "evaluation rollout")),
    stat("Attempts", `${r.attempt_count} / ${r.max_attempts}`, attempt ? `showing attempt ${attempt.index} (${attempt.status})` : "none yet"),
    stat("Duration", fmtDuration(started && (ended || (r.status === "running" ? Date.now() / 1000 : null)) ? (ended || Date.now() / 1000) - started : null), `resources v${r.resources_version ?? "–"}`),
    stat("Sub-agents", agents.length ? h("span", {}, agents.map(agentBadge)) : "–",
      d.optimize ? `optimized: ${d.optimize.join(", ")}` : "all trainable (no optimize= recorded)"));
  const credit = d.credit ? `credit ${d.credit.rule}${d.credit.tool_error_penalty ? `, tool penalty ${d.credit.tool_error_penalty}` : ""}${d.credit.rule === "per_call" ? `, gamma ${d.credit.gamma}` : ""}: as training assigned it` : "one per LLM call, as the algorithm builds them";
  const attemptTabs = d.attempts.length > 1 ? h("div", { class: "attempt-tabs" }, d.attempts.map((a) =>
    h("a", { class: `btn ${a.attempt_id === d.attempt_id ? "active" : ""}`, href: href(source.name, "rollout", id, { ...params, attempt: a.attempt_id }) },
      `Attempt ${a.index} · ${a.status}`))) : null;
  const io = h("div", { class: "grid-2" },
    h("div", { class: "card" }, h("h2", {}, "Input"), h("pre", { class: "block boxed" }, json(r.input))),
    h("div", { class: "card" }, h("h2", {}, r.error ? "Output and error" : "Output"), h("pre", { class: "block boxed" }, json(r.output)),
      r.error ? h("pre", { class: "block boxed error" }, r.error) : null));
  const trace = h("div", { class: "card" },
    h("div", { class: "card-head" }, h("h2", {}, "Trace"), h("span", { class: "card-note" }, `${d.span_count} spans`, attemptTabs ? " · " : "", attemptTabs || "")),
    d.tree.length ? h("div", { class: "tree" }, h("ul", {}, d.tree.map(treeNode))) : h("div", { class: "empty" }, "No spans recorded for this attempt."));
  const trans = h("div", { class: "card" },
    h("div", { class: "card-head" }, h("h2", {}, "Transitions"), h("span", { class: "card-note" }, credit)),
    d.transitions.length ? h("div", { class: "table-wrap" }, h("table", { class: "rows" },
      h("thead", {}, h("tr", {}, ["Step", "Sub-agent", "Policy", "Trainable", "Value", "Advantage", "Prompt tokens", "Response tokens", "Logprobs", "Weights"].map((t) => h("th", {}, t)))),
      h("tbody", {}, d.transitions.map((t) => h("tr", {},
        h("td", {}, t.step), h("td", {}, agentBadge(t.agent)), h("td", {}, t.policy || "–"),
        h("td", {}, h("span", { class: `tag ${t.trainable ? "yes" : "no"}` }, t.trainable ? "trainable" : "frozen")),
        h("td", {}, fmtNum(t.reward)), h("td", {}, t.advantage === null ? "–" : fmtNum(t.advantage)),
        h("td", {}, t.prompt_tokens ? fmtInt(t.prompt_tokens) : "–"), h("td", {}, t.response_tokens ? fmtInt(t.response_tokens) : "–"),
        h("td", {}, t.has_logprobs ? "yes" : "–"), h("td", {}, t.weights_version === null ? "–" : `w${t.weights_version}`))))))
      : h("div", { class: "empty" }, "No transitions."),
    d.problems.length ? h("ul", { class: "problems" }, d.problems.map((p) => h("li", {}, p))) : null);
  main.replaceChildren(head, stats, trace, trans, io);
  state.liveRollout = !["succeeded", "failed", "cancelled"].includes(r.status);
}

function collectAgents(node) {
  const own = node.agent && ["agent", "llm", "tool"].includes(node.type) ? [node.agent] : [];
  return [...own, ...(node.children || []).flatMap(collectAgents)];
}

function treeNode(node) {
  if (node.type === "agent") {
    return h("li", { class: "agent-group", dataset: { agent: node.agent } },
      h("div", { class: "agent-head" }, agentBadge(node.agent),
        h("span", { class: "sub" }, `${node.llm_calls} LLM call${node.llm_calls === 1 ? "" : "s"} · ${node.tool_calls} tool call${node.tool_calls === 1 ? "" : "s"}`)),
      h("ul", {}, node.children.map(treeNode)));
  }
  let kind, kindClass, title, preview, meta, body;
  if (node.type === "llm") {
    kind = "LLM"; kindClass = "k-llm"; title = node.framework_only ? `${node.name} (framework)` : "chat";
    const calls = (node.response && node.response.tool_calls) || [];
    preview = calls.length ? "→ " + calls.map((c) => `${(c.function || {}).name}(${oneLine((c.function || {}).arguments || "", 60)})`).join(", ")
      : oneLine((node.response && node.response.content) || node.error || "", 160);
    meta = [node.prompt_tokens != null ? `${fmtInt(node.prompt_tokens)} → ${fmtInt(node.completion_tokens)} tok` : null,
      node.latency_ms != null ? `${Math.round(node.latency_ms)} ms` : null].filter(Boolean).join(" · ");
    body = llmBody(node);
  } else if (node.type === "tool") {
    const bad = node.error !== null && node.error !== undefined;
    kind = bad ? "tool ✗" : "tool"; kindClass = bad ? "k-tool-err" : "k-tool"; title = node.tool;
    preview = bad ? `error: ${oneLine(node.error, 140)}` : `→ ${oneLine(node.result, 140)}`;
    meta = "";
    body = h("div", {},
      h("div", { class: "section-label" }, "Arguments"), h("pre", { class: "block boxed" }, json(node.arguments)),
      h("div", { class: "section-label" }, bad ? "Error" : "Result"),
      h("pre", { class: `block boxed ${bad ? "error" : ""}` }, bad ? json(node.error) : json(node.result)),
      bad && node.result !== null && node.result !== undefined ? [h("div", { class: "section-label" }, "The model was told"), h("pre", { class: "block boxed" }, json(node.result))] : null,
      node.call_id ? h("div", { class: "note" }, `tool call id ${node.call_id}`) : null);
  } else if (node.type === "reward") {
    kind = "reward"; kindClass = "k-reward"; title = node.name; meta = "";
    const reason = node.reason !== undefined && node.reason !== null;
    preview = reason ? `${fmtNum(node.value, 2)} · ${oneLine(node.reason, 140)}` : fmtNum(node.value, 4);
    body = reason ? h("div", {},
      h("div", { class: "section-label" }, "Reason"), h("pre", { class: "block boxed" }, node.reason),
      h("div", { class: "section-label" }, "Recorded"), h("pre", { class: "block boxed" }, json(node.details))) : null;
  } else {
    kind = node.type; kindClass = "k-other"; title = node.name; preview = oneLine(node.error || node.attributes, 120); meta = "";
    body = h("div", {}, node.error ? h("pre", { class: "block boxed error" }, node.error) : null, h("pre", { class: "block boxed" }, json(node.attributes)));
  }
  const li = h("li", { class: "node", dataset: { type: node.type, span: node.span_id } });
  const row = h("div", { class: "node-row", onclick: () => body && li.classList.toggle("open") },
    h("span", { class: "caret" }, body ? "▶" : ""), h("span", { class: `node-kind ${kindClass}` }, kind),
    h("span", { class: "node-title" }, title), node.agent && node.type !== "tool" ? agentBadge(node.agent) : null,
    h("span", { class: "node-preview", title: preview }, preview), meta ? h("span", { class: "node-meta" }, meta) : null);
  li.append(row);
  if (body) li.append(h("div", { class: "node-body" }, body));
  if (node.children && node.children.length) li.append(h("ul", {}, node.children.map(treeNode)));
  return li;
}

function llmBody(node) {
  const msgs = node.messages || [];
  const shown = msgs.slice(-2), hidden = msgs.slice(0, -2);
  const out = [];
  const facts = [node.model ? `model ${node.model}` : null, node.finish_reason ? `finish ${node.finish_reason}` : null,
    node.weights_version != null ? `weights v${node.weights_version}` : null,
    node.tools && node.tools.length ? `tools: ${node.tools.join(", ")}` : null,
    node.params && node.params.temperature != null ? `temperature ${node.params.temperature}` : null].filter(Boolean);
  if (facts.length) out.push(h("div", { class: "note" }, facts.join(" · ")));
  out.push(h("div", { class: "section-label" }, `Messages (${msgs.length})`));
  if (hidden.length) out.push(h("details", { class: "fold" }, h("summary", {}, `${hidden.length} earlier message${hidden.length === 1 ? "" : "s"}`), hidden.map(message)));
  out.push(...shown.map(message));
  out.push(h("div", { class: "section-label" }, "Response"), message(node.response || {}));
  if (node.error) out.push(h("div", { class: "section-label" }, "Error"), h("pre", { class: "block boxed error" }, json(node.error)));
  out.push(tokenFold("Prompt token ids", node.prompt_token_ids, null));
  out.push(tokenFold("Response token ids and logprobs", node.response_token_ids, node.logprobs));
  return h("div", {}, out);
}

function message(m) {
  const role = m.role || "assistant";
  const parts = [];
  if (m.content !== null && m.content !== undefined && m.content !== "") parts.push(h("pre", { class: "block" }, json(m.content)));
  for (const c of m.tool_calls || []) {
    const f = c.function || {};
    let args = f.arguments;
    try { args = JSON.stringify(JSON.parse(args), null, 2); } catch (e) { /* keep the text */ }
    parts.push(h("pre", { class: "block" }, `${f.name}(${args})`));
  }
  if (!parts.length) parts.push(h("pre", { class: "block sub" }, "(empty)"));
  return h("div", { class: "msg" }, h("div", { class: `msg-role r-${role}` }, role + (m.tool_call_id ? ` · ${m.tool_call_id}` : "") + (m.name ? ` · ${m.name}` : "")), parts);
}

function tokenFold(label, ids, logprobs) {
  if (!ids || !ids.length) return h("div", { class: "note" }, `${label}: not recorded (the backend returned none)`);
  const fold = h("details", { class: "fold" }, h("summary", {}, `${label} (${fmtInt(ids.length)})`));
  const box = h("div", { class: "tokens" });
  let drawn = false;
  fold.addEventListener("toggle", () => {
    if (drawn || !fold.open) return;
    drawn = true;
    const limit = Math.min(ids.length, 2000);
    for (let i = 0; i < limit; i++) {
      box.append(h("span", { class: "tok" }, String(ids[i]), logprobs && logprobs[i] !== undefined ? h("small", {}, fmtNum(logprobs[i], 3)) : null));
    }
    if (ids.length > limit) box.append(h("span", { class: "sub" }, `… ${fmtInt(ids.length - limit)} more`));
  });
  fold.append(box);
  return fold;
}

// -- resources ------------------------------------------------------------------------------------------------

async function renderResources(main, source, params) {
  if (!source.has_store) {
    main.replaceChildren(...sourceHead(source, "resources"), h("div", { class: "empty-box" }, "This run has no store.db: start the dashboard with --store <url>."));
    return;
  }
  const offset = Number(params.offset || 0);
  const data = await api("resources", { source: source.name, offset, limit: 20 });
  const cards = data.versions.map((v) => h("div", { class: "card version-card", dataset: { version: v.version } },
    h("div", { class: "card-head" }, h("h2", {}, `Version ${v.version}`), h("span", { class: "card-note", title: fmtTime(v.created_at) }, fmtAgo(v.created_at))),
    h("dl", { class: "kv" },
      h("dt", {}, "LLM"), h("dd", {}, v.llm ? `${v.llm.model} at ${v.llm.base_url}` : "–"),
      h("dt", {}, "Sampling"), h("dd", { class: "mono" }, v.llm && Object.keys(v.llm.sampling || {}).length ? JSON.stringify(v.llm.sampling) : "defaults"),
      h("dt", {}, "Rollouts"), h("dd", {}, v.rollouts ? `${fmtInt(v.rollouts)} in the store · mean reward ${fmtNum(v.mean_reward)}` : "none in the store"),
      v.apo.length ? [h("dt", {}, "APO"), h("dd", {}, v.apo.map((c) => h("div", {},
        h("span", { class: "mono" }, c.candidate), ` round ${c.round} · score `, h("strong", {}, fmtNum(c.score)), ` · ${c.status}`, c.in_beam ? h("span", { class: "tag yes" }, "in beam") : null,
        c.edited ? h("span", { class: "sub" }, ` · rewrote ${c.edited}`) : null)))] : null),
    Object.keys(v.prompts).length ? (v.prompts_changed
      ? Object.entries(v.prompts).map(([name, p]) => [h("div", { class: "prompt-name" }, `${name} (${p.engine})`), h("pre", { class: "block boxed" }, p.template)])
      : h("div", { class: "note" }, `Prompts unchanged from version ${v.version - 1}.`)) : h("div", { class: "note" }, "No prompt templates.")));
  const pager = h("div", { class: "pager" }, h("span", {}, data.total ? `Versions ${fmtInt(data.total - offset)}–${fmtInt(Math.max(1, data.total - offset - data.versions.length + 1))} of ${fmtInt(data.total)}` : ""),
    h("div", { class: "controls" },
      h("button", { class: "btn", disabled: offset === 0, onclick: () => go(href(source.name, "resources", null, { offset: Math.max(0, offset - 20) })) }, "‹ Newer"),
      h("button", { class: "btn", disabled: data.next_offset === null, onclick: () => go(href(source.name, "resources", null, { offset: data.next_offset })) }, "Older ›")));
  main.replaceChildren(...sourceHead(source, "resources"),
    ...(data.versions.length ? cards : [h("div", { class: "empty-box" }, "No resources published to this store yet.")]), data.total ? pager : "");
}

// -- live updates -------------------------------------------------------------------------------------------

async function tick() {
  if (state.busy || document.hidden || !document.getElementById("live").checked) return;
  const r = state.route;
  if (!r || r.view === "home") return;
  const active = document.activeElement;
  if (active && ["INPUT", "SELECT"].includes(active.tagName)) return; // do not redraw under the user's typing
  if (r.view === "rollout" && !state.liveRollout) return;
  if (document.querySelector(".node.open, details[open]")) return; // keep what the user unfolded
  state.busy = true;
  try {
    await loadSources();
    const y = window.scrollY;
    await render();
    window.scrollTo(0, y);
    document.getElementById("refreshed").textContent = `updated ${new Date().toLocaleTimeString()}`;
  } catch (e) { /* the next tick tries again */ } finally { state.busy = false; }
}

window.addEventListener("hashchange", () => { render(); window.scrollTo(0, 0); });
window.addEventListener("DOMContentLoaded", async () => {
  try { await loadSources(); } catch (e) { document.getElementById("main").replaceChildren(errorBanner(e.message)); return; }
  await render();
  document.getElementById("refreshed").textContent = `updated ${new Date().toLocaleTimeString()}`;
  state.timer = setInterval(tick, POLL_MS);
});
