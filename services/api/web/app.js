// Cascade web UI: plain JS over the REST API and its event streams; charts from charts.js.
"use strict";

const $ = (sel, root = document) => root.querySelector(sel);
const $$ = (sel, root = document) => [...root.querySelectorAll(sel)];
const esc = (s) => String(s ?? "").replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" }[c]));
const { fmtMs, fmtNs, fmtNum } = Charts;
const pct = (v, digits = 2) => (v === null || v === undefined ? "-" : (v >= 0 ? "+" : "") + Number(v).toFixed(digits) + "%");
const enc = encodeURIComponent;
const TERMINAL = ["completed", "partial", "failed", "cancelled"];

// ---- token: entered once per browser session ------------------------------------------------
const TOKEN_KEY = "cascade-token";
const tokenInput = $("#token");
tokenInput.value = sessionStorage.getItem(TOKEN_KEY) || "";
tokenInput.addEventListener("input", () => {
  sessionStorage.setItem(TOKEN_KEY, tokenInput.value.trim());
  $("#token-box").classList.remove("needed");
  if (!$("#banner").hidden && $("#banner").dataset.kind === "token") hideBanner();
});

function showBanner(html, kind = "error") {
  const b = $("#banner");
  b.innerHTML = html;
  b.dataset.kind = kind;
  b.hidden = false;
}
function hideBanner() { $("#banner").hidden = true; }

// ---- sign-in link: `cascade up` prints /?signin=CODE; the code is exchanged once for the token,
// kept for this browser session, and removed from the address bar (and history) right away
function markSignedIn() {
  $("#token-box").classList.add("signed-in");
  $("#token-box").title = "signed in for this browser session";
}
const signedIn = (async () => {
  const url = new URL(location.href);
  const code = url.searchParams.get("signin");
  if (code === null) return false;
  url.searchParams.delete("signin");
  history.replaceState(history.state, "", url.pathname + url.search + url.hash);
  try {
    const res = await fetch("/api/signin", { method: "POST", headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ code }) });
    const body = await res.json().catch(() => ({}));
    if (!res.ok || !body.token) throw new Error(body.message || res.statusText);
    tokenInput.value = body.token;
    sessionStorage.setItem(TOKEN_KEY, body.token);
    markSignedIn();
    return true;
  } catch (e) {
    showBanner(`Not signed in: ${esc(e.message)}`, "token");
    return false;
  }
})();
if (tokenInput.value) markSignedIn();

