// Cascade web UI: plain JS over the REST API and its event streams.
"use strict";

const $ = (sel) => document.querySelector(sel);
const esc = (s) => String(s ?? "").replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" }[c]));
const fmtMs = (v) => (v === null || v === undefined || Number.isNaN(v) ? "-" : Number(v).toFixed(2) + " ms");
const tokenInput = $("#token");
tokenInput.value = localStorage.getItem("cascade-token") || "";
tokenInput.addEventListener("change", () => localStorage.setItem("cascade-token", tokenInput.value));

async function api(path, opts = {}) {
  const headers = Object.assign({ "Content-Type": "application/json" }, opts.headers || {});
  if (tokenInput.value) headers["Authorization"] = "Bearer " + tokenInput.value;
  const res = await fetch(path, Object.assign({}, opts, { headers }));
  const text = await res.text();
  let body = null;
  try { body = text ? JSON.parse(text) : null; } catch (_) { body = { message: text }; }
  if (!res.ok) {
    // Cascade errors: {error: code, message, field?}; OpenAI-style (/v1): {error: {message, param}}
    const err = body && typeof body.error === "object" && body.error ? body.error : body;
    const where = err && (err.field || err.param);
    const text = (err && (err.message || err.error)) || res.statusText;
    throw new Error(where && !String(text).startsWith(where) ? `${where}: ${text}` : text);
  }
  return body;
}

function badge(prov) {
  if (!prov || !prov.badge) return "";
  const cls = prov.badge.toLowerCase() === "synthetic" ? "badge synthetic" : "badge";
  return `<span class="${cls}" title="${esc(prov.description)}">${esc(prov.badge)}</span>`;
}

async function loadStatus() {
  try {
    const s = await api("/api/status");
    const up = Object.entries(s.services || {}).filter(([, v]) => v.up).map(([k]) => k);
    $("#status").textContent = `services up: ${up.join(", ") || "none"}`;
  } catch (e) { $("#status").textContent = "status unavailable: " + e.message; }
}

async function loadTraces() {
  const { traces } = await api("/api/traces");
  const body = $("#traces tbody");
  body.innerHTML = traces.map((t) => `<tr>
    <td>${esc(t.name)}${badge(t.provenance)}</td><td>${esc(t.source_gpu)}</td><td>${esc(t.kind)}</td>
    <td class="state-${esc(t.state)}">${esc(t.state)}</td>
    <td>${t.kernels_prepared}/${t.kernels_total || t.expected_kernels || "?"}</td>
    <td><code>${esc(t.id)}</code></td></tr>`).join("");
  const sel = $("#nr-trace");
  const runnable = traces.filter((t) => t.state === "ready" && !(t.provenance && t.provenance.read_only));
  sel.innerHTML = runnable.map((t) => `<option value="${esc(t.id)}">${esc(t.name)} (${esc(t.source_gpu)})</option>`).join("");
}

async function loadConfigs() {
  const { configs } = await api("/api/configs");
  $("#nr-configs").innerHTML = "<legend>GPU configurations</legend>" + configs.map((c) =>
    `<label><input type="checkbox" name="cfg" value="${esc(c.id)}" data-models="${esc((c.models || []).join(" "))}"> ${esc(c.id)} <small>${esc(c.name || "")}${c.accelsim ? " (accel-sim)" : ""}</small></label>`).join("");
  $("#nr-configs").addEventListener("change", offerModels);
  offerModels();
}

// Only models every checked configuration can run (accel-sim where it is configured).
function offerModels() {
  const boxes = [...document.querySelectorAll("input[name=cfg]")];
  const checked = boxes.filter((b) => b.checked);
  const pool = checked.length ? checked : boxes;
  const all = ["auto", "scaled", "analytical", "roofline", "accel-sim"];
  const ok = all.filter((m) => pool.length && (checked.length
    ? pool.every((b) => (b.dataset.models || "").split(" ").includes(m))
    : pool.some((b) => (b.dataset.models || "").split(" ").includes(m))));
  const sel = $("#nr-model");
  const keep = sel.value;
  sel.innerHTML = (ok.length ? ok : all.slice(0, 4)).map((m) => `<option>${esc(m)}</option>`).join("");
  if ([...sel.options].some((o) => o.value === keep)) sel.value = keep;
}

