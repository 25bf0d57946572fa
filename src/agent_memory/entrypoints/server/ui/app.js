// The agent-memory inspector: plain JavaScript over the JSON API, no build step.
// Every piece of stored text goes into the page through textContent (never as
// HTML), so a fact such as "<script>..." is shown, not run.
"use strict";

const KEY = "agent-memory-key";
const $ = (id) => document.getElementById(id);
const state = { auditNext: null };

class ApiError extends Error {
  constructor(status, problem) {
    super((problem && (problem.detail || problem.title)) || "HTTP " + status);
    this.status = status;
    this.problem = problem;
  }
}

async function api(method, path, body) {
  const headers = { Authorization: "Bearer " + sessionStorage.getItem(KEY) };
  const init = { method, headers };
  if (body !== undefined) {
    headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  const r = await fetch(path, init);
  const data = await r.json().catch(() => null);
  if (!r.ok) {
    if (r.status === 401) logout("The key was refused (" + (data && data.title) + ").");
    throw new ApiError(r.status, data);
  }
  return data;
}

function el(tag, text, cls) {
  const node = document.createElement(tag);
  if (text !== undefined && text !== null) node.textContent = String(text);
  if (cls) node.className = cls;
  return node;
}

function row(tbody, cells) {
  const tr = document.createElement("tr");
  for (const cell of cells) {
    if (cell instanceof Node) {
      const td = document.createElement("td");
      td.appendChild(cell);
      tr.appendChild(td);
    } else {
      tr.appendChild(el("td", cell));
    }
  }
  tbody.appendChild(tr);
  return tr;
}

function body(tableId) {
  const table = $(tableId);
  const tbody = table.tBodies[0];
  tbody.replaceChildren();
  table.dataset.renders = String(Number(table.dataset.renders || 0) + 1);
  return tbody;
}

function ago(iso) {
  if (!iso) return "";
  const s = Math.max(0, (Date.now() - Date.parse(iso)) / 1000);
  if (s < 60) return Math.round(s) + " s ago";
  if (s < 3600) return Math.round(s / 60) + " min ago";
  if (s < 86400) return Math.round(s / 3600) + " h ago";
  return Math.round(s / 86400) + " d ago";
}

function when(iso) {
  const span = el("span", ago(iso));
  span.title = iso || "";
  return span;
}

function confidence(value) {
  const wrap = el("span", null, "num");
  const bar = el("span", null, "bar");
  bar.style.width = Math.round(value * 40) + "px";
  wrap.append(bar, value.toFixed(2));
  return wrap;
}

function entities(list) {
  return list.map((e) => e.type + ":" + e.id).join(", ");
}

function showError(id, err) {
  $(id).textContent = err ? (err.status ? err.status + " " : "") + err.message : "";
}

// -- forgetting: a button that asks once more, then shows the receipt ------------
function forgetButton(label, action) {
  const b = el("button", label, "danger");
  b.type = "button";
  b.addEventListener("click", async () => {
    if (!b.classList.contains("confirm")) {
      b.classList.add("confirm");
      b.textContent = "Really forget?";
      return;
    }
    b.disabled = true;
    try {
      showReceipt(await action());
      await Promise.all([loadFacts(), rerunSearch(), loadAudit(true)]);
    } catch (err) {
      showError("user-error", err);
      b.disabled = false;
    }
  });
  return b;
}

function showReceipt(r) {
  $("receipt-card").hidden = false;
  const dl = $("receipt");
  dl.replaceChildren();
  const items = [
    ["user", r.user_id],
    ["namespace", r.namespace === null ? "(all)" : r.namespace],
    ["facts removed", r.facts],
    ["events removed", r.events],
    ["cache entries removed", r.cache_entries],
    ["derived", r.derived.map((d) => d.kind + " " + d.key + " (" + d.count + ")").join(", ") || "none"],
    ["failures", r.failures.join(", ") || "none"],
    ["complete", r.complete ? "yes" : "no"],
  ];
  for (const [k, v] of items) dl.append(el("dt", k), el("dd", v));
  dl.dataset.facts = String(r.facts);
  dl.dataset.complete = String(r.complete);
}

// -- a user's facts and search ---------------------------------------------------
function userQuery() {
  const user = $("user").value.trim();
  const ns = $("namespace").value.trim();
  return { user, ns };
}

async function loadFacts() {
  const { user, ns } = userQuery();
  if (!user) return;
  showError("user-error", null);
  const q = new URLSearchParams({ user_id: user, limit: "100" });
  if (ns) q.set("namespace", ns);
  try {
    const page = await api("GET", "/v1/users/facts?" + q);
    const tbody = body("facts");
    for (const f of page.facts) {
      const tr = row(tbody, [
        f.content, f.category, confidence(f.confidence), f.source, when(f.updated_at),
        forgetButton("Forget", () => api("POST", "/v1/users/facts/forget", { user_id: user, fact_id: f.id })),
      ]);
      tr.dataset.factId = f.id;
    }
    $("facts-more").textContent = page.next_cursor ? "(newest 100 shown)" : "";
  } catch (err) {
    showError("user-error", err);
  }
}

async function search() {
  const { user, ns } = userQuery();
  const query = $("query").value.trim();
  if (!user || !query) return;
  showError("user-error", null);
  const req = { user_id: user, query, limit: 10, mode: "hybrid" };
  if (ns) req.namespace = ns;
  try {
    const out = await api("POST", "/v1/users/search", req);
    $("search-mode").textContent = out.mode + " retrieval" + (out.fallback ? " (" + out.fallback + ")" : "");
    const tbody = body("results");
    for (const hit of out.results) {
      const f = hit.fact;
      const tr = row(tbody, [
        el("span", hit.score.toFixed(3), "num"), f.content, confidence(f.confidence), when(f.updated_at),
        forgetButton("Forget", () => api("POST", "/v1/users/facts/forget", { user_id: user, fact_id: f.id })),
      ]);
      tr.dataset.factId = f.id;
    }
  } catch (err) {
    showError("user-error", err);
  }
}

async function rerunSearch() {
  if ($("query").value.trim()) await search();
}

// -- domains: activity, digest, events ---------------------------------------------
async function loadDomains() {
  try {
    const out = await api("GET", "/v1/domains");
    const ul = $("domains");
    ul.replaceChildren();
    for (const d of out.domains) {
      const b = el("button", d.domain + " (" + d.open_requests + ")");
      b.type = "button";
      b.dataset.domain = d.domain;
      b.addEventListener("click", () => {
        $("domain").value = d.domain;
        showDomain(d.domain);
      });
      const li = document.createElement("li");
      li.appendChild(b);
      ul.appendChild(li);
    }
    if (!out.domains.length) ul.appendChild(el("li", "none", "muted"));
  } catch (err) {
    showError("domain-error", err);
  }
}

async function showDomain(domain) {
  showError("domain-error", null);
  $("domain-view").hidden = false;
  $("domain-name").textContent = "in " + domain;
  const q = new URLSearchParams({ domain });
  const [activity, digest, events] = await Promise.allSettled([
    api("GET", "/v1/activity?" + q),
    api("GET", "/v1/digest?" + q),
    api("GET", "/v1/events?" + new URLSearchParams({ domain, limit: "20" })),
  ]);
  const signals = body("signals");
  const claims = body("claims");
  if (activity.status === "fulfilled") {
    for (const x of activity.value.signals) {
      row(signals, [x.agent, x.request_id, x.doing, x.status, when(x.started_at), entities(x.entities)]);
    }
    for (const c of activity.value.claims) {
      row(claims, [entities([c.entity]), c.holder_agent, c.holder_request_id, when(c.since)]);
    }
  } else showError("domain-error", activity.reason);
  if (digest.status === "fulfilled") {
    $("digest").textContent = digest.value.digest === null
      ? "(no digest: " + digest.value.path + ", " + digest.value.raw_events + " raw events)"
      : digest.value.digest;
  } else $("digest").textContent = "(digest unavailable: " + digest.reason.message + ")";
  const tbody = body("events");
  if (events.status === "fulfilled") {
    for (const e of events.value.events) {
      row(tbody, [when(e.occurred_at), e.agent, e.action, e.outcome, e.summary, e.user_id || ""]);
    }
  } else showError("domain-error", events.reason);
}

// -- audit trail ---------------------------------------------------------------------
async function loadAudit(fresh) {
  const status = $("audit-status");
  if (fresh) state.auditNext = null;
  const q = new URLSearchParams({ limit: "20" });
  if (!fresh && state.auditNext) q.set("before", state.auditNext);
  const tbody = fresh ? body("audit") : $("audit").tBodies[0];
  try {
    const out = await api("GET", "/v1/audit?" + q);
    status.textContent = "";
    for (const a of out.entries) {
      const counts = Object.entries(a.counts).map(([k, v]) => k + " " + v).join(", ");
      const tr = row(tbody, [when(a.at), a.operation, a.subject === null ? "" : a.subject, counts, a.caller]);
      tr.dataset.operation = a.operation;
    }
    state.auditNext = out.next;
    $("audit-more").hidden = !out.next;
  } catch (err) {
    $("audit-more").hidden = true;
    if (err.status === 403) status.textContent = "The audit trail needs an admin key.";
    else if (err.status === 404) status.textContent = "The audit trail is not available on this server.";
    else status.textContent = "Audit trail: " + err.message;
    status.dataset.status = String(err.status || "");
  }
}

// -- log in / out ----------------------------------------------------------------------
function logout(message) {
  sessionStorage.removeItem(KEY);
  $("app").hidden = true;
  $("logout").hidden = true;
  $("login").hidden = false;
  $("who").textContent = "";
  for (const id of ["facts", "results", "signals", "claims", "events", "audit"]) body(id);
  $("receipt-card").hidden = true;
  $("domain-view").hidden = true;
  $("login-error").textContent = message || "";
}

async function enter() {
  $("login").hidden = true;
  $("app").hidden = false;
  $("logout").hidden = false;
  $("who").textContent = "logged in";
  await Promise.all([loadDomains(), loadAudit(true)]);
  document.body.dataset.ready = "1";
}

async function login(key) {
  sessionStorage.setItem(KEY, key);
  try {
    await api("GET", "/v1/domains");
  } catch (err) {
    if (err.status !== 401) logout("Could not log in: " + err.message);
    return;
  }
  $("key").value = "";
  await enter();
}

function on(id, event, handler) {
  $(id).addEventListener(event, (ev) => {
    ev.preventDefault();
    handler();
  });
}

document.addEventListener("DOMContentLoaded", () => {
  on("login-form", "submit", () => login($("key").value.trim()));
  on("logout", "click", () => {
    delete document.body.dataset.ready;
    logout("");
  });
  on("domain-form", "submit", () => showDomain($("domain").value.trim()));
  on("domains-refresh", "click", loadDomains);
  on("user-form", "submit", loadFacts);
  on("search-form", "submit", search);
  on("audit-refresh", "click", () => loadAudit(true));
  on("audit-more", "click", () => loadAudit(false));
  const forgetUser = $("forget-user");
  forgetUser.addEventListener("click", async () => {
    const { user, ns } = userQuery();
    if (!user) return;
    if (!forgetUser.classList.contains("confirm")) {
      forgetUser.classList.add("confirm");
      forgetUser.textContent = "Really forget everything about this user?";
      return;
    }
    forgetUser.classList.remove("confirm");
    forgetUser.textContent = "Forget this user";
    try {
      const req = { user_id: user };
      if (ns) req.namespace = ns;
      showReceipt(await api("POST", "/v1/users/forget", req));
      await Promise.all([loadFacts(), rerunSearch(), loadAudit(true)]);
    } catch (err) {
      showError("user-error", err);
    }
  });
  if (sessionStorage.getItem(KEY)) enter();
});