class ApiError extends Error {
  constructor(message, status, field) { super(message); this.status = status; this.field = field; }
  // the message without the field name in front (shown beside the field itself)
  get atField() {
    const m = String(this.message);
    const text = this.field && m.startsWith(this.field + ": ") ? m.slice(this.field.length + 2) : m;
    return text.replace(/`/g, "");
  }
}

async function api(path, opts = {}) {
  const headers = Object.assign({}, opts.body ? { "Content-Type": "application/json" } : {}, opts.headers || {});
  const token = tokenInput.value.trim();
  if (token) headers["Authorization"] = "Bearer " + token;
  let res;
  try {
    res = await fetch(path, Object.assign({}, opts, { headers }));
  } catch (e) {
    throw new ApiError("the Cascade api cannot be reached (is `cascade up` running?)", 0);
  }
  const text = await res.text();
  let body = null;
  try { body = text ? JSON.parse(text) : null; } catch (_) { body = { message: text }; }
  if (!res.ok) {
    // Cascade errors: {error: code, message, field?}; OpenAI-style (/v1): {error: {message, param}}
    const err = body && typeof body.error === "object" && body.error ? body.error : body;
    const field = err && (err.field || err.param);
    const message = (err && (err.message || err.error)) || res.statusText;
    if (res.status === 401) {
      $("#token-box").classList.add("needed");
      showBanner(`This needs the API token. Enter it in the <label for="token"><b>API token</b></label> box at the top right
        (printed by <code>cascade up</code>, kept in <code>.cascade/credentials.json</code>); it is kept for this browser session.`, "token");
      tokenInput.focus();
    }
    const error = new ApiError(message, res.status, field);
    error.code = err && typeof err.error === "string" ? err.error : null;
    error.suggestions = (err && err.suggestions) || [];
    throw error;
  }
  return body;
}

function badge(prov) {
  if (!prov || !prov.badge) return "";
  const cls = prov.badge.toLowerCase() === "synthetic" ? "badge synthetic" : "badge";
  return `<span class="${cls}" title="${esc(prov.description)}">${esc(prov.badge)}</span>`;
}
const stateTag = (s) => `<span class="state state-${esc(s)}">${esc(s)}</span>`;
const bar = (p, label) => `<span class="bar" role="progressbar" aria-valuemin="0" aria-valuemax="100" aria-valuenow="${Math.round(p)}" aria-label="${esc(label || "progress")}"><span style="width:${Math.max(0, Math.min(100, p))}%"></span></span>`;
const ago = (t) => {
  if (!t) return "";
  const s = Date.now() / 1000 - t;
  if (s < 60) return "just now";
  if (s < 3600) return `${Math.floor(s / 60)} min ago`;
  if (s < 86400) return `${Math.floor(s / 3600)} h ago`;
  return new Date(t * 1000).toISOString().slice(0, 10);
};

// ---- kernel names: demangled and shortened ---------------------------------------------------
// A small Itanium demangler for the nested names of CUDA kernels (enough to read them, not a full one).
function demangle(name) {
  if (!name || !name.startsWith("_Z")) return name;
  let i = 2;
  const parts = [];
  const readId = () => {
    let n = "";
    while (i < name.length && /[0-9]/.test(name[i])) n += name[i++];
    if (!n) return null;
    const id = name.substr(i, Number(n));
    i += Number(n);
    return id.startsWith("_GLOBAL__N") ? "(anonymous namespace)" : id;
  };
  const skipTemplate = () => { // I ... E, nested
    let depth = 0;
    do {
      if (name[i] === "I") depth++;
      else if (name[i] === "E") depth--;
      else if (/[0-9]/.test(name[i])) { readId(); continue; }
      i++;
    } while (i < name.length && depth > 0);
  };
  if (name[i] === "N") {
    i++;
    while (name[i] === "K" || name[i] === "V" || name[i] === "r") i++;
    while (i < name.length && name[i] !== "E") {
      if (name[i] === "I") { skipTemplate(); parts[parts.length - 1] += "<…>"; continue; }
      if (name[i] === "S" && name[i + 1] === "t") { parts.push("std"); i += 2; continue; }
      if (name[i] === "L") { i++; continue; }
      const id = readId();
      if (id === null) break;
      parts.push(id);
    }
  } else {
    const id = readId();
    if (id !== null) parts.push(id);
    if (name[i] === "I") parts[parts.length - 1] += "<…>";
  }
  return parts.length ? parts.join("::") : name;
}

// Short, readable name: demangled, return type, parameters and template arguments dropped.
function shortName(full) {
  let s = demangle(String(full || ""));
  // drop parameter list (last balanced parentheses)
  if (s.endsWith(")")) {
    let depth = 0;
    for (let j = s.length - 1; j >= 0; j--) {
      if (s[j] === ")") depth++;
      else if (s[j] === "(") { depth--; if (depth === 0) { s = s.slice(0, j); break; } }
    }
  }
  // collapse template arguments
  let out = "", depth = 0;
  for (const ch of s) {
    if (ch === "<") { if (depth === 0) out += "<…>"; depth++; }
    else if (ch === ">") depth = Math.max(0, depth - 1);
    else if (depth === 0) out += ch;
  }
  out = out.replace(/^(void|int|float|auto)\s+/, "").replace(/\(anonymous namespace\)::/g, "").trim();
  const segs = out.split("::");
  if (segs.length > 3) out = "…::" + segs.slice(-2).join("::");
  if (out.length > 64) out = out.slice(0, 62) + "…";
  return out || String(full || "");
}
const kname = (full) => `<span class="kname" title="${esc(full)}" tabindex="0">${esc(shortName(full))}</span>`;

// ---- router -------------------------------------------------------------------------------------
const view = $("#view");
let page = null; // {refresh(), stop()}
let refreshTimer = null;

const ROUTES = [
  [/^#?\/?$/, "overview", () => overviewPage()],
  [/^#\/traces$/, "traces", () => tracesPage()],
  [/^#\/traces\/(.+)$/, "traces", (m) => tracePage(decodeURIComponent(m[1]))],
  [/^#\/new$/, "new", () => newRunPage()],
  [/^#\/runs\/(.+)$/, "overview", (m) => runPage(decodeURIComponent(m[1]))],
  [/^#\/compare$/, "compare", () => comparePage()],
  [/^#\/serve$/, "serve", () => servePage()],
  [/^#\/gpus$/, "gpus", () => gpusPage()],
];

function route() {
  if (page && page.stop) page.stop();
  page = null;
  const hash = location.hash || "#/";
  const hit = ROUTES.find(([re]) => re.test(hash));
  const [re, nav, make] = hit || ROUTES[0];
  $$("nav a").forEach((a) => a.removeAttribute("aria-current"));
  $$("nav a").forEach((a) => { if (a.dataset.nav === nav) a.setAttribute("aria-current", "page"); });
  view.innerHTML = "";
  page = make(hash.match(re)) || null;
}
window.addEventListener("hashchange", () => { route(); view.focus({ preventScroll: true }); });

async function tick() {
  await loadStatus();
  if (page && page.refresh) {
    try { await page.refresh(); } catch (e) { /* shown by the page */ }
  }
}

async function loadStatus() {
  try {
    const s = await api("/api/status");
    const services = Object.entries(s.services || {});
    const up = services.filter(([, v]) => v.up).length;
    const down = services.filter(([, v]) => !v.up).map(([k]) => k);
    $("#status").textContent = down.length ? `services down: ${down.join(", ")}` : `${up} services up`;
    $("#status").className = "status " + (down.length ? "bad" : "ok");
    return s;
  } catch (e) {
    $("#status").textContent = "api unreachable";
    $("#status").className = "status bad";
    return null;
  }
}

function section(title, html = "", cls = "") {
  const sec = document.createElement("section");
  if (cls) sec.className = cls;
  sec.innerHTML = (title ? `<h2>${title}</h2>` : "") + html;
  view.appendChild(sec);
  return sec;
}
const failed = (e) => `<p class="error" role="alert">${esc(e.message || e)}</p>`;

// ---- Overview -----------------------------------------------------------------------------------
function overviewPage() {
  section("", `<p class="lead"><b>Cascade</b> takes a trace of a GPU workload captured once on one real GPU and
    simulates the same kernels on other GPU configurations, many at once.
    From a finished simulation it builds a request model: TTFT, TPOT and throughput on hardware you do not have.</p>`, "intro");
  const sample = section("The bundled sample", `<div id="ov-sample">loading...</div>`);
  const grid = document.createElement("div");
  grid.className = "cols";
  view.appendChild(grid);
  const tr = section("Recent traces", `<div id="ov-traces">loading...</div><p><a href="#/traces">All traces →</a></p>`);
  const rn = section("Recent runs", `<div id="ov-runs">loading...</div><p><a href="#/new">Start a run →</a></p>`);
  grid.append(tr, rn);
  section("Stack health", `<div id="ov-health">loading...</div>`);
  async function refresh() {
    const [t, r, s, st, sr] = await Promise.allSettled([api("/api/traces?limit=6"), api("/api/runs?limit=6"), api("/api/status"),
      api("/api/traces?name=sample-&limit=20"), api("/api/runs?name=sample-&limit=20")]);
    if (t.status === "fulfilled") {
      const traces = t.value.traces;
      $("#ov-traces").innerHTML = traces.length ? `<ul class="plain">${traces.slice(0, 6).map((x) =>
        `<li><a href="#/traces/${enc(x.id)}">${esc(x.name || x.id)}</a>${badge(x.provenance)} ${stateTag(x.state)} <small>${esc(x.source_gpu)} · ${ago(x.created_at)}</small></li>`).join("")}</ul>` : "<p>No traces yet.</p>";
    } else $("#ov-traces").innerHTML = failed(t.reason);
    if (r.status === "fulfilled") {
      const runs = r.value.runs;
      $("#ov-runs").innerHTML = runs.length ? `<ul class="plain">${runs.slice(0, 6).map((x) =>
        `<li><a href="#/runs/${enc(x.id)}">${esc(x.name || x.id)}</a>${badge(x.provenance)} ${stateTag(x.state)} <small>${esc((x.configs || []).join(", "))} · ${ago(x.created_at)}</small></li>`).join("")}</ul>` : "<p>No runs yet.</p>";
      const rec = (sr.status === "fulfilled" ? sr.value.runs : runs).find((x) => x.provenance && x.provenance.source === "sample-recorded");
      const syn = st.status === "fulfilled" ? st.value.traces.find((x) => x.provenance && x.provenance.source === "sample-synthetic") : null;
      $("#ov-sample").innerHTML = rec ? `<p><a href="#/runs/${enc(rec.id)}"><b>${esc(rec.id)}</b></a>${badge(rec.provenance)}
        : ${esc(rec.provenance.description)}</p>
        ${syn ? `<p>Its runnable replica: <a href="#/traces/${enc(syn.id)}">${esc(syn.name)}</a>${badge(syn.provenance)} —
        <a href="#/new" data-trace="${esc(syn.id)}" class="start-syn">run it on any GPU</a>.</p>` : ""}`
        : "<p>The sample is not loaded (CASCADE_SAMPLES=false).</p>";
      $$(".start-syn").forEach((a) => a.addEventListener("click", () => saveForm(NEWRUN_KEY, Object.assign(loadForm(NEWRUN_KEY), { trace: a.dataset.trace }))));
    } else $("#ov-runs").innerHTML = failed(r.reason);
    if (s.status === "fulfilled") {
      const rows = Object.entries(s.value.services || {}).map(([k, v]) =>
        `<tr><td>${esc(k)}</td><td>${v.up ? '<span class="state state-completed">up</span>' : '<span class="state state-failed">down</span>'}</td>
        <td>${(v.instances || []).length}</td><td>${esc((v.versions || []).join(", "))}</td></tr>`).join("");
      $("#ov-health").innerHTML = `<p>Bus ${s.value.bus_connected ? "connected" : "<b>disconnected</b>"} · version ${esc(s.value.version)}</p>
        <div class="scroll"><table><thead><tr><th>Service</th><th>State</th><th>Instances</th><th>Version</th></tr></thead><tbody>${rows}</tbody></table></div>`;
    } else $("#ov-health").innerHTML = failed(s.reason);
  }
  refresh();
  return { refresh };
}

// ---- Traces -------------------------------------------------------------------------------------
function traceProgress(t) {
  const total = t.kernels_total || t.expected_kernels || t.bundle_kernels || 0;
  if (t.provenance && t.provenance.read_only && !total) return `<small>view only (traces not bundled)</small>`;
  if (!total) return t.state === "receiving" ? `<small>${t.files_received} files, ${fmtNum(t.bytes_received, "B")}</small>` : "-";
  const p = t.state === "ready" ? 100 : (100 * t.kernels_prepared) / total;
  return `${bar(p, "kernels prepared")} <small>${t.state === "ready" ? total : t.kernels_prepared}/${total}${t.kernels_failed ? `, ${t.kernels_failed} failed` : ""}</small>`;
}

function tracesPage() {
  const sec = section("Traces", `<p class="hint">Upload with <code>cascade import PATH --app URL --token TOKEN</code>; uploads and preparation progress show here live.</p>
    <div class="controls"><label>Name <input id="tr-q" type="search" placeholder="name or id" size="20"></label>
      <label>State <select id="tr-state"><option value="">any</option><option>receiving</option><option>preparing</option><option>ready</option><option>incomplete</option><option>failed</option></select></label>
      <label>Rows <select id="tr-limit"><option>25</option><option selected>50</option><option>100</option></select></label>
      <span id="tr-info" role="status"></span></div>
    <div id="tr-list">loading...</div>
    <div class="pager"><button type="button" id="tr-prev">← Newer</button> <button type="button" id="tr-next">Older →</button></div>`);
  // a page is named by the cursor it starts after (null: the newest); `back` holds the earlier ones
  const st = { cursor: null, back: [], next: null };
  async function refresh() {
    const q = new URLSearchParams({ limit: $("#tr-limit", sec).value });
    if (st.cursor) q.set("cursor", st.cursor);
    if ($("#tr-state", sec).value) q.set("state", $("#tr-state", sec).value);
    if ($("#tr-q", sec).value.trim()) q.set("name", $("#tr-q", sec).value.trim());
    try {
      const page = await api(`/api/traces?${q}`);
      st.next = page.next_cursor;
      $("#tr-list", sec).innerHTML = `<div class="scroll"><table><thead><tr><th>Name</th><th>Source GPU</th><th>Kind</th><th>State</th><th>Prepared</th><th>Created</th></tr></thead><tbody>` +
        page.traces.map((t) => `<tr><td><a href="#/traces/${enc(t.id)}">${esc(t.name || t.id)}</a>${badge(t.provenance)}</td>
        <td>${esc(t.source_gpu)}</td><td>${esc(t.kind)}</td><td>${stateTag(t.state)}</td><td class="nowrap">${traceProgress(t)}</td><td>${ago(t.created_at)}</td></tr>`).join("") +
        `</tbody></table></div>`;
      const first = st.back.length * Number($("#tr-limit", sec).value);
      $("#tr-info", sec).textContent = page.total ? `${first + 1}-${first + page.traces.length} of ${page.total}` : "no traces";
      $("#tr-prev", sec).disabled = !st.back.length;
      $("#tr-next", sec).disabled = !st.next;
    } catch (e) { $("#tr-list", sec).innerHTML = failed(e); }
  }
  const restart = () => { st.cursor = null; st.back = []; refresh(); };
  $("#tr-q", sec).addEventListener("input", restart);
  $("#tr-state", sec).addEventListener("change", restart);
  $("#tr-limit", sec).addEventListener("change", restart);
  $("#tr-next", sec).addEventListener("click", () => { if (st.next) { st.back.push(st.cursor); st.cursor = st.next; refresh(); } });
  $("#tr-prev", sec).addEventListener("click", () => { if (st.back.length) { st.cursor = st.back.pop(); refresh(); } });
  refresh();
  return { refresh };
}

function tracePage(id) {
  const head = section(`Trace <code>${esc(id)}</code>`, `<div id="tp-head">loading...</div>`);
  const charts = section("Where the time goes (source GPU)", `<div class="cols">
      <figure><figcaption>Time by kernel family</figcaption><div class="chart" id="ch-family"></div></figure>
      <figure><figcaption>Step timeline (time per step)</figcaption><div class="chart" id="ch-steps"></div></figure></div>
      <figure id="fig-mix" hidden><figcaption>Instruction mix (warp instructions)</figcaption><div class="chart" id="ch-mix"></div></figure>
      <div id="ch-regime-wrap"></div>`);
  const table = section("Kernels", `<div class="controls"><label>Filter <input id="kt-q" type="search" placeholder="name or family" size="20"></label>
      <label>Rows <select id="kt-limit"><option>25</option><option>50</option><option>100</option></select></label>
      <span id="kt-info" role="status"></span></div>
      <div class="scroll"><table id="kt"><thead></thead><tbody></tbody></table></div>
      <div class="pager"><button type="button" id="kt-prev">← Previous</button> <button type="button" id="kt-next">Next →</button></div>`);
  const files = section("Files and problems", `<div id="tp-files"></div>`);
  const st = { offset: 0, sort: "kernel_id", order: "asc", q: "", limit: 25, total: 0 };
  let summaryDone = false;
  let lastState = null;

  async function loadKernels() {
    try {
      const res = await api(`/api/traces/${enc(id)}/kernels?offset=${st.offset}&limit=${st.limit}&sort=${enc(st.sort)}&order=${st.order}&q=${enc(st.q)}`);
      st.total = res.total;
      const cols = res.columns.filter((c) => !["grid_y", "grid_z", "block_y", "block_z", "unit"].includes(c));
      const label = { kernel_id: "#", duration_ns: "Duration", smem_bytes: "Shared mem", grid_x: "Grid", block_x: "Block", step_kind: "Step kind" };
      $("#kt thead", table).innerHTML = "<tr>" + cols.map((c) => {
        const sorted = st.sort === c ? (st.order === "asc" ? "ascending" : "descending") : "none";
        const sortable = c !== "family" && c !== "error";
        return `<th aria-sort="${sorted}">${sortable ? `<button type="button" class="sort" data-col="${esc(c)}">${esc(label[c] || c)}${st.sort === c ? (st.order === "asc" ? " ▲" : " ▼") : ""}</button>` : esc(label[c] || c)}</th>`;
      }).join("") + "</tr>";
      $("#kt tbody", table).innerHTML = res.kernels.map((k) => "<tr>" + cols.map((c) => {
        const v = k[c];
        if (c === "name") return `<td>${kname(v)}</td>`;
        if (c === "duration_ns") return `<td class="num">${fmtNs(v)}</td>`;
        if (c === "grid_x") return `<td class="nowrap">${[k.grid_x, k.grid_y, k.grid_z].filter((x) => x != null).join("×")}</td>`;
        if (c === "block_x") return `<td class="nowrap">${[k.block_x, k.block_y, k.block_z].filter((x) => x != null).join("×")}</td>`;
        if (c === "smem_bytes") return `<td class="num">${v == null ? "-" : fmtNum(v, "B")}</td>`;
        if (c === "state") return `<td>${stateTag(v)}</td>`;
        return `<td class="${typeof v === "number" ? "num" : ""}">${v == null ? "-" : esc(typeof v === "number" ? fmtNum(v) : v)}</td>`;
      }).join("") + "</tr>").join("") || `<tr><td colspan="${cols.length}">no kernels${st.q ? " match the filter" : ""}</td></tr>`;
      const last = Math.min(st.offset + st.limit, st.total);
      $("#kt-info", table).textContent = st.total ? `${st.offset + 1}–${last} of ${st.total} (${res.source})` : "";
      $("#kt-prev", table).disabled = st.offset === 0;
      $("#kt-next", table).disabled = last >= st.total;
      $$("button.sort", table).forEach((b) => b.addEventListener("click", () => {
        const c = b.dataset.col;
        st.order = st.sort === c && st.order === "asc" ? "desc" : (st.sort === c ? "asc" : (c === "duration_ns" ? "desc" : "asc"));
        st.sort = c; st.offset = 0;
        loadKernels().then(() => { const again = $(`button.sort[data-col="${c}"]`, table); if (again) again.focus(); });
      }));
    } catch (e) { $("#kt tbody", table).innerHTML = `<tr><td>${esc(e.message)}</td></tr>`; }
  }
  let qTimer = null;
  $("#kt-q", table).addEventListener("input", (ev) => { clearTimeout(qTimer); qTimer = setTimeout(() => { st.q = ev.target.value; st.offset = 0; loadKernels(); }, 250); });
  $("#kt-limit", table).addEventListener("change", (ev) => { st.limit = Number(ev.target.value); st.offset = 0; loadKernels(); });
  $("#kt-prev", table).addEventListener("click", () => { st.offset = Math.max(0, st.offset - st.limit); loadKernels(); });
  $("#kt-next", table).addEventListener("click", () => { st.offset += st.limit; loadKernels(); });

  async function loadSummary() {
    const s = await api(`/api/traces/${enc(id)}/summary`);
    if (!s.ready) { $("#ch-family").innerHTML = "<p>Charts appear once the trace is prepared.</p>"; return; }
    summaryDone = true;
    const fams = Object.entries(s.families).sort((a, b) => b[1].time_ns - a[1].time_ns);
    if (fams.length && s.time_ns > 0) {
      Charts.bars($("#ch-family"), { label: "source-GPU kernel time by family", categories: fams.map(([k]) => k),
        series: [{ name: "Kernel time", values: fams.map(([, v]) => v.time_ns / 1e6) }],
        notes: fams.map(([, v]) => `${v.count} kernels`) });
    } else $("#ch-family").innerHTML = "<p>No measured kernel durations in this trace.</p>";
    const steps = (s.steps || []).filter((x) => x.step >= 0);  // kernels outside any step carry -1
    if (steps.length) {
      const kinds = [...new Set(steps.map((x) => x.kind || "step"))];
      Charts.lines($("#ch-steps"), { label: "kernel time per step", xLabel: "step", legend: true,
        series: kinds.map((k) => ({ name: k, points: steps.filter((x) => (x.kind || "step") === k).map((x) => [x.step, x.time_ns / 1e6]) })) });
    } else $("#ch-steps").innerHTML = "<p>This trace has no step annotations.</p>";
    const mix = Object.entries(s.instruction_mix || {}).sort((a, b) => b[1] - a[1]);
    if (mix.length) {
      $("#fig-mix").hidden = false;
      Charts.bars($("#ch-mix"), { label: "instruction mix", categories: mix.map(([k]) => k.replace(/^insts_/, "")),
        series: [{ name: "Instructions", values: mix.map(([, v]) => v) }], fmt: (v) => fmtNum(v) });
    }
    // time by regime from the latest completed run of this trace
    const { runs } = await api(`/api/runs?state=completed&name=${enc(id)}&limit=20`);
    const run = runs.find((r) => r.trace_id === id);
    if (run) {
      const res = await api(`/api/runs/${enc(run.id)}/results`);
      const withReg = (res.configs || []).filter((c) => c.regimes && Object.keys(c.regimes).length);
      if (withReg.length) {
        const regimes = [...new Set(withReg.flatMap((c) => Object.keys(c.regimes)))];
        const wrap = $("#ch-regime-wrap");
        wrap.innerHTML = `<figure><figcaption>Kernels by predicted regime (run <a href="#/runs/${enc(run.id)}">${esc(run.id)}</a>)</figcaption><div class="chart" id="ch-regime"></div></figure>`;
        Charts.stacked($("#ch-regime"), { label: "kernels per regime per config", categories: withReg.map((c) => c.config),
          parts: regimes.map((r) => ({ name: r, values: withReg.map((c) => c.regimes[r] || 0) })), fmt: (v) => fmtNum(v) });
      }
    }
  }

  async function refresh() {
    try {
      const t = await api(`/api/traces/${enc(id)}`);
      const total = t.kernels_total || t.expected_kernels || t.bundle_kernels || 0;
      $("#tp-head").innerHTML = `<h3>${esc(t.name || t.id)}${badge(t.provenance)} ${stateTag(t.state)}</h3>
        <dl class="facts"><dt>Source GPU</dt><dd>${esc(t.source_gpu)}</dd><dt>Kind</dt><dd>${esc(t.kind)}</dd>
        <dt>Workload</dt><dd>${esc(t.workload || "-")}</dd><dt>Kernels</dt><dd>${traceProgress(t)}</dd>
        <dt>Baseline</dt><dd>${t.baseline && t.baseline.e2e_ms != null ? fmtMs(t.baseline.e2e_ms) + " measured end to end" : "none (predictions are counterfactual)"}</dd></dl>
        ${t.provenance && t.provenance.description ? `<p class="note">${esc(t.provenance.description)}</p>` : ""}
        ${(t.warnings || []).map((w) => `<p class="warn">${esc(w)}</p>`).join("")}
        ${(t.errors || []).map((w) => `<p class="error">${esc(w)}</p>`).join("")}
        ${t.state === "ready" && !(t.provenance && t.provenance.read_only) ? `<p><a href="#/new" id="tp-run" class="button">Run this trace</a></p>` : ""}
        ${total ? "" : ""}`;
      const run = $("#tp-run");
      if (run) run.addEventListener("click", () => saveForm(NEWRUN_KEY, Object.assign(loadForm(NEWRUN_KEY), { trace: id })));
      const problems = (t.kernels || []).filter((k) => k.state === "failed" || k.state === "skipped" || k.error || (k.warnings || []).length);
      $("#tp-files").innerHTML = ((t.files || []).length ? `<div class="scroll"><table><thead><tr><th>File</th><th>Size</th><th>State</th></tr></thead><tbody>${t.files.map((f) =>
        `<tr><td><code>${esc(f.name || f.key)}</code></td><td>${fmtNum(f.size, "B")}</td><td>${esc(f.state || "")}</td></tr>`).join("")}</tbody></table></div>` : "<p>No uploaded files are listed for this trace.</p>") +
        (problems.length ? `<h3>Skipped or failed kernels</h3><div class="scroll"><table><thead><tr><th>Unit</th><th>Kernel</th><th>State</th><th>Reason</th></tr></thead><tbody>${problems.map((k) =>
          `<tr><td>${esc(k.unit)}</td><td>${k.name ? kname(k.name) : "-"}</td><td>${stateTag(k.state)}</td><td>${esc(k.error || (k.warnings || []).join("; "))}</td></tr>`).join("")}</tbody></table></div>` : "<p>No skipped or failed kernels.</p>");
      if (t.state !== lastState) { lastState = t.state; loadKernels(); }
      if (!summaryDone) await loadSummary();
    } catch (e) { $("#tp-head").innerHTML = failed(e); }
  }
  refresh();
  return { refresh };
}

// ---- form state that survives refreshes ------------------------------------------------------
const NEWRUN_KEY = "cascade-newrun";
const SERVE_KEY = "cascade-serve";
const QUANTS = ["bf16", "fp8", "fp8-block", "fp4", "mxfp4", "int4"];
const UPLOAD = "__upload__";
function loadForm(key) { try { return JSON.parse(localStorage.getItem(key) || "{}") || {}; } catch (_) { return {}; } }
function saveForm(key, value) { localStorage.setItem(key, JSON.stringify(value)); }

// ---- New run ------------------------------------------------------------------------------------
const ALL_MODELS = ["auto", "scaled", "analytical", "roofline", "accel-sim"];

function newRunPage() {
  const sec = section("New run", `<form id="newrun" novalidate>
    <div class="row"><label>Trace <select id="nr-trace" name="trace" required></select></label>
    <label>Replicas <input id="nr-replicas" type="number" min="1" max="64" value="1"></label>
    <label>Model <select id="nr-model"></select></label></div>
    <p id="nr-trace-info" class="note"></p>
    <fieldset id="nr-configs"><legend>GPU configurations</legend><p>loading...</p></fieldset>
    <div class="row"><button type="submit">Start run</button> <span id="nr-msg" class="msg" role="status"></span></div>
    </form>`);
  let traces = [];
  let configs = [];
  const st = loadForm(NEWRUN_KEY);
  const persist = () => {
    saveForm(NEWRUN_KEY, {
      trace: $("#nr-trace").value || st.trace, replicas: $("#nr-replicas").value, model: $("#nr-model").value || st.model,
      configs: $$("input[name=cfg]:checked").map((b) => b.value),
    });
  };
  if (st.replicas) $("#nr-replicas").value = st.replicas;

  function offerModels() {
    const boxes = $$("input[name=cfg]");
    const checked = boxes.filter((b) => b.checked);
    const models = (b) => (b.dataset.models || "").split(" ");
    const ok = ALL_MODELS.filter((m) => boxes.length && (checked.length ? checked.every((b) => models(b).includes(m)) : boxes.some((b) => models(b).includes(m))));
    const sel = $("#nr-model");
    const keep = sel.value || loadForm(NEWRUN_KEY).model;
    sel.innerHTML = ok.map((m) => `<option>${esc(m)}</option>`).join("");
    if (ok.includes(keep)) sel.value = keep;
  }

  function fillTraces() {
    const sel = $("#nr-trace");
    const keep = sel.value || loadForm(NEWRUN_KEY).trace;
    const runnable = traces.filter((t) => t.state === "ready" && !(t.provenance && t.provenance.read_only));
    const html = runnable.map((t) => `<option value="${esc(t.id)}">${esc(t.name || t.id)} (${esc(t.source_gpu)})</option>`).join("");
    if (sel.dataset.html !== html) { sel.innerHTML = html; sel.dataset.html = html; }
    if (keep && runnable.some((t) => t.id === keep)) sel.value = keep;
    const t = runnable.find((x) => x.id === sel.value);
    $("#nr-trace-info").innerHTML = t ? `${badge(t.provenance)} ${esc(t.kind)} trace, ${t.kernels_total || t.bundle_kernels || "?"} kernels, source ${esc(t.source_gpu)}${t.baseline && t.baseline.e2e_ms ? `, measured ${fmtMs(t.baseline.e2e_ms)} end to end` : ", no measured baseline"}` :
      (runnable.length ? "" : "No runnable trace yet: upload one with cascade import, or wait for preparation.");
  }

  async function loadConfigs() {
    try {
      const res = await api("/api/configs");
      configs = res.configs;
      const saved = new Set(loadForm(NEWRUN_KEY).configs || []);
      $("#nr-configs").innerHTML = "<legend>GPU configurations</legend><div class=\"cfg-grid\">" + configs.map((c) =>
        `<label class="cfg"><input type="checkbox" name="cfg" value="${esc(c.id)}" data-models="${esc((c.models || []).join(" "))}" ${saved.has(c.id) ? "checked" : ""}>
         <span><b>${esc(c.id)}</b>${c.custom ? ' <span class="badge synthetic">custom</span>' : ""}${c.accelsim ? ' <span class="badge">accel-sim</span>' : ""}<br>
         <small>${esc(c.name)} · ${c.sms} SMs · ${fmtNum(c.boost_clock_mhz)} MHz · ${fmtNum(c.memory_bandwidth_gbps)} GB/s ·
         FP16 ${fmtNum(c.fp16_tflops)} / FP32 ${fmtNum(c.fp32_tflops)} TFLOPS${c.tensor_tflops && c.tensor_tflops.fp16 ? ` · tensor FP16 ${fmtNum(c.tensor_tflops.fp16)}` : ""}</small></span></label>`).join("") + "</div>" +
        (res.accelsim && !res.accelsim.available ? `<p class="hint">accel-sim is not offered: ${esc((res.accelsim.problems || [])[0] || "not configured")}</p>` : "");
      offerModels();
    } catch (e) { $("#nr-configs").innerHTML = "<legend>GPU configurations</legend>" + failed(e); }
  }

  $("#newrun").addEventListener("change", (ev) => { if (ev.target.name === "cfg") offerModels(); persist(); fillTraces(); });
  $("#newrun").addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const cfgs = $$("input[name=cfg]:checked").map((i) => i.value);
    const msg = $("#nr-msg");
    if (!$("#nr-trace").value) { msg.textContent = "pick a trace"; return; }
    if (!cfgs.length) { msg.textContent = "pick at least one GPU configuration"; $("input[name=cfg]").focus(); return; }
    msg.textContent = "starting...";
    try {
      const run = await api("/api/runs", { method: "POST", body: JSON.stringify({
        trace_id: $("#nr-trace").value, configs: cfgs, replicas: Number($("#nr-replicas").value), model: $("#nr-model").value }) });
      msg.textContent = `run ${run.id} ${run.state}`;
      location.hash = `#/runs/${enc(run.id)}`;
    } catch (e) { msg.innerHTML = `<span class="error">${esc(e.field ? e.field + ": " : "")}${esc(e.message)}</span>`; }
  });

  async function refresh() {
    try { traces = (await api("/api/traces?state=ready&limit=1000")).traces; fillTraces(); } catch (e) { $("#nr-trace-info").innerHTML = failed(e); }
  }
  loadConfigs().then(refresh);
  return { refresh };
}

