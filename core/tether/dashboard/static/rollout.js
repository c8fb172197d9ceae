// tether dashboard, part 3 of 4: one rollout (its attempt, the call tree, LLM bodies, token folds). Uses util.js.
"use strict";

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