async function loadRuns() {
  const { runs } = await api("/api/runs");
  $("#runs tbody").innerHTML = runs.map((r) => `<tr>
    <td><code>${esc(r.id)}</code>${badge(r.provenance)}</td><td>${esc(r.trace_id)}</td>
    <td>${esc((r.configs || []).join(", "))}</td><td>${r.replicas}</td><td>${esc(r.model)}</td>
    <td class="state-${esc(r.state)}">${esc(r.state)}</td>
    <td><button data-run="${esc(r.id)}">open</button></td></tr>`).join("");
  document.querySelectorAll("button[data-run]").forEach((b) => b.addEventListener("click", () => openRun(b.dataset.run)));
}

async function loadModels() {
  try {
    const { data } = await api("/v1/models");
    $("#sc-model").innerHTML = data.map((m) => `<option>${esc(m.id)}</option>`).join("");
  } catch (_) { /* no finished sims yet */ }
}

let currentStream = null;
const sims = new Map();

function renderSims() {
  $("#rd-sims").innerHTML = "<table><thead><tr><th>Sim</th><th>Config</th><th>Replica</th><th>State</th><th>Progress</th><th>Kernels</th><th>ETA</th><th>Attempts</th><th>Error</th></tr></thead><tbody>" +
    [...sims.values()].map((s) => `<tr><td><code>${esc(s.id)}</code></td><td>${esc(s.config)}</td><td>${s.replica}</td>
      <td class="state-${esc(s.state)}">${esc(s.state)}</td>
      <td><span class="bar"><span style="width:${Math.min(100, s.percent || 0)}%"></span></span> ${(s.percent || 0).toFixed(0)}%</td>
      <td>${s.kernels_done}/${s.kernels_total}</td><td>${s.eta_s != null ? s.eta_s.toFixed(1) + " s" : "-"}</td>
      <td>${s.attempts}</td><td>${esc(s.error || "")}</td></tr>`).join("") + "</tbody></table>";
}

function expectedError(c) {
  const a = c.accuracy;
  if (!a) return "-";
  const text = a.mape_pct != null ? `${a.mape_pct.toFixed(1)}% MAPE` : "not measured";
  const calib = a.target_calibrated ? "" : ' <span class="counterfactual">uncalibrated GPU</span>';
  return `<span class="accuracy" title="${esc(a.basis || "")}">${text}</span>${calib}`;
}

function extrapolatedCell(c) {
  if (c.extrapolated == null) return "-";
  const why = Object.entries(c.extrapolation || {}).map(([k, v]) => `${v}: ${k}`).join("; ");
  return `<span title="${esc(why)}">${c.extrapolated}/${c.kernel_count ?? "?"}</span>`;
}

async function renderResults(runId) {
  try {
    const res = await api(`/api/runs/${encodeURIComponent(runId)}/results`);
    const rows = (res.configs || []).map((c) => `<tr><td>${esc(c.config)}</td>
      <td>${fmtMs(c.baseline_e2e_ms)}</td><td>${fmtMs(c.predicted_e2e_ms)}</td>
      <td>${c.counterfactual ? '<span class="counterfactual">counterfactual</span>' : (c.error_pct != null ? (c.error_pct >= 0 ? "+" : "") + c.error_pct.toFixed(2) + "%" : "-")}</td>
      <td>${esc(c.model || "")}</td><td>${esc(c.calibration || "")}</td>
      <td>${expectedError(c)}</td><td>${extrapolatedCell(c)}</td></tr>`).join("");
    let html = `<table><thead><tr><th>Config</th><th>Real mean E2E</th><th>Predicted mean E2E</th><th>Error</th><th>Model</th><th>Calibration</th><th>Expected kernel error</th><th>Extrapolated kernels</th></tr></thead><tbody>${rows}</tbody></table>`;
    if (res.reference) {
      html += `<h4>Recorded reference (${esc(res.reference.badge || "Sample")})</h4><table><thead><tr><th>Config</th><th>Real mean E2E</th><th>Simulated mean E2E</th><th>Error</th></tr></thead><tbody>` +
        res.reference.configs.map((c) => `<tr><td>${esc(c.config)}</td><td>${fmtMs(c.real_e2e_ms)}</td><td>${fmtMs(c.simulated_e2e_ms)}</td><td>${c.counterfactual ? '<span class="counterfactual">counterfactual</span>' : (c.error_pct != null ? (c.error_pct >= 0 ? "+" : "") + c.error_pct.toFixed(2) + "%" : "-")}</td></tr>`).join("") + "</tbody></table>";
      const notes = res.reference.notes || res.reference.caveats || [];
      if (notes.length) html += `<ul class="notes">${notes.map((n) => `<li>${esc(n)}</li>`).join("")}</ul>`;
    }
    for (const c of res.configs || []) {
      const top = (c.top_kernels || []).slice(0, 5);
      if (top.length) html += `<h4>${esc(c.config)}: top kernels</h4><table><thead><tr><th>Kernel</th><th>Predicted</th><th>Regime</th></tr></thead><tbody>` +
        top.map((k) => `<tr><td>${esc(k.name)}</td><td>${fmtMs(k.predicted_ms)}</td><td>${esc(k.regime)}</td></tr>`).join("") + "</tbody></table>";
    }
    $("#rd-results").innerHTML = html;
  } catch (e) { $("#rd-results").textContent = e.message; }
}

