"use strict";
// The dashboard: one EventSource on /dashboard/api/events sends the whole state every 2 s; this file
// only draws it. Every value goes into the page as text (textContent), never as HTML.
const COLORS = { telegram: "#229ed9", discord: "#5865f2", slack: "#4a154b", web: "#2563eb", cli: "#6b7280",
                 cron: "#b45309" };
let source = null, windowName = localStorage.getItem("dashboard-window") || "24h", last = null;

const $ = (id) => document.getElementById(id);
function el(tag, text, cls) {
  const node = document.createElement(tag);
  if (text !== undefined && text !== null) node.textContent = String(text);
  if (cls) node.className = cls;
  return node;
}
function row(cells) {
  const tr = document.createElement("tr");
  for (const c of cells) tr.appendChild(c instanceof Node ? wrap(c) : el("td", c));
  return tr;
}
function wrap(node) { if (node.tagName === "TD") return node; const td = document.createElement("td"); td.appendChild(node); return td; }
function num(n) { return n === null || n === undefined ? "—" : Number(n).toLocaleString("en"); }
function pct(r) { return r === null || r === undefined ? "—" : `${Math.round(r * 100)}%`; }
function duration(s) {
  if (s === null || s === undefined) return "—";
  s = Math.max(0, Math.round(s));
  if (s < 60) return `${s}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m`;
  if (s < 86400) return `${Math.floor(s / 3600)}h ${Math.floor((s % 3600) / 60)}m`;
  return `${Math.floor(s / 86400)}d ${Math.floor((s % 86400) / 3600)}h`;
}
function ago(iso, now) {
  if (!iso) return "—";
  const s = (Date.parse(now) - Date.parse(iso)) / 1000;
  return s < 5 ? "just now" : `${duration(s)} ago`;
}
function until(iso, now) { return iso ? `in ${duration((Date.parse(iso) - Date.parse(now)) / 1000)}` : "—"; }
function ident(id) {
  // a web tab's id is 32 hex digits: shown cut short, in full on hover, so the table keeps to the page's width
  const td = el("td", id || "—", "ident"); if (id) td.title = id; return td;
}
function badge(text, kind) { return el("span", text, `badge ${kind || ""}`); }
function fill(tbody, rows, empty, cols) {
  tbody.replaceChildren(...rows);
  if (!rows.length) { const td = el("td", empty, "muted"); td.colSpan = cols; const tr = document.createElement("tr"); tr.appendChild(td); tbody.appendChild(tr); }
}

const STATE_KIND = { running: "ok", starting: "warn", backoff: "warn", down: "bad", stopped: "bad" };
const FLUSH_TEXT = { done: ["saved", "ok"], nothing: ["nothing to save", ""], failed: ["failed", "bad"],
                     pending: ["waiting", "warn"], running: ["running", "warn"] };

function render(s) {
  last = s;
  $("summary").textContent = `${s.version} · up ${duration(s.uptime_s)}`;
  $("ready").textContent = s.ready ? "ready" : "not ready";
  $("ready").className = `badge ${s.ready ? "ok" : "bad"}`;
  $("no-model").hidden = s.model.name !== null;
  $("no-model-problem").hidden = !s.model.problem;  // configured, but it cannot answer: say why, not "gateway init"
  $("no-model-fix").hidden = !!s.model.problem;
  $("no-model-problem").textContent = s.model.problem ? `The configured model cannot answer: ${s.model.problem}. Set ` +
    "it where the gateway runs (a service reads its env file), then restart the gateway." : "";
  $("model-name").textContent = s.model.name || (s.model.problem ? "cannot answer" : "none");
  $("model-source").textContent = `(${s.model.source})`;
  renderAdapters(s);
  renderSessions(s);
  renderSeries(s.series);
  renderPairing(s);
  renderFlushes(s);
  renderApprovals(s);
  renderJobs(s);
}

function renderApprovals(s) {
  $("approvals-count").textContent = s.approvals.length ? `${s.approvals.length} waiting` : "";
  fill($("approvals").tBodies[0], s.approvals.map((a) => row([
    `${a.platform}:${a.requester}${a.requester_name ? ` (${a.requester_name})` : ""}`,
    el("td", a.kind === "ask" ? `asks: ${a.request}` : a.tool, "what"),
    el("td", ago(a.asked_at, s.now), "when"), el("td", until(a.expires_at, s.now), "when"),
    el("td", a.code, "code")])), "nothing is waiting", 5);
}

function renderAdapters(s) {
  fill($("adapters").tBodies[0], s.adapters.map((a) => row([
    a.platform, badge(a.state, STATE_KIND[a.state]), duration(a.uptime_s), el("td", num(a.reconnects), "num"),
    ago(a.last_inbound_at, s.now), el("td", a.last_error || "—", a.last_error ? "error" : "muted")])),
    "no adapters", 6);
}

