// The status page of lemonpack serve (lemonpack/server/status.py). Every text the server gives
// (model names, reasons, log lines, answers) is written with textContent, never as HTML.
"use strict";

const POLL_MS = 1000;
const LOG_MAX = 300;
const WARN = new Set(["exited", "replaced", "start_failed", "refused"]);
let previous = null; // {t, server, models: {id: model}} of the last poll
const engineLogs = {}; // model -> its last output lines

function $(id) { return document.getElementById(id); }

function el(tag, text, cls) {
  const e = document.createElement(tag);
  if (text !== undefined && text !== null) e.textContent = String(text);
  if (cls) e.className = cls;
  return e;
}

function size(b) {
  if (b === null || b === undefined) return "-";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let n = b, i = 0;
  while (Math.abs(n) >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return i === 0 ? `${n} B` : `${n.toFixed(1)} ${units[i]}`;
}

function rate(now, before, dt) {
  // requests per second and mean time to first byte (ms) between two polls of the same counters as /metrics
  if (!before || dt <= 0) return ["-", "-"];
  const dr = now.requests - before.requests, dc = now.ttfb_count - before.ttfb_count;
  const rps = (dr / dt).toFixed(1);
  const ttfb = dc > 0 ? `${(1000 * (now.ttfb_sum - before.ttfb_sum) / dc).toFixed(1)} ms` : "-";
  return [rps, ttfb];
}

function addLog(text, warning) {
  const li = el("li", text, warning ? "warning" : "");
  const log = $("log");
  log.appendChild(li);
  while (log.childNodes.length > LOG_MAX) log.removeChild(log.firstChild);
  log.scrollTop = log.scrollHeight;
}

async function post(path, body) {
  const r = await fetch(path, {method: "POST", headers: {"Content-Type": "application/json"},
                               body: JSON.stringify(body)});
  let doc = null;
  try { doc = await r.json(); } catch (e) { doc = null; }
  const msg = doc && doc.error ? doc.error.message : doc && doc.message ? doc.message : r.statusText;
  addLog(`${path} ${body.model_name}: ${r.status} ${msg || ""}`, !r.ok);
  poll();
}

function button(label, model, path) {
  const b = el("button", label);
  b.type = "button";
  b.dataset.model = model;
  b.dataset.action = label;
  b.addEventListener("click", () => { b.disabled = true; post(path, {model_name: model}); });
  return b;
}

function digest(d) {
  // sha256:0123456789ab... shortened, the whole digest in the title (a tooltip)
  const td = el("td", d && d.startsWith("sha256:") ? `${d.slice(0, 19)}...` : d || "-", "digest");
  if (d) td.title = d;
  return td;
}

function fillSelect(sel, names) {
  const keep = sel.value;
  const have = Array.from(sel.options).map((o) => o.value);
  if (have.length === names.length && have.every((v, i) => v === names[i])) return;
  while (sel.firstChild) sel.removeChild(sel.firstChild);
  for (const n of names) { const o = el("option", n); o.value = n; sel.appendChild(o); }
  if (names.includes(keep)) sel.value = keep;
}

function trust(t) {
  // the runner's trust check of the engine images: accepted/rejected, the scope, the reason (textContent only)
  const td = el("td");
  if (t === null || t === undefined) { td.textContent = "not checked"; return td; }
  td.appendChild(el("span", t.allowed ? "accepted" : "rejected", t.allowed ? "trust trust-ok" : "trust trust-rejected"));
  if (t.scope) td.appendChild(el("span", `scope ${t.scope}`, "scope"));
  if (t.reason) td.appendChild(el("span", t.reason, "reason"));
  if (t.policy) td.title = t.policy;
  return td;
}

function render(doc) {
  const now = performance.now() / 1000;
  const dt = previous ? now - previous.t : 0;
  const s = doc.server;
  $("s-memory").textContent = s.budget ? `${size(s.used)} of ${size(s.budget)}` : `${size(s.used)} (no budget)`;
  const [rps, ttfb] = rate(s, previous && previous.server, dt);
  $("s-rps").textContent = rps;
  $("s-ttfb").textContent = ttfb;
  $("s-requests").textContent = String(s.requests);
  $("s-uptime").textContent = `${Math.round(s.uptime_s)} s`;
  const rows = $("model-rows");
  const frag = document.createDocumentFragment();
  for (const m of doc.models) {
    const tr = el("tr");
    tr.dataset.model = m.id;
    tr.dataset.state = m.state;
    tr.appendChild(el("td", m.id, "name"));
    const st = el("td");
    st.appendChild(el("span", m.state, `state state-${m.state}`));
    if (m.reason) st.appendChild(el("span", m.reason, "reason"));
    tr.appendChild(st);
    tr.appendChild(el("td", m.recipe || "-"));
    const e = m.engine;
    tr.appendChild(el("td", e ? (e.container ? `container ${e.container}` : `pid ${e.pid}`) : (m.remote ? "remote" : "-")));
    tr.appendChild(el("td", `${size(m.memory.estimate)} / ${size(m.memory.rss)}`));
    tr.appendChild(digest(m.digests.model));
    tr.appendChild(digest(m.digests.image));
    tr.appendChild(trust(m.trust));
    tr.appendChild(el("td", m.queued ? `${m.in_flight} (${m.queued} queued)` : String(m.in_flight)));
    const [mrps, mttfb] = rate(m, previous && previous.models[m.id], dt);
    tr.appendChild(el("td", mrps));
    tr.appendChild(el("td", mttfb));
    const act = el("td");
    if (!m.remote) {
      act.appendChild(button("load", m.id, "/v1/load"));
      act.appendChild(button("unload", m.id, "/v1/unload"));
    }
    tr.appendChild(act);
    frag.appendChild(tr);
    engineLogs[m.id] = m.log || [];
  }
  if (!doc.models.length) frag.appendChild(el("tr")).appendChild(el("td", "no model registered")).colSpan = 12;
  while (rows.firstChild) rows.removeChild(rows.firstChild);
  rows.appendChild(frag);
  const names = doc.models.map((m) => m.id);
  fillSelect($("chat-model"), names);
  fillSelect($("log-model"), names);
  $("engine-log").textContent = (engineLogs[$("log-model").value] || []).join("\n");
  previous = {t: now, server: s, models: Object.fromEntries(doc.models.map((m) => [m.id, m]))};
}

let polling = false;
async function poll() {
  if (polling) return;
  polling = true;
  try {
    const r = await fetch("/v1/status", {cache: "no-store"});
    if (!r.ok) throw new Error(`HTTP ${r.status}`);
    render(await r.json());
    $("s-conn").textContent = "live";
  } catch (e) {
    $("s-conn").textContent = `unreachable (${e.message})`;
  } finally {
    polling = false;
  }
}

function events() {
  const es = new EventSource("/v1/events");
  es.addEventListener("engine", (msg) => {
    let ev;
    try { ev = JSON.parse(msg.data); } catch (e) { return; }
    const t = new Date(ev.ts * 1000).toLocaleTimeString();
    addLog(`${t} ${ev.model}: ${ev.event}: ${ev.message}`, WARN.has(ev.event));
    poll();
  });
  es.addEventListener("open", () => { $("s-conn").textContent = "live"; });
}

async function chat() {
  const out = $("chat-output");
  const model = $("chat-model").value;
  out.textContent = "";
  const body = {model, stream: true, messages: [{role: "user", content: $("chat-input").value}]};
  let r;
  try {
    r = await fetch("/v1/chat/completions", {method: "POST", headers: {"Content-Type": "application/json"},
                                              body: JSON.stringify(body)});
  } catch (e) { out.textContent = `failed: ${e.message}`; return; }
  if (!r.ok || !r.body) {
    let msg = r.statusText;
    try { const d = await r.json(); msg = d.error ? d.error.message : msg; } catch (e) { /* not JSON */ }
    out.textContent = `HTTP ${r.status}: ${msg}`;
    return;
  }
  const reader = r.body.getReader();
  const dec = new TextDecoder();
  let buf = "";
  for (;;) {
    let chunk;
    try { chunk = await reader.read(); } catch (e) { out.textContent += `\n[cut: ${e.message}]`; return; }
    if (chunk.done) break;
    buf += dec.decode(chunk.value, {stream: true});
    let i;
    while ((i = buf.indexOf("\n")) >= 0) {
      const line = buf.slice(0, i).trim();
      buf = buf.slice(i + 1);
      if (!line.startsWith("data:")) continue;
      const data = line.slice(5).trim();
      if (data === "[DONE]") return;
      try {
        const d = JSON.parse(data);
        if (d.error) { out.textContent += `\n[error: ${d.error.message}]`; continue; }
        const c = d.choices && d.choices[0];
        const text = c && (c.delta ? c.delta.content : c.text);
        if (text) out.textContent += text;
      } catch (e) { /* not JSON: skipped */ }
    }
  }
}

document.addEventListener("DOMContentLoaded", () => {
  $("chat-send").addEventListener("click", chat);
  $("log-model").addEventListener("change", () => {
    $("engine-log").textContent = (engineLogs[$("log-model").value] || []).join("\n");
  });
  poll();
  setInterval(poll, POLL_MS);
  events();
});
