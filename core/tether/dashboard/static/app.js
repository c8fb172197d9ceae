// tether dashboard, part 4 of 4: a small single-page app over the JSON under api/. Hand-written, no dependencies.
// Loaded last (after util.js, views.js, rollout.js): live updates and start-up.
"use strict";

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