function renderSessions(s) {
  const ss = s.sessions;
  $("sessions-count").textContent = `${ss.active} active`;
  const agents = Object.keys(ss.per_agent || {}).sort(mainFirst);
  const several = agents.length > 1;
  $("sessions-per-platform").replaceChildren(
    ...Object.entries(ss.per_platform).map(([p, n]) => badge(`${p}: ${n}`)),
    ...(several ? agents.map((a) => badge(`agent ${a}: ${ss.per_agent[a]}`, "agent")) : []));
  const rows = groupedByAgent(ss.recent, several).map((x) =>
    x.agent_header ? agentRow(x.agent_header, ss.per_agent[x.agent_header]) : sessionRow(x, s.now));
  fill($("sessions").tBodies[0], rows, "no active sessions", 7);
}

// With several agents the sessions come in one group per agent (main first), under a row naming it.
function groupedByAgent(recent, grouped) {
  if (!grouped) return recent;
  const names = [...new Set(recent.map((x) => x.agent))].sort(mainFirst);
  return names.flatMap((name) => [{ agent_header: name }, ...recent.filter((x) => x.agent === name)]);
}
function mainFirst(a, b) { return (a !== "main") - (b !== "main") || a.localeCompare(b); }
function agentRow(name, count) {
  const td = el("td", `agent ${name} · ${count} active`, "agent-group"); td.colSpan = 7;
  const tr = document.createElement("tr"); tr.appendChild(td); return tr;
}
function sessionRow(x, now) {
  const where = x.account && x.account !== "default" ? `${x.platform}@${x.account}` : x.platform;
  const prompt = x.input_tokens + x.cache_read_tokens + x.cache_write_tokens;
  return row([where, x.chat_type, ident(x.user_id), ago(x.last_activity, now),
    el("td", num(x.messages), "num"), el("td", `${num(prompt)} / ${num(x.output_tokens)}`, "num"),
    el("td", pct(x.cache_hit_ratio), "num")]);
}

function renderPairing(s) {
  const p = s.pairing;
  fill($("pairing").tBodies[0], p.pending.map((r) => {
    const input = el("input", null, "code");
    input.placeholder = "CODE"; input.autocomplete = "off"; input.setAttribute("aria-label", `code from ${r.platform}:${r.user_id}`);
    const approve = el("button", "Approve", "primary"), deny = el("button", "Deny");
    approve.onclick = () => decide("approve", { code: input.value });
    deny.onclick = () => decide("deny", { platform: r.platform, user_id: r.user_id });
    const actions = document.createElement("td"); actions.className = "actions"; actions.append(approve, " ", deny);
    return row([`${r.platform}:${r.user_id}${r.user_name ? ` (${r.user_name})` : ""}`,
                el("td", ago(r.asked_at, s.now), "when"), el("td", until(r.expires_at, s.now), "when"), input, actions]);
  }), p.locked.length ? `pairing locked on ${p.locked.map((l) => l.platform).join(", ")}` : "nobody is waiting", 5);
  $("approved").replaceChildren(...(p.approved.length ? p.approved.map((a) => el("li",
    `${a.platform}:${a.user_id}${a.user_name ? ` (${a.user_name})` : ""}, by ${a.approved_by} ${ago(a.approved_at, s.now)}`))
    : [el("li", "nobody yet", "muted")]));
}

async function decide(action, body) {
  const out = $("pairing-result");
  try {
    const resp = await fetch(`/dashboard/api/pairing/${action}`, {
      method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body) });
    const answer = await resp.json();
    out.textContent = answer.text;
    out.className = answer.ok ? "" : "error";
    refresh();
  } catch (err) { out.textContent = `failed: ${err}`; out.className = "error"; }
}

function renderFlushes(s) {
  const f = s.flushes;
  $("flush-counts").textContent = ["done", "nothing", "failed"].map((k) => `${FLUSH_TEXT[k][0]} ${f.counts[k] || 0}`).join(" · ");
  fill($("flushes").tBodies[0], f.log.map((r) => {
    const [text, kind] = FLUSH_TEXT[r.state] || [r.state, ""];
    const cell = document.createElement("td"); cell.appendChild(badge(text, kind));
    if (r.error) cell.appendChild(el("div", r.error, "error"));
    return row([`#${r.session} ${r.platform}`, ago(r.ended_at, s.now), r.end_reason || "—", cell]);
  }), "no session has ended yet", 4);
}

function renderJobs(s) {
  $("jobs-card").hidden = s.jobs === null;
  if (s.jobs === null) return;
  fill($("jobs").tBodies[0], s.jobs.jobs.map((j) => row([
    j.title, j.chat, j.when, j.next_run_at ? until(j.next_run_at, s.now) : "—", ago(j.last_run_at, s.now),
    badge(j.state, j.state === "active" ? "ok" : "")])), "no scheduled jobs", 6);
}