async function openRun(runId) {
  $("#run-detail").hidden = false;
  $("#rd-id").textContent = runId;
  $("#rd-json").href = `/api/runs/${encodeURIComponent(runId)}/results?format=json`;
  $("#rd-csv").href = `/api/runs/${encodeURIComponent(runId)}/results?format=csv`;
  const detail = await api(`/api/runs/${encodeURIComponent(runId)}`);
  $("#rd-badge").innerHTML = badge(detail.run.provenance);
  $("#rd-note").textContent = (detail.run.provenance && detail.run.provenance.description) || "";
  sims.clear();
  (detail.sims || []).forEach((s) => sims.set(s.id, s));
  renderSims();
  renderResults(runId);
  if (currentStream) currentStream.close();
  currentStream = new EventSource(`/api/runs/${encodeURIComponent(runId)}/events`);
  currentStream.addEventListener("sim", (ev) => {
    const s = JSON.parse(ev.data);
    sims.set(s.id, Object.assign(sims.get(s.id) || {}, s));
    renderSims();
  });
  currentStream.addEventListener("run", (ev) => {
    const r = JSON.parse(ev.data);
    if (["completed", "failed", "cancelled"].includes(r.state)) { renderResults(runId); loadRuns(); loadModels(); }
  });
}

$("#newrun").addEventListener("submit", async (ev) => {
  ev.preventDefault();
  const configs = [...document.querySelectorAll("input[name=cfg]:checked")].map((i) => i.value);
  try {
    const run = await api("/api/runs", { method: "POST", body: JSON.stringify({
      trace_id: $("#nr-trace").value, configs, replicas: Number($("#nr-replicas").value), model: $("#nr-model").value }) });
    $("#nr-msg").textContent = `run ${run.id} ${run.state}`;
    await loadRuns();
    openRun(run.id);
  } catch (e) { $("#nr-msg").textContent = e.message; }
});

$("#scenario").addEventListener("submit", async (ev) => {
  ev.preventDefault();
  try {
    const res = await api("/api/scenarios", { method: "POST", body: JSON.stringify({
      model: $("#sc-model").value,
      arrival: { pattern: "poisson", rate: Number($("#sc-rate").value) },
      lengths: { prompt: { kind: "fixed", value: Number($("#sc-prompt").value) }, output: { kind: "fixed", value: Number($("#sc-output").value) } },
      n_requests: Number($("#sc-n").value), replicas: Number($("#sc-replicas").value), seed: 0 }) });
    $("#sc-out").textContent = res.summary || JSON.stringify(res, null, 2);
  } catch (e) { $("#sc-out").textContent = e.message; }
});

async function refresh() {
  await Promise.allSettled([loadStatus(), loadTraces(), loadRuns()]);
}
Promise.allSettled([loadConfigs(), loadModels()]).then(refresh);
setInterval(refresh, 5000);