// ---- Run ----------------------------------------------------------------------------------------
function runPage(id) {
  const head = section(`Run <code>${esc(id)}</code> <span id="rd-badge"></span> <span id="rd-state"></span>`,
    `<p id="rd-note" class="note"></p><div id="rd-meta"></div>
     <div class="row"><button type="button" id="rd-cancel" hidden>Cancel run</button> <span id="rd-msg" role="status"></span></div>`);
  const simsSec = section("Simulations", `<div id="rd-sims" aria-live="polite"></div>`);
  const resSec = section("Results", `<div id="rd-results"><p>Results appear as simulations finish.</p></div>
    <p class="downloads">Download: <a id="rd-json" href="/api/runs/${enc(id)}/results?format=json" download="${esc(id)}-results.json">JSON</a> ·
    <a id="rd-csv" href="/api/runs/${enc(id)}/results?format=csv">CSV</a></p>`);
  const sims = new Map();
  let stream = null;
  let runState = null;
  let resultsKey = "";

  function renderSims() {
    const list = [...sims.values()].sort((a, b) => (a.config + a.replica).localeCompare(b.config + b.replica));
    $("#rd-sims").innerHTML = `<div class="scroll"><table class="sims"><thead><tr><th>Config</th><th>Replica</th><th>State</th><th>Progress</th><th>Kernels</th><th>ETA</th><th>Attempts</th><th>Error</th></tr></thead><tbody>` +
      list.map((s) => {
        const p = s.state === "completed" ? 100 : (s.percent || 0);
        const kernels = s.kernels_total ? `${s.kernels_done}/${s.kernels_total}` : (s.state === "completed" ? "done" : "-");
        return `<tr data-sim="${esc(s.id)}"><td>${esc(s.config)}</td><td>${s.replica}</td><td>${stateTag(s.state)}</td>
        <td class="nowrap">${bar(p, `${s.config} progress`)} <span class="pct">${p.toFixed(0)}%</span></td>
        <td>${kernels}</td><td>${s.eta_s != null && !TERMINAL.includes(s.state) ? fmtMs(s.eta_s * 1000) : "-"}</td>
        <td>${s.attempts ?? 0}</td><td class="error">${esc(s.error || "")}</td></tr>`;
      }).join("") + "</tbody></table></div>";
  }

  async function loadResults() {
    try {
      const res = await api(`/api/runs/${enc(id)}/results`);
      const key = JSON.stringify(res.configs.map((c) => [c.config, c.state, c.predicted_e2e_ms]));
      if (key === resultsKey) return;
      resultsKey = key;
      renderResults(res);
    } catch (e) { $("#rd-results").innerHTML = failed(e); }
  }

  function renderResults(res) {
    const done = res.configs.filter((c) => c.predicted_e2e_ms != null);
    const box = $("#rd-results");
    if (!done.length) { box.innerHTML = "<p>Results appear as simulations finish.</p>"; return; }
    const notes = done.map((c) => c.counterfactual ? "counterfactual" : `error ${pct(c.error_pct)}`);
    box.innerHTML = `<figure><figcaption>Predicted end-to-end time per configuration, beside the real baseline</figcaption><div class="chart" id="ch-e2e"></div></figure>
      <div class="scroll"><table id="rd-table"><thead><tr><th>Config</th><th>Real E2E</th><th>Predicted E2E</th><th>Error</th><th>GPU busy</th><th>Host</th><th>Model</th><th>Calibration</th><th>Expected kernel error</th><th>Extrapolated</th></tr></thead><tbody>` +
      res.configs.map((c) => `<tr data-config="${esc(c.config)}"><td>${esc(c.config)}</td><td>${fmtMs(c.baseline_e2e_ms)}</td><td>${fmtMs(c.predicted_e2e_ms)}</td>
        <td>${c.predicted_e2e_ms == null ? "-" : c.counterfactual ? '<span class="counterfactual" title="no measured baseline on this GPU">counterfactual</span>' : pct(c.error_pct)}</td>
        <td>${fmtMs(c.gpu_busy_ms)}</td><td>${c.gpu_busy_ms != null && c.predicted_e2e_ms != null ? fmtMs(Math.max(0, c.predicted_e2e_ms - c.gpu_busy_ms)) : "-"}</td>
        <td>${esc(c.model || "")}</td><td>${esc(c.calibration || "")}</td><td>${expectedError(c)}</td><td>${extrapolatedCell(c)}</td></tr>`).join("") +
      `</tbody></table></div>
      <div id="rd-busy-wrap"></div>
      <div id="rd-steps-wrap"></div>
      <div id="rd-top"></div>
      <div id="rd-accelsim"></div>
      <div id="rd-ref"></div>`;
    Charts.bars($("#ch-e2e"), { label: "predicted vs real end-to-end time", categories: done.map((c) => c.config),
      series: [{ name: "Predicted", values: done.map((c) => c.predicted_e2e_ms) }, { name: "Real baseline", values: done.map((c) => c.baseline_e2e_ms) }],
      notes, noteClass: done.map((c) => (c.counterfactual ? "counterfactual" : "")), legend: true });
    const busy = done.filter((c) => c.gpu_busy_ms != null);
    if (busy.length) {
      const hostBound = busy.filter((c) => c.predicted_e2e_ms > 0 && c.gpu_busy_ms / c.predicted_e2e_ms < 0.5);
      $("#rd-busy-wrap").innerHTML = `<figure><figcaption>GPU busy versus host time per configuration</figcaption><div class="chart" id="ch-busy"></div></figure>` +
        (hostBound.length ? `<p class="hint" id="host-bound">Host-bound: on ${esc(hostBound.map((c) => c.config).join(", "))} the GPU is busy for less than half of the end-to-end time,
          so a faster GPU changes little (launch overhead and host work dominate).</p>` : "");
      Charts.stacked($("#ch-busy"), { label: "GPU busy and host time", categories: busy.map((c) => c.config),
        parts: [{ name: "GPU busy", values: busy.map((c) => c.gpu_busy_ms) }, { name: "Host / idle", values: busy.map((c) => Math.max(0, c.predicted_e2e_ms - c.gpu_busy_ms)) }] });
    }
    const withSteps = done.filter((c) => (c.steps || []).some((x) => x.step >= 0));  // no step annotations: no chart
    if (withSteps.length) {
      $("#rd-steps-wrap").innerHTML = `<figure><figcaption>Per-step predicted time (prefill is step 0)</figcaption><div class="chart" id="ch-steps"></div></figure>`;
      Charts.lines($("#ch-steps"), { label: "per-step time per config", xLabel: "step", legend: true,
        series: withSteps.map((c) => ({ name: c.config, points: c.steps.filter((s) => s.step >= 0).map((s) => [s.step, s.predicted_ms]) })) });
    }
    $("#rd-top").innerHTML = done.filter((c) => (c.top_kernels || []).length).map((c) =>
      `<h3>${esc(c.config)}: top kernels</h3><div class="scroll"><table class="top"><thead><tr><th>Kernel</th><th>Count</th><th>Source</th><th>Predicted</th><th>Share</th><th>Regime</th><th>Family</th><th>Expected error</th></tr></thead><tbody>` +
      c.top_kernels.slice(0, 8).map((k) => `<tr><td>${kname(k.name)}</td><td class="num">${k.count}</td><td class="num">${fmtMs(k.source_ms)}</td><td class="num">${fmtMs(k.predicted_ms)}</td>
        <td class="num">${k.share != null ? (100 * k.share).toFixed(1) + "%" : "-"}</td><td>${esc(k.regime)}</td><td>${esc(k.family)}</td><td>${expectedError(c, false)}</td></tr>`).join("") +
      "</tbody></table></div>").join("");
    const rate = (v) => (v == null ? "-" : (100 * v).toFixed(1) + "%");
    const fmtNs = (v) => (v == null ? "-" : v >= 1e6 ? (v / 1e6).toFixed(3) + " ms" : (v / 1e3).toFixed(2) + " µs");
    $("#rd-accelsim").innerHTML = done.filter((c) => (c.accelsim_kernels || []).length).map((c) => {
      const sim = c.simulator || {};
      return `<h3>${esc(c.config)}: Accel-Sim beside the built-in model</h3>
      <p class="note">Accel-Sim config ${esc(sim.accelsim_config || sim.config_id || "")}${sim.config_relation ? ` (${esc(sim.config_relation)})` : ""}
        at ${esc(String(sim.core_clock_mhz || ""))} MHz${sim.config_reason ? ` — ${esc(sim.config_reason)}` : ""}.
        ${sim.clock_note ? `<span class="clock-note">${esc(sim.clock_note)}</span>` : sim.spec_clock_mhz ? `<span class="clock-note">The spec's boost clock: ${esc(String(sim.spec_clock_mhz))} MHz.</span>` : ""}</p>
      <div class="scroll"><table class="accelsim" data-config="${esc(c.config)}"><thead><tr><th>Kernel</th><th>Cycles</th><th>Instructions</th><th>IPC</th><th>Occupancy</th>
        <th>L1D hit</th><th>L2 hit</th><th>DRAM BW util</th><th>Accel-Sim</th><th>Built-in</th><th>Built-in vs Accel-Sim</th></tr></thead><tbody>` +
      c.accelsim_kernels.map((k) => `<tr data-kernel="${k.kernel_id}"><td>${kname(k.name)} <span class="hint">#${k.kernel_id}</span></td>
        <td class="num">${k.cycles}</td><td class="num">${k.instructions}</td><td class="num">${k.ipc.toFixed(2)}</td>
        <td class="num">${k.occupancy_pct == null ? "-" : k.occupancy_pct.toFixed(1) + "%"}</td><td class="num">${rate(k.l1d_hit_rate)}</td>
        <td class="num">${rate(k.l2_hit_rate)}</td><td class="num">${rate(k.dram_bw_util)}</td><td class="num">${fmtNs(k.simulated_ns)}</td>
        <td class="num">${fmtNs(k.builtin_ns)} <span class="hint">${esc(k.builtin_model)}</span></td>
        <td class="num${k.difference_pct != null && Math.abs(k.difference_pct) > 50 ? " counterfactual" : ""}">${k.difference_pct == null ? "-" : pct(k.difference_pct)}</td></tr>`).join("") +
      "</tbody></table></div>";
    }).join("");
    if (res.reference) {
      const r = res.reference;
      $("#rd-ref").innerHTML = `<h3>Recorded reference ${badge({ badge: r.badge || "Sample", description: r.title })}</h3>
        <p class="note">${esc(r.title)} — simulator ${esc(r.simulator)}, kernel model ${esc(r.kernel_model)}.</p>
        <div class="scroll"><table id="rd-reftable"><thead><tr><th>Config</th><th>Hardware</th><th>Real mean E2E</th><th>Simulated mean E2E</th><th>Error</th><th>Note</th></tr></thead><tbody>` +
        r.configs.map((c) => `<tr><td>${esc(c.config)}</td><td>${esc(c.hardware)}</td><td>${fmtMs(c.real_e2e_ms)}</td><td>${fmtMs(c.simulated_e2e_ms)}</td>
          <td>${c.counterfactual ? '<span class="counterfactual">counterfactual</span>' : pct(c.error_pct)}</td><td>${esc(c.note || "")}</td></tr>`).join("") +
        `</tbody></table></div>` + ((r.caveats || []).length ? `<ul class="notes">${r.caveats.map((n) => `<li>${esc(n)}</li>`).join("")}</ul>` : "");
    }
    if (res.state === "completed" && !(res.reference)) {
      $("#rd-results").insertAdjacentHTML("beforeend", `<p><a class="button" href="#/serve" id="to-serve">Simulate requests on this run →</a></p>`);
      $("#to-serve").addEventListener("click", () => saveForm(SERVE_KEY, Object.assign(loadForm(SERVE_KEY), { model: `cascade/${res.trace_id}/${done[0].config}` })));
    }
  }

  async function load() {
    try {
      const detail = await api(`/api/runs/${enc(id)}`);
      const run = detail.run;
      runState = run.state;
      $("#rd-badge").innerHTML = badge(run.provenance);
      $("#rd-state").innerHTML = stateTag(run.state);
      $("#rd-note").textContent = (run.provenance && run.provenance.description) || "";
      $("#rd-meta").innerHTML = `<dl class="facts"><dt>Trace</dt><dd><a href="#/traces/${enc(run.trace_id)}">${esc(run.trace_id)}</a></dd>
        <dt>Configs</dt><dd>${esc(run.configs.join(", "))}</dd><dt>Replicas</dt><dd>${run.replicas}</dd><dt>Model</dt><dd>${esc(run.model)}</dd>
        ${run.error ? `<dt>Error</dt><dd class="error">${esc(run.error)}</dd>` : ""}</dl>`;
      $("#rd-cancel").hidden = TERMINAL.includes(run.state) || (run.provenance && run.provenance.read_only);
      (detail.sims || []).forEach((s) => sims.set(s.id, Object.assign(sims.get(s.id) || {}, s)));
      renderSims();
      await loadResults();
      if (!TERMINAL.includes(run.state) && !stream) openStream();
    } catch (e) { $("#rd-meta").innerHTML = failed(e); }
  }

  function openStream() {
    stream = new EventSource(`/api/runs/${enc(id)}/events`);
    stream.addEventListener("sim", (ev) => {
      const s = JSON.parse(ev.data);
      sims.set(s.id, Object.assign(sims.get(s.id) || {}, s));
      renderSims();
      if (s.state === "completed") loadResults();
    });
    stream.addEventListener("run", (ev) => {
      const r = JSON.parse(ev.data);
      runState = r.state;
      $("#rd-state").innerHTML = stateTag(r.state);
      if (TERMINAL.includes(r.state)) {
        $("#rd-cancel").hidden = true;
        stream.close(); stream = null;
        load();
      }
    });
    stream.onerror = () => { /* EventSource reconnects with Last-Event-ID by itself */ };
  }

  $("#rd-cancel").addEventListener("click", async () => {
    try {
      await api(`/api/runs/${enc(id)}/cancel`, { method: "POST" });
      $("#rd-msg").textContent = "cancel requested";
    } catch (e) { $("#rd-msg").innerHTML = `<span class="error">${esc(e.message)}</span>`; }
  });
  load();
  return {
    refresh: async () => { if (!TERMINAL.includes(runState) && !stream) await load(); },
    stop: () => { if (stream) stream.close(); stream = null; },
  };
}

function expectedError(c, whole = true) {
  const a = c.accuracy;
  if (!a) return "-";
  const text = a.mape_pct != null ? `±${a.mape_pct.toFixed(1)}% (MAPE)` : "not measured";
  const calib = a.target_calibrated ? "" : ' <span class="counterfactual">uncalibrated GPU</span>';
  const total = whole && a.total_pct != null && a.total_pct > 0
    ? ` <span class="accuracy" title="${esc(a.total_basis || "")}">whole trace ±${a.total_pct.toFixed(1)}%</span>` : "";
  return `<span class="accuracy" title="${esc(a.basis || "")}">${text}</span>${total}${calib}`;
}

function extrapolatedCell(c) {
  if (c.extrapolated == null) return "-";
  const why = Object.entries(c.extrapolation || {}).map(([k, v]) => `${v}: ${k}`).join("; ");
  return `<span title="${esc(why)}">${c.extrapolated}/${c.kernel_count ?? "?"}</span>`;
}

// ---- Compare ------------------------------------------------------------------------------------
function comparePage() {
  const sec = section("Compare", `<p class="hint">Pick two or more finished runs; every configuration of each is shown with its speedup relative to the source GPU of its trace.</p>
    <fieldset id="cmp-runs"><legend>Runs</legend>loading...</fieldset><div id="cmp-out"></div>`);
  const KEY = "cascade-compare";
  async function draw() {
    const ids = $$("input[name=cmp]:checked").map((b) => b.value);
    localStorage.setItem(KEY, JSON.stringify(ids));
    const out = $("#cmp-out");
    if (!ids.length) { out.innerHTML = "<p>Select runs above.</p>"; return; }
    const results = await Promise.all(ids.map((r) => api(`/api/runs/${enc(r)}/results`).catch((e) => ({ run_id: r, error: e.message, configs: [] }))));
    const traceIds = [...new Set(results.map((r) => r.trace_id).filter(Boolean))];
    const traces = new Map((await Promise.all(traceIds.map((t) => api(`/api/traces/${enc(t)}?details=false`).catch(() => null)))).filter(Boolean).map((t) => [t.id, t]));
    const rows = [];
    for (const res of results) {
      const trace = traces.get(res.trace_id);
      const sourceId = (res.configs.find((c) => c.source_spec_id) || {}).source_spec_id || (trace && trace.source_gpu) || null;
      // like for like: the prediction on the source GPU's own config when the run has it,
      // else the source GPU's measured time
      const src = res.configs.find((c) => c.config === sourceId && c.predicted_e2e_ms != null) || null;
      for (const c of res.configs) {
        if (c.predicted_e2e_ms == null) continue;
        const base = src ? src.predicted_e2e_ms : c.source_e2e_ms;
        rows.push({ run: res.run_id, config: c.config, pred: c.predicted_e2e_ms, source: sourceId, base,
          basis: src ? "predicted on the source config" : (c.source_e2e_ms != null ? "measured on the source GPU" : ""),
          speedup: base ? base / c.predicted_e2e_ms : null, counterfactual: c.counterfactual, error: c.error_pct });
      }
    }
    const label = (r) => (ids.length > 1 ? `${r.config} · ${r.run.startsWith("run-") ? r.run.slice(4, 10) : r.run.split("-")[0]}` : r.config);
    out.innerHTML = `<div class="cols"><figure><figcaption>Predicted end-to-end time</figcaption><div class="chart" id="ch-cmp-e2e"></div></figure>
      <figure><figcaption>Speedup relative to the source GPU (×)</figcaption><div class="chart" id="ch-cmp-speed"></div></figure></div>
      <div class="scroll"><table><thead><tr><th>Run</th><th>Config</th><th>Source GPU</th><th>Predicted E2E</th><th>Source-GPU E2E</th><th>Speedup</th><th>Error vs real</th></tr></thead><tbody>` +
      rows.map((r) => `<tr data-row="${esc(r.run)}/${esc(r.config)}"><td><a href="#/runs/${enc(r.run)}">${esc(r.run)}</a></td><td>${esc(r.config)}</td><td>${esc(r.source || "-")}</td><td>${fmtMs(r.pred)}</td><td title="${esc(r.basis)}">${fmtMs(r.base)}</td>
        <td>${r.speedup ? r.speedup.toFixed(2) + "×" : "-"}</td><td>${r.counterfactual ? '<span class="counterfactual">counterfactual</span>' : pct(r.error)}</td></tr>`).join("") +
      `</tbody></table></div>` + results.filter((r) => r.error).map((r) => `<p class="error">${esc(r.run_id)}: ${esc(r.error)}</p>`).join("");
    if (!rows.length) { out.innerHTML = "<p>No finished configurations in the selected runs.</p>"; return; }
    Charts.bars($("#ch-cmp-e2e"), { label: "predicted e2e", categories: rows.map(label), series: [{ name: "Predicted", values: rows.map((r) => r.pred) }] });
    Charts.bars($("#ch-cmp-speed"), { label: "speedup", categories: rows.map(label), series: [{ name: "Speedup", values: rows.map((r) => r.speedup) }], fmt: (v) => v.toFixed(2) + "×" });
  }
  async function load() {
    try {
      const { runs: done } = await api("/api/runs?state=completed&limit=200");
      let saved = [];
      try { saved = JSON.parse(localStorage.getItem(KEY) || "[]"); } catch (_) { /* fresh */ }
      if (!saved.length) saved = done.slice(0, 2).map((r) => r.id);
      $("#cmp-runs").innerHTML = "<legend>Runs</legend>" + done.map((r) => `<label class="cfg"><input type="checkbox" name="cmp" value="${esc(r.id)}" ${saved.includes(r.id) ? "checked" : ""}>
        <span><b>${esc(r.id)}</b>${badge(r.provenance)}<br><small>${esc(r.trace_id)} · ${esc(r.configs.join(", "))}</small></span></label>`).join("");
      $("#cmp-runs").addEventListener("change", draw);
      draw();
    } catch (e) { $("#cmp-runs").innerHTML = failed(e); }
  }
  load();
  return {};
}

// ---- Request simulator --------------------------------------------------------------------------
function lengthFields(prefix, label, def) {
  return `<fieldset class="len" id="${prefix}"><legend>${label} tokens</legend>
    <label>Distribution <select name="${prefix}-kind"><option value="fixed">fixed</option><option value="uniform">uniform</option><option value="lognormal">lognormal</option></select></label>
    <label data-k="fixed">Tokens <input name="${prefix}-tokens" type="number" min="1" value="${def}"></label>
    <label data-k="uniform">From <input name="${prefix}-lo" type="number" min="1" value="${Math.max(1, Math.floor(def / 2))}"></label>
    <label data-k="uniform">To <input name="${prefix}-hi" type="number" min="1" value="${def * 2}"></label>
    <label data-k="lognormal">Median <input name="${prefix}-median" type="number" min="1" value="${def}"></label>
    <label data-k="lognormal">p90 <input name="${prefix}-p90" type="number" min="1" value="${def * 3}"></label>
    </fieldset>`;
}

function servePage() {
  const sec = section("Request simulator", `<p class="hint">Serve simulated traffic on replicas of a finished simulation (a request model built from its per-step times),
    or of a model described by its <code>config.json</code> on a GPU (every step timed at its shape by the LLM kernel model, no trace).
    Metrics are named as <code>vllm bench serve</code> names them.</p>
    <form id="serve" novalidate>
    <fieldset><legend>Model</legend>
      <label class="inline"><input type="radio" name="source" value="traced" checked> finished simulation (traced)</label>
      <label class="inline"><input type="radio" name="source" value="described"> described by its config.json</label>
      <div data-src="traced"><label>Simulation <select name="model" id="sc-model"></select></label></div>
      <div data-src="described" id="sc-described">
        <label>Config <select name="hfconfig" id="sc-config"></select></label>
        <label data-upload>config.json <input type="file" name="hffile" id="sc-config-file" accept=".json,application/json"></label>
        <label>GPU <select name="gpu" id="sc-gpu"></select></label>
        <label>TP <input name="tp" type="number" min="1" max="64" value="1"></label>
        <label>EP <input name="ep" type="number" min="1" max="64" value="1"></label>
        <label title="attention data-parallel ranks (vllm serve --data-parallel-size): each rank TP GPUs with its own scheduler and KV cache, the experts over all DP x TP GPUs">DP <input name="dp" type="number" min="1" max="64" value="1"></label>
        <label title="the checkpoint's own: what its config.json's quantization_config names (bf16 without one)">Quantisation <select name="quant"><option value="">checkpoint's own</option>${QUANTS.map((q) => `<option>${q}</option>`).join("")}</select></label>
        <label>Experts <select name="moe_quant"><option value="">same</option>${QUANTS.map((q) => `<option>${q}</option>`).join("")}</select></label>
        <label>KV cache <select name="kv_dtype"><option>bf16</option><option>fp8</option></select></label>
        <p class="hint" id="sc-config-note"></p>
      </div></fieldset>
    <fieldset><legend>Load</legend>
      <label class="inline"><input type="radio" name="load" value="rate" checked> arrival rate (open loop)</label>
      <label class="inline"><input type="radio" name="load" value="concurrency"> concurrency (closed loop)</label>
      <div class="row">
      <label data-load="rate">Pattern <select name="pattern"><option>poisson</option><option>gamma</option><option>constant</option></select></label>
      <label data-load="rate">Rate (req/s) <input name="rate" type="number" step="any" min="0" value="2"></label>
      <label data-load="rate">Burstiness cv (gamma) <input name="cv" type="number" step="any" min="0" value="2"></label>
      <label data-load="concurrency">Concurrent clients <input name="concurrency" type="number" min="1" max="4096" value="16"></label>
      <label data-load="concurrency" title="together: every client's first request at once, as vllm bench serve and aiperf start them (after 2 warm-up requests per client, run to their end and left out); staggered: each client at its own phase">Clients start <select name="clients_start"><option value="together">together (a benchmark)</option><option value="staggered">staggered (own phase)</option></select></label>
      <label>Requests <input name="n" type="number" min="1" max="20000" value="300"></label></div></fieldset>
    <div class="cols">${lengthFields("prompt", "Prompt", 6)}${lengthFields("output", "Output", 32)}</div>
    <fieldset><legend>Serving</legend>
      <label>Replicas <input name="replicas" type="number" min="1" value="1"></label>
      <label>Router <select name="router"><option value="round_robin">round robin</option><option value="least_outstanding">least outstanding</option></select></label>
      <label title="vllm: continuous batching, prompts chunked into steps beside the decodes; sglang: SGLang's passes, a prefill first and never beside a decode, admission reserving output room, its KV cache sized as SGLang sizes it; static: fixed batches run to completion">Scheduler <select name="scheduler"><option>vllm</option><option>sglang</option><option>static</option></select></label></fieldset>
    <fieldset><legend>SLOs (ms; empty = not checked)</legend>
      <label>TTFT <input name="ttft" type="number" step="any" min="0" value="200"></label>
      <label>TPOT <input name="tpot" type="number" step="any" min="0" value="50"></label>
      <label>E2E <input name="e2e" type="number" step="any" min="0" value=""></label>
      <label>Attainment <input name="attain" type="number" step="any" min="0" max="1" value="0.99"></label></fieldset>
    <div class="row"><button type="submit">Simulate</button> <label class="inline"><input type="checkbox" name="sweep" checked> rate sweep and capacity search</label>
    <span id="sc-msg" role="status" class="msg"></span></div>
    </form>`);
  const out = section("", `<div id="sc-out"></div>`);
  out.hidden = true;
  const form = $("#serve");
  const saved = loadForm(SERVE_KEY);
  for (const [k, v] of Object.entries(saved)) {
    const f = form.elements[k];
    if (!f || ["model", "hfconfig", "gpu", "hffile"].includes(k)) continue;
    if (f instanceof RadioNodeList) f.value = v; else if (f.type === "checkbox") f.checked = !!v; else f.value = v;
  }
  let uploaded = null; // {name, config} of a config.json picked from disk
  const described = () => form.elements.source.value === "described";
  const closed = () => form.elements.load.value === "concurrency";
  const showKinds = () => {
    ["prompt", "output"].forEach((p) => {
      const kind = form.elements[`${p}-kind`].value;
      $$(`#${p} label[data-k]`).forEach((l) => { l.hidden = l.dataset.k !== kind; });
    });
    $$("#serve [data-src]").forEach((x) => { x.hidden = x.dataset.src !== form.elements.source.value; });
    $$("#serve [data-load]").forEach((x) => { x.hidden = x.dataset.load !== form.elements.load.value; });
    $("#serve [data-upload]").hidden = form.elements.hfconfig.value !== UPLOAD;
    const sweep = form.elements.sweep;
    sweep.disabled = closed();
    sweep.closest("label").title = closed() ? "the rate sweep and capacity search need an arrival rate" : "";
    const ex = examples.find((e) => e.name === form.elements.hfconfig.value);
    $("#sc-config-note").textContent = ex ? `${ex.title}: ${ex.summary}; context ${fmtNum(ex.context_tokens)} tokens.`
      : (uploaded ? `Uploaded ${uploaded.name}.` : "Pick a config.json file.");
  };
  const persist = () => {
    const v = {};
    for (const f of form.elements) if (f.name && f.type !== "file" && f.type !== "radio") v[f.name] = f.type === "checkbox" ? f.checked : f.value;
    v.source = form.elements.source.value;
    v.load = form.elements.load.value;
    saveForm(SERVE_KEY, v);
  };
  form.addEventListener("change", (ev) => {
    if (ev.target.name === "hfconfig") {
      const ex = examples.find((e) => e.name === ev.target.value);
      if (ex) { form.elements.quant.value = ex.quant; form.elements.moe_quant.value = ex.moe_quant || ""; }
    }
    showKinds(); persist();
  });
  $("#sc-config-file").addEventListener("change", async (ev) => {
    const file = ev.target.files[0];
    uploaded = null;
    $$(".field-error", form).forEach((x) => x.remove());
    if (!file) { showKinds(); return; }
    try {
      uploaded = { name: file.name, config: JSON.parse(await file.text()) };
      form.elements.quant.value = ""; form.elements.moe_quant.value = ""; // its own quantization_config
    }
    catch (e) { fieldError({ field: "description.config", message: `${file.name} is not JSON: ${e.message}` }); }
    showKinds();
  });

  const num = (name) => { const v = form.elements[name].value; return v === "" ? null : Number(v); };
  function length(p) {
    const kind = form.elements[`${p}-kind`].value;
    if (kind === "fixed") return { kind, tokens: num(`${p}-tokens`) };
    if (kind === "uniform") return { kind, lo: num(`${p}-lo`), hi: num(`${p}-hi`) };
    return { kind, median: num(`${p}-median`), p90: num(`${p}-p90`) };
  }
  function modelPart() {
    if (!described()) return { model: form.elements.model.value };
    const e = form.elements;
    const config = e.hfconfig.value === UPLOAD ? (uploaded ? uploaded.config : null) : e.hfconfig.value;
    const d = { config, gpu: e.gpu.value, tp: num("tp"), ep: num("ep"), dp: num("dp"), kv_dtype: e.kv_dtype.value };
    if (e.quant.value) d.quant = e.quant.value;
    if (e.moe_quant.value) d.moe_quant = e.moe_quant.value;
    return { description: d };
  }
  function body(rate, n, extra = {}) {
    const arrival = { pattern: form.elements.pattern.value, rate };
    if (arrival.pattern === "gamma") arrival.cv = num("cv");
    const slos = {};
    if (num("ttft") != null) slos.ttft_ms = num("ttft");
    if (num("tpot") != null) slos.tpot_ms = num("tpot");
    if (num("e2e") != null) slos.e2e_ms = num("e2e");
    if (num("attain") != null) slos.attainment = num("attain");
    const load = closed() ? { concurrency: num("concurrency"), clients_start: form.elements.clients_start.value } : { arrival };
    return Object.assign(modelPart(), load, { lengths: { prompt: length("prompt"), output: length("output") },
      n_requests: n, replicas: num("replicas"), router: form.elements.router.value, scheduler: { name: form.elements.scheduler.value },
      slos, seed: 0 }, extra);
  }
  function fieldError(e) {
    $$(".field-error", form).forEach((x) => x.remove());
    $$("[aria-invalid]", form).forEach((x) => x.removeAttribute("aria-invalid"));
    const map = { "arrival.rate": "rate", "arrival.cv": "cv", n_requests: "n", replicas: "replicas", router: "router", "slos.ttft_ms": "ttft",
      "slos.tpot_ms": "tpot", "slos.e2e_ms": "e2e", "slos.attainment": "attain", model: "model", concurrency: "concurrency",
      "description.gpu": "gpu", "description.tp": "tp", "description.ep": "ep", "description.dp": "dp", "description.quant": "quant",
      "description.moe_quant": "moe_quant", "description.kv_dtype": "kv_dtype", kv: described() ? "gpu" : null };
    if (e.code === "unknown_gpu") e = { field: "description.gpu", message: e.message, atField: String(e.message).split("; known:")[0] };
    else if (e.code === "too_large" && described()) e = { field: "description.config", message: e.message };
    else if (e.field && e.field.startsWith("description.config.")) e = { field: e.field, message: e.message, atField: `${e.field.slice(19)}: ${e.atField}` };
    let name = e.field && (map[e.field] || null);
    if (!name && e.field && e.field.startsWith("description.config")) name = form.elements.hfconfig.value === UPLOAD ? "hffile" : "hfconfig";
    if (!name && e.field && e.field.startsWith("lengths.")) {
      const [, p, k] = e.field.split(".");
      name = k ? `${p}-${k === "value" ? "tokens" : k}` : `${p}-kind`;
    }
    const f = name && form.elements[name];
    if (f && f.insertAdjacentHTML) {
      f.setAttribute("aria-invalid", "true");
      f.insertAdjacentHTML("afterend", `<span class="field-error" role="alert">${esc(e.atField || e.message)}</span>`);
      f.focus();
      $("#sc-msg").textContent = "";
    } else $("#sc-msg").innerHTML = `<span class="error">${esc(e.field ? e.field + ": " : "")}${esc(e.message)}</span>`;
  }

  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    persist();
    const msg = $("#sc-msg");
    msg.textContent = "simulating...";
    $$(".field-error", form).forEach((x) => x.remove());
    $$("[aria-invalid]", form).forEach((x) => x.removeAttribute("aria-invalid"));
    try {
      const rate = num("rate"), n = num("n");
      const res = await api("/api/scenarios", { method: "POST", body: JSON.stringify(body(rate, n, { include_records: true })) });
      out.hidden = false;
      renderAnswer(res);
      msg.textContent = "done";
      if (form.elements.sweep.checked && !closed()) await sweep(rate, n);
    } catch (e) { fieldError(e); }
  });

  function renderAnswer(res) {
    const r = res.result;
    const recs = r.records || [];
    const ext = Object.entries(r.extrapolation || {});
    $("#sc-out").innerHTML = `<h2>Answer <small>${esc(res.model)}</small></h2>
      ${basisBox(res.basis)}
      ${res.basis && res.basis.kind === "described" ? "" : r.extrapolated ? `<div class="banner warnbox" id="sc-extrapolated" role="note"><b>Extrapolated:</b> these requests use step shapes outside the calibration range of the simulated steps, so the answer is an unvalidated extrapolation.
        <ul>${ext.map(([k, v]) => `<li>${esc(k)} = ${fmtNum(v.value)} (calibrated ${fmtNum(v.low)}–${fmtNum(v.high)})</li>`).join("")}</ul></div>` : `<p class="ok-note" id="sc-calibrated">Within the calibration range of the simulated steps.</p>`}
      <div class="cards" id="sc-cards">
        ${card("Request throughput", fmtNum(r.request_throughput) + " req/s")}
        ${card("Goodput", r.request_goodput != null ? fmtNum(r.request_goodput) + " req/s" : "no SLOs")}
        ${card("SLO attainment", r.slo_attainment != null ? (100 * r.slo_attainment).toFixed(1) + "%" : "-")}
        ${card("Output tokens/s", fmtNum(r.output_throughput))}
        ${card("Median TTFT", fmtMs(r.ttft_ms.median))}${card("Median TPOT", fmtMs(r.tpot_ms.median))}
        ${card("p99 E2E", fmtMs(r.e2el_ms.p99))}${card("Completed", `${r.completed} in ${fmtMs(r.duration_s * 1000)}`)}
      </div>
      <div class="cols">
        <figure><figcaption>TTFT distribution (CDF)</figcaption><div class="chart" id="ch-ttft"></div></figure>
        <figure><figcaption>TPOT distribution (CDF)</figcaption><div class="chart" id="ch-tpot"></div></figure>
        <figure><figcaption>ITL distribution (from percentiles)</figcaption><div class="chart" id="ch-itl"></div></figure>
        <figure><figcaption>E2E latency distribution (CDF)</figcaption><div class="chart" id="ch-e2el"></div></figure>
      </div>
      <figure><figcaption>Throughput and goodput (req/s)</figcaption><div class="chart" id="ch-thr"></div></figure>
      <div id="sc-sweep"></div>
      <details><summary>Text summary</summary><pre>${esc(res.summary)}</pre></details>`;
    Charts.cdf($("#ch-ttft"), { label: "TTFT CDF", series: [{ name: "TTFT", values: recs.map((x) => x.ttft_ms) }], xLabel: "time to first token" });
    Charts.cdf($("#ch-tpot"), { label: "TPOT CDF", series: [{ name: "TPOT", values: recs.map((x) => x.tpot_ms).filter((x) => x != null) }], xLabel: "time per output token" });
    const q = r.itl_ms;
    Charts.cdf($("#ch-itl"), { label: "ITL CDF", series: [{ name: "ITL", values: [], quantiles: q.count ? [[q.median, 0.5], [q.p90, 0.9], [q.p95, 0.95], [q.p99, 0.99], [q.max, 1]] : [] }], xLabel: "inter-token latency" });
    Charts.cdf($("#ch-e2el"), { label: "E2E CDF", series: [{ name: "E2E", values: recs.map((x) => x.e2el_ms) }], xLabel: "end-to-end latency" });
    Charts.bars($("#ch-thr"), { label: "throughput and goodput", categories: ["requests/s"], legend: true, fmt: (v) => fmtNum(v),
      series: [{ name: "Throughput", values: [r.request_throughput] }, { name: "Goodput (meets SLOs)", values: [r.request_goodput] }] });
  }
  const card = (k, v) => `<div class="card"><div class="k">${esc(k)}</div><div class="v">${esc(v)}</div></div>`;
  function basisBox(b) {
    if (!b) return "";
    const err = b.expected_kernel_error;
    const errText = err && err.mape_pct != null
      ? `<b>${fmtNum(err.mape_pct)}%</b> mean error per kernel (worst cell ${fmtNum(err.worst_pct)}%; ${esc(err.basis)}). A kernel figure, not an error bound on TTFT or TPOT.`
      : (err ? esc(err.basis) : "not measured for traced answers: the simulated run's own accuracy applies");
    const cal = b.llm_calibration ? `${esc(b.llm_calibration.id)} v${esc(b.llm_calibration.version)} · ${esc(b.llm_calibration.digest)}` : "—";
    return `<div class="basis ${esc(b.kind)}" id="sc-basis" role="note">
      <p><span class="badge ${b.kind === "described" ? "described" : "traced"}">${b.kind === "described" ? "described" : "traced"}</span>
        ${b.kind === "described" ? "Step times from the model's description, timed by the LLM kernel model (no trace)." : "Step times from a finished simulation of a traced workload."}</p>
      <dl>
        <dt>Workload</dt><dd>${esc(b.workload)}</dd>
        <dt>GPU</dt><dd>${esc(b.gpu)}${b.gpu_name ? ` (${esc(b.gpu_name)}${b.gpu_memory_gb ? `, ${fmtNum(b.gpu_memory_gb)} GB` : ""})` : ""}</dd>
        <dt>Expected error</dt><dd id="sc-expected-error">${errText}</dd>
        <dt>LLM calibration</dt><dd>${cal}</dd>
        <dt>KV cache</dt><dd${b.kv_cache_sizing ? ` title="${esc(b.kv_cache_sizing)}"` : ""}>${b.kv_cache_tokens != null ? fmtNum(b.kv_cache_tokens) + (b.data_parallel > 1 ? ` tokens per engine, ${fmtNum(b.data_parallel)} data-parallel engines per replica` : " tokens per replica") : "—"}${b.kv_cache_sizing ? ` (${esc(b.kv_cache_sizing.split(":")[0])} rule)` : ""}${b.weights_gib_per_gpu != null ? ` · weights ${fmtNum(b.weights_gib_per_gpu)} GiB per GPU` : ""}${b.context_tokens ? ` · context ${fmtNum(b.context_tokens)} tokens` : ""}</dd>
      </dl></div>`;
  }

  async function sweep(rate, n) {
    const box = $("#sc-sweep");
    box.innerHTML = `<figure><figcaption>Rate sweep: latency against request rate (${3} s of traffic per point)</figcaption><div class="chart" id="ch-sweep"><p>sweeping...</p></div></figure><p id="sc-capacity" role="status"></p>`;
    const SECONDS = 3; // of simulated traffic per point, so the load grows with the rate
    const timed = (r, extra = {}) => { const x = body(r, null, extra); delete x.n_requests; x.duration = SECONDS; return x; };
    let cap = null;
    const b = timed(rate > 0 ? rate : 1, { capacity_search: { kind: "max_rate", rel_tol: 0.05, max_probes: 16 } });
    const hasSlo = Object.keys(b.slos).some((k) => k !== "attainment");
    if (hasSlo) {
      try { cap = (await api("/api/scenarios", { method: "POST", body: JSON.stringify(b) })).capacity; } catch (e) { $("#sc-capacity").textContent = "capacity search failed: " + e.message; }
    }
    // sweep around the capacity when there is one, else around the asked rate
    const base = cap && cap.found && cap.rate ? cap.rate : (rate > 0 ? rate : 1);
    const rates = [0.25, 0.5, 0.75, 1, 1.25, 1.5, 2].map((f) => Number((base * f).toPrecision(3)));
    const points = [];
    for (const r of rates) {
      try {
        const res = await api("/api/scenarios", { method: "POST", body: JSON.stringify(timed(r)) });
        points.push({ rate: r, ttft: res.result.ttft_ms.p99, e2e: res.result.e2el_ms.median, e2e99: res.result.e2el_ms.p99 });
      } catch (e) { /* a failed probe is left out */ }
    }
    const vlines = cap && cap.found && cap.rate != null ? [{ x: cap.rate, text: `capacity ${fmtNum(cap.rate)} req/s` }] : [];
    const hl = [];
    if (num("ttft") != null) hl.push({ y: num("ttft"), text: `TTFT SLO ${fmtMs(num("ttft"))}` });
    Charts.lines($("#ch-sweep"), { label: "latency vs request rate", xLabel: "request rate (req/s)", legend: true, vlines, hlines: hl,
      series: [{ name: "p99 TTFT", points: points.map((p) => [p.rate, p.ttft]) }, { name: "median E2E", points: points.map((p) => [p.rate, p.e2e]) },
        { name: "p99 E2E", points: points.map((p) => [p.rate, p.e2e99]), dashed: true }] });
    $("#sc-capacity").textContent = cap ? (cap.found && cap.rate != null ? `Capacity under the SLOs: ${fmtNum(cap.rate)} req/s on ${num("replicas")} replica(s) (${cap.probes.length} probes).` : "No probed rate met the SLOs.")
      : (hasSlo ? "" : "Set a TTFT, TPOT or E2E SLO to mark the capacity.");
  }

  let examples = [];
  async function loadDescribed() {
    try {
      const [{ configs: ex }, { configs: gpus }] = await Promise.all([api("/api/model-configs"), api("/api/configs")]);
      examples = ex;
      const keepCfg = form.elements.hfconfig.value || saved.hfconfig || (ex[0] && ex[0].name);
      $("#sc-config").innerHTML = ex.map((c) => `<option value="${esc(c.name)}">${esc(c.title)}</option>`).join("")
        + `<option value="${UPLOAD}">Upload a config.json…</option>`;
      if (keepCfg) form.elements.hfconfig.value = keepCfg;
      const keepGpu = form.elements.gpu.value || saved.gpu || "SM90_H100";
      $("#sc-gpu").innerHTML = gpus.map((g) => `<option value="${esc(g.id)}">${esc(g.id)} · ${esc(g.name)}</option>`).join("");
      if (gpus.some((g) => g.id === keepGpu)) form.elements.gpu.value = keepGpu;
      showKinds();
    } catch (e) { $("#sc-config-note").innerHTML = failed(e); }
  }
  showKinds();
  loadDescribed();
  async function refresh() {
    const sel = $("#sc-model");
    try {
      const { data } = await api("/v1/models");
      const keep = sel.value || loadForm(SERVE_KEY).model;
      const html = data.map((m) => `<option value="${esc(m.id)}">${esc(m.id.replace(/^cascade\//, ""))}</option>`).join("");
      if (sel.dataset.html !== html) { sel.innerHTML = html; sel.dataset.html = html; }
      if (keep && data.some((m) => m.id === keep)) sel.value = keep;
      if (!data.length && !described()) $("#sc-msg").textContent = "No finished simulation yet: start a run, or describe a model by its config.json.";
    } catch (e) { $("#sc-msg").innerHTML = failed(e); }
  }
  refresh();
  return { refresh };
}