// ---------------------------------------------------------------------------------------- charts (plain SVG)
// W follows the chart's drawn width, so its labels keep their shape (a fixed 600-wide viewBox squeezed them on a
// phone); H is the stylesheet's fixed height.
let W = 600;
const H = 160, PAD = 18;
let lastSeries = null;
function svg(tag, attrs) {
  const node = document.createElementNS("http://www.w3.org/2000/svg", tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
  return node;
}
function axisLabel(x, y, text, anchor) { const t = svg("text", { x, y, "font-size": 10, fill: "#6b7280", "text-anchor": anchor || "start" }); t.textContent = text; return t; }
function timeLabel(iso, step) {
  const d = new Date(iso);
  return step >= 86400 ? d.toLocaleDateString() : d.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" });
}

function renderSeries(series) {
  lastSeries = series;
  W = Math.round($("messages-chart").getBoundingClientRect().width) || 600;
  for (const id of ["messages-chart", "cache-chart"]) $(id).setAttribute("viewBox", `0 0 ${W} ${H}`);
  for (const b of document.querySelectorAll(".windows button")) b.classList.toggle("on", b.dataset.window === series.window);
  const buckets = series.buckets, n = buckets.length, bw = (W - PAD) / Math.max(n, 1);
  const platforms = [...new Set(buckets.flatMap((b) => Object.keys(b.messages)))].sort();
  const totals = buckets.map((b) => Object.values(b.messages).reduce((a, c) => a + c, 0));
  const max = Math.max(1, ...totals);
  const msg = $("messages-chart");
  msg.replaceChildren(axisLabel(2, 10, String(max)), axisLabel(2, H - 2, timeLabel(buckets[0].start, series.step_s)),
                      axisLabel(W - 2, H - 2, "now", "end"));
  buckets.forEach((b, i) => {
    let y = H - PAD;
    for (const p of platforms) {
      const h = ((b.messages[p] || 0) / max) * (H - 2 * PAD);
      if (!h) continue;
      y -= h;
      const bar = svg("rect", { x: PAD + i * bw + 1, y, width: Math.max(bw - 2, 1), height: h, fill: COLORS[p] || "#999" });
      const tip = svg("title", {}); tip.textContent = `${timeLabel(b.start, series.step_s)} ${p}: ${b.messages[p]}`;
      bar.appendChild(tip); msg.appendChild(bar);
    }
  });
  $("messages-total").textContent = `(${totals.reduce((a, c) => a + c, 0)} in ${series.window})`;
  $("messages-legend").replaceChildren(...platforms.map((p) => { const s = el("span", p); const i = el("i"); i.style.background = COLORS[p] || "#999"; s.prepend(i); return s; }));

  const cache = $("cache-chart");
  cache.replaceChildren(axisLabel(2, 10, "100%"), axisLabel(2, H - PAD + 10, "0%"),
                        svg("line", { x1: PAD, x2: W, y1: H - PAD, y2: H - PAD, stroke: "#e5e7eb" }));
  const points = buckets.map((b, i) => b.hit_ratio === null ? null
    : [PAD + i * bw + bw / 2, H - PAD - b.hit_ratio * (H - 2 * PAD), b]).filter(Boolean);
  if (points.length > 1) cache.appendChild(svg("polyline", { points: points.map((p) => `${p[0]},${p[1]}`).join(" "), fill: "none", stroke: "#15803d", "stroke-width": 2 }));
  for (const [x, y, b] of points) {
    const dot = svg("circle", { cx: x, cy: y, r: 4, fill: "#15803d" });
    const tip = svg("title", {}); tip.textContent = `${timeLabel(b.start, series.step_s)}: ${pct(b.hit_ratio)} of ${num(b.prompt_tokens)} prompt tokens`;
    dot.appendChild(tip); cache.appendChild(dot);
  }
  const read = buckets.reduce((a, b) => a + b.cache_read, 0), prompt = buckets.reduce((a, b) => a + b.prompt_tokens, 0);
  $("cache-total").textContent = prompt ? `(${pct(read / prompt)} of prompt tokens, all model calls, ${series.window})`
    : "(no model calls yet)";
}

addEventListener("resize", () => { if (lastSeries) renderSeries(lastSeries); });

// ---------------------------------------------------------------------------------------- live updates
function connect() {
  if (source) source.close();
  source = new EventSource(`/dashboard/api/events?window=${encodeURIComponent(windowName)}`);
  source.addEventListener("state", (ev) => { $("live").textContent = "live"; render(JSON.parse(ev.data)); });
  source.onerror = () => { $("live").textContent = "reconnecting…"; };
}
async function refresh() {
  const resp = await fetch(`/dashboard/api/state?window=${encodeURIComponent(windowName)}`);
  if (resp.ok) render(await resp.json());
}
for (const b of document.querySelectorAll(".windows button")) {
  b.addEventListener("click", () => { windowName = b.dataset.window; localStorage.setItem("dashboard-window", windowName); connect(); });
}
connect();
