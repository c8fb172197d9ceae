// tether dashboard, part 2 of 4: the sidebar, the view dispatcher, the overview curves, the rollout list and
// the resources page. Uses util.js.
"use strict";

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
      h("dt", {}, "LLM"), h("dd", {}, v.llm ? (v.llm.base_url ? `${v.llm.model} at ${v.llm.base_url}` : v.llm.model || "–") : "–"),
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