// ---- GPU specs ----------------------------------------------------------------------------------
const SPEC_FIELDS = [
  ["id", "Id", "text"], ["name", "Name", "text"], ["arch", "Architecture", "arch"], ["sm_version", "SM version", "number"],
  ["sms", "SMs", "number"], ["boost_clock_mhz", "Boost clock (MHz)", "number"], ["memory_gb", "Memory (GB)", "number"],
  ["memory_type", "Memory type", "text"], ["memory_bandwidth_gbps", "Memory bandwidth (GB/s)", "number"], ["l2_mb", "L2 (MB)", "number"],
  ["smem_per_sm_kb", "Shared mem per SM (KB)", "number"], ["smem_per_block_kb", "Shared mem per block (KB)", "number"],
  ["max_threads_per_sm", "Max threads per SM", "number"], ["max_blocks_per_sm", "Max blocks per SM", "number"],
  ["max_warps_per_sm", "Max warps per SM", "number"], ["fp32_tflops", "FP32 TFLOPS", "number"], ["fp64_tflops", "FP64 TFLOPS", "number"],
  ["fp16_tflops", "FP16 TFLOPS", "number"], ["int32_tops", "INT32 TOPS", "number"], ["tensor_fp16", "Tensor FP16 TFLOPS", "number"],
];
const ARCHES = ["pascal", "volta", "turing", "ampere", "ada", "hopper", "blackwell"];

function gpusPage() {
  const cat = section("GPU specs", `<div id="gp-list">loading...</div>`);
  const add = section("Add a custom spec", `<p class="hint">Start from a built-in spec, change what differs, and save: the new id can then be picked for runs.</p>
    <div class="row"><label>Start from <select id="gp-base"></select></label></div>
    <form id="gp-form" novalidate><div class="spec-grid">${SPEC_FIELDS.map(([k, label, type]) => `<label>${esc(label)}
      ${type === "arch" ? `<select name="${k}">${ARCHES.map((a) => `<option>${a}</option>`).join("")}</select>` : `<input name="${k}" type="${type === "number" ? "number" : "text"}" step="any">`}</label>`).join("")}</div>
    <div class="row"><button type="submit">Save spec</button> <span id="gp-msg" role="status" class="msg"></span></div></form>`);
  let baseSpec = {};
  async function list() {
    try {
      const { configs } = await api("/api/configs");
      $("#gp-list").innerHTML = `<div class="scroll"><table id="gp-table"><thead><tr><th>Id</th><th>Name</th><th>Arch</th><th>SMs</th><th>Boost clock</th><th>Memory</th><th>Bandwidth</th><th>L2</th><th>FP32</th><th>FP16</th><th>Tensor FP16</th><th>Models</th><th>Accel-Sim config</th></tr></thead><tbody>` +
        configs.map((c) => `<tr><td><b>${esc(c.id)}</b>${c.custom ? ' <span class="badge synthetic">custom</span>' : ""}</td><td>${esc(c.name)}</td><td>${esc(c.arch)} (sm_${c.sm_version})</td><td class="num">${c.sms}</td>
          <td class="num">${fmtNum(c.boost_clock_mhz)} MHz</td><td class="num">${fmtNum(c.memory_gb)} GB ${esc(c.memory_type)}</td><td class="num">${fmtNum(c.memory_bandwidth_gbps)} GB/s</td>
          <td class="num">${fmtNum(c.l2_mb)} MB</td><td class="num">${fmtNum(c.fp32_tflops)}</td><td class="num">${fmtNum(c.fp16_tflops)}</td><td class="num">${c.tensor_tflops && c.tensor_tflops.fp16 ? fmtNum(c.tensor_tflops.fp16) : "-"}</td>
          <td><small>${esc((c.models || []).join(", "))}</small></td>
          <td>${c.accelsim_config && c.accelsim_config.name ? `<span title="${esc(c.accelsim_config.reason)}">${esc(c.accelsim_config.name)} <small>(${esc(c.accelsim_config.relation)})</small></span>`
            : `<small class="hint" title="${esc((c.accelsim_config || {}).reason || "")}">none</small>`}</td></tr>`).join("") + "</tbody></table></div><p class=\"hint\">TFLOPS are dense peaks.</p>";
      const sel = $("#gp-base");
      if (!sel.options.length) {
        sel.innerHTML = configs.filter((c) => !c.custom).map((c) => `<option value="${esc(c.id)}">${esc(c.id)}</option>`).join("");
        if (configs.some((c) => c.id === "SM90_H100")) sel.value = "SM90_H100";
        sel.addEventListener("change", () => fill(sel.value));
        fill(sel.value);
      }
    } catch (e) { $("#gp-list").innerHTML = failed(e); }
  }
  async function fill(id) {
    try {
      const { spec } = await api(`/api/configs/${enc(id)}`);
      baseSpec = spec;
      const form = $("#gp-form");
      for (const [k] of SPEC_FIELDS) {
        const f = form.elements[k];
        if (k === "tensor_fp16") f.value = (spec.tensor_tflops || {}).fp16 ?? "";
        else if (k === "id") f.value = `MY_${spec.id}`;
        else if (k === "name") f.value = `${spec.name} (custom)`;
        else f.value = spec[k] ?? "";
      }
    } catch (e) { $("#gp-msg").textContent = e.message; }
  }
  $("#gp-form").addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const form = ev.target;
    $$(".field-error", form).forEach((x) => x.remove());
    $$("[aria-invalid]", form).forEach((x) => x.removeAttribute("aria-invalid"));
    const spec = Object.assign({}, baseSpec, { aliases: [], sources: ["custom spec from the web UI"] });
    for (const [k, , type] of SPEC_FIELDS) {
      const v = form.elements[k].value;
      if (k === "tensor_fp16") { spec.tensor_tflops = Object.assign({}, baseSpec.tensor_tflops || {}); if (v !== "") spec.tensor_tflops.fp16 = Number(v); continue; }
      if (v === "") delete spec[k];
      else spec[k] = type === "number" ? Number(v) : v;
    }
    try {
      const res = await api("/api/configs", { method: "POST", body: JSON.stringify(spec) });
      $("#gp-msg").innerHTML = `<span class="ok-note">saved ${esc(res.config.id)}</span>`;
      list();
    } catch (e) {
      const key = e.field === "tensor_tflops" ? "tensor_fp16" : e.field;
      const f = key && form.elements[key];
      if (f) {
        f.setAttribute("aria-invalid", "true");
        f.insertAdjacentHTML("afterend", `<span class="field-error" role="alert">${esc(e.atField || e.message)}</span>`);
        f.focus();
        $("#gp-msg").textContent = "";
      } else $("#gp-msg").innerHTML = `<span class="error">${esc(e.message)}</span>`;
    }
  });
  list();
  return {};
}

// ---- start --------------------------------------------------------------------------------------
route();
loadStatus();
refreshTimer = setInterval(tick, 4000);
