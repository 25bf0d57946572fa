// The agent-memory inspector: plain JavaScript over the JSON API, no build step.
// Every piece of stored text goes into the page through textContent (never as
// HTML), so a fact such as "<script>..." is shown, not run; text that sits next
// to other text goes in a <bdi>, so a bidi override in it cannot reorder the rest.
//
// Answers are only shown while they are current: each panel numbers its queries
// and drops an answer that a newer query (or logging out) has overtaken, a
// failed query clears what the panel showed, and a request without an answer
// within the deadline (<html data-timeout-ms>) is a visible error.
"use strict";

const KEY = "agent-memory-key";
const TIMEOUT_MS = 60000;
const $ = (id) => document.getElementById(id);
const state = { auditNext: null, session: 0, controller: new AbortController(), latest: {} };

class ApiError extends Error {
  constructor(status, problem, message) {
    super(message || (problem && (problem.detail || problem.title)) || "HTTP " + status);
    this.status = status;
    this.problem = problem;
  }
}

// The answer of a request made before logging out (or in again): never shown.
class Superseded extends Error {}

function timeoutMs() {
  const ms = Number(document.documentElement.dataset.timeoutMs);
  return ms > 0 ? ms : TIMEOUT_MS;
}

async function api(method, path, body) {
  const session = state.session;
  const ctl = new AbortController();
  const onLogout = () => ctl.abort();
  state.controller.signal.addEventListener("abort", onLogout, { once: true });
  const limit = timeoutMs();
  let timedOut = false;
  const timer = setTimeout(() => {
    timedOut = true;
    ctl.abort();
  }, limit);
  const headers = { Authorization: "Bearer " + sessionStorage.getItem(KEY) };
  // no-store: the answers hold private data; they must not land in the browser's cache
  const init = { method, headers, signal: ctl.signal, cache: "no-store" };
  if (body !== undefined) {
    headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  let r, text;
  try {
    r = await fetch(path, init);
    text = await r.text();
  } catch (err) {
    if (session !== state.session) throw new Superseded();
    if (timedOut) throw new ApiError(0, null, "no answer within " + limit / 1000 + " s (timed out)");
    throw new ApiError(0, null, "the server could not be reached (" + err.message + ")");
  } finally {
    clearTimeout(timer);
    state.controller.signal.removeEventListener("abort", onLogout);
  }
  if (session !== state.session) throw new Superseded();
  let data = null;
  try {
    data = JSON.parse(text);
  } catch (err) {
    if (r.ok) throw new ApiError(r.status, null, "the server's answer is not JSON");
  }
  if (!r.ok) {
    if (r.status === 401) {
      logout("The key was refused (" + ((data && data.title) || "HTTP 401") + ").");
      throw new Superseded();
    }
    throw new ApiError(r.status, data);
  }
  return data;
}

// -- which answer is current ---------------------------------------------------------
function begin(panel) {
  state.latest[panel] = (state.latest[panel] || 0) + 1;
  return state.latest[panel];
}

function current(panel, token) {
  return state.latest[panel] === token;
}

// A table about to show `subject`: rows of another subject go at once (not shown
// as this one's while it loads); the table is marked busy until `settle`.
function pending(tableId, subject) {
  const table = $(tableId);
  if (table.dataset.subject !== subject) {
    table.tBodies[0].replaceChildren();
    delete table.dataset.subject;
  }
  table.setAttribute("aria-busy", "true");
}

function settle(tableId, subject) {
  const table = $(tableId);
  table.removeAttribute("aria-busy");
  if (subject === undefined) delete table.dataset.subject;
  else table.dataset.subject = subject;
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
  const span = el("span");
  list.forEach((e, i) => {
    if (i) span.append(", ");
    span.append(el("bdi", e.type), ":", el("bdi", e.id));
  });
  return span;
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
      if (err instanceof Superseded) return;
      // not found: forgotten meanwhile (another tab, the API): show the lists as they are now
      if (err.status === 404) await Promise.all([loadFacts(), rerunSearch()]);
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
    ["derived", derived(r.derived)],
    ["failures", r.failures.join(", ") || "none"],
    ["complete", r.complete ? "yes" : "no"],
  ];
  for (const [k, v] of items) {
    const dd = el("dd", v instanceof Node ? null : v);
    if (v instanceof Node) dd.append(v);
    dl.append(el("dt", k), dd);
  }
  dl.dataset.facts = String(r.facts);
  dl.dataset.complete = String(r.complete);
}

function derived(list) {
  const span = el("span", list.length ? null : "none");
  list.forEach((d, i) => {
    if (i) span.append(", ");
    span.append(el("bdi", d.kind), " ", el("bdi", d.key), " (" + d.count + ")");
  });
  return span;
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
  const token = begin("facts");
  const subject = JSON.stringify([user, ns]);
  showError("user-error", null);
  pending("facts", subject);
  $("facts-more").textContent = "loading…";
  const q = new URLSearchParams({ user_id: user, limit: "100" });
  if (ns) q.set("namespace", ns);
  try {
    const page = await api("GET", "/v1/users/facts?" + q);
    if (!current("facts", token)) return;
    settle("facts", subject);
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
    if (err instanceof Superseded || !current("facts", token)) return;
    settle("facts");
    body("facts");
    $("facts-more").textContent = "";
    showError("user-error", err);
  }
}

async function search() {
  const { user, ns } = userQuery();
  const query = $("query").value.trim();
  if (!user || !query) return;
  const token = begin("search");
  const subject = JSON.stringify([user, ns, query]);
  showError("user-error", null);
  pending("results", subject);
  const req = { user_id: user, query, limit: 10, mode: "hybrid" };
  if (ns) req.namespace = ns;
  try {
    const out = await api("POST", "/v1/users/search", req);
    if (!current("search", token)) return;
    settle("results", subject);
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
    if (err instanceof Superseded || !current("search", token)) return;
    settle("results");
    body("results");
    $("search-mode").textContent = "";
    showError("user-error", err);
  }
}

async function rerunSearch() {
  if ($("query").value.trim()) await search();
}

// -- domains: activity, digest, events ---------------------------------------------
async function loadDomains() {
  const token = begin("domains");
  const ul = $("domains");
  try {
    const out = await api("GET", "/v1/domains");
    if (!current("domains", token)) return;
    ul.replaceChildren();
    for (const d of out.domains) {
      const b = el("button");
      b.append(el("bdi", d.domain), " (" + d.open_requests + ")");
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
    if (err instanceof Superseded || !current("domains", token)) return;
    ul.replaceChildren(el("li", "(not loaded)", "muted"));
    showError("domain-error", err);
  }
}

async function showDomain(domain) {
  const token = begin("domain");
  showError("domain-error", null);
  $("domain-view").hidden = false;
  $("domain-name").replaceChildren("in ", el("bdi", domain));
  for (const id of ["signals", "claims", "events"]) pending(id, domain);
  if ($("digest").dataset.subject !== domain) $("digest").textContent = "loading…";
  $("events-more").textContent = "";
  const q = new URLSearchParams({ domain });
  const [activity, digest, events] = await Promise.allSettled([
    api("GET", "/v1/activity?" + q),
    api("GET", "/v1/digest?" + q),
    api("GET", "/v1/events?" + new URLSearchParams({ domain, limit: "20" })),
  ]);
  if (!current("domain", token)) return;
  if ([activity, digest, events].some((x) => x.reason instanceof Superseded)) return;
  for (const id of ["signals", "claims", "events"]) settle(id, domain);
  $("digest").dataset.subject = domain;
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
    if (events.value.limited) $("events-more").textContent = "(latest 20 shown; older events were not loaded)";
  } else showError("domain-error", events.reason);
}

// -- audit trail ---------------------------------------------------------------------
async function loadAudit(fresh) {
  if (!fresh && !state.auditNext) return;
  // one listing at a time: a newer load (a refresh) drops an older one's answer,
  // and "Older entries" waits for the page it asked for (a double click loads it once)
  const token = begin("audit");
  const status = $("audit-status");
  const more = $("audit-more");
  more.disabled = true;
  $("audit").setAttribute("aria-busy", "true");
  const q = new URLSearchParams({ limit: "20" });
  if (!fresh) q.set("before", state.auditNext);
  try {
    const out = await api("GET", "/v1/audit?" + q);
    if (!current("audit", token)) return;
    $("audit").removeAttribute("aria-busy");
    const tbody = fresh ? body("audit") : $("audit").tBodies[0];
    status.textContent = "";
    delete status.dataset.status;
    for (const a of out.entries) {
      const counts = Object.entries(a.counts).map(([k, v]) => k + " " + v).join(", ");
      const tr = row(tbody, [when(a.at), a.operation, a.subject === null ? "" : a.subject, counts, a.caller]);
      tr.dataset.operation = a.operation;
    }
    state.auditNext = out.next;
    more.hidden = !out.next;
    more.disabled = false;
  } catch (err) {
    if (err instanceof Superseded || !current("audit", token)) return;
    $("audit").removeAttribute("aria-busy");
    if (fresh) {
      body("audit");
      state.auditNext = null;
    }
    more.hidden = !state.auditNext;  // older entries may be asked for again
    more.disabled = false;
    if (err.status === 403) status.textContent = "The audit trail needs an admin key.";
    else if (err.status === 404) status.textContent = "The audit trail is not available on this server.";
    else status.textContent = "Audit trail: " + err.message;
    status.dataset.status = String(err.status || "");
  }
}

// -- log in / out ----------------------------------------------------------------------
// Logging out ends the session: its requests are cancelled (an answer still on
// its way is dropped) and nothing it showed stays in the page, hidden parts included.
function logout(message) {
  state.session += 1;
  state.controller.abort();
  state.controller = new AbortController();
  state.auditNext = null;
  sessionStorage.removeItem(KEY);
  $("app").hidden = true;
  $("logout").hidden = true;
  $("login").hidden = false;
  $("who").textContent = "";
  for (const id of ["facts", "results", "signals", "claims", "events", "audit"]) {
    settle(id);
    body(id);
  }
  for (const id of ["domains", "receipt", "domain-name"]) $(id).replaceChildren();
  for (const id of ["digest", "facts-more", "search-mode", "events-more", "audit-status",
    "user-error", "domain-error"]) $(id).textContent = "";
  delete $("digest").dataset.subject;
  delete $("audit-status").dataset.status;
  for (const id of ["domain", "user", "namespace", "query"]) $(id).value = "";
  disarmForgetUser();
  $("audit-more").hidden = true;
  $("receipt-card").hidden = true;
  $("domain-view").hidden = true;
  $("login-error").textContent = message || "";
}

function disarmForgetUser() {
  const b = $("forget-user");
  b.classList.remove("confirm");
  delete b.dataset.armed;
  b.textContent = "Forget this user";
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
    // Superseded: the key was refused, and the login form already says so
    if (!(err instanceof Superseded)) logout("Could not log in: " + err.message);
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
  // The confirmation is for the user (and namespace) it was asked for: another
  // user id typed in since disarms it, so one press never forgets anyone.
  const forgetUser = $("forget-user");
  for (const id of ["user", "namespace"]) $(id).addEventListener("input", disarmForgetUser);
  forgetUser.addEventListener("click", async () => {
    const { user, ns } = userQuery();
    if (!user) return;
    const subject = JSON.stringify([user, ns]);
    if (forgetUser.dataset.armed !== subject) {
      forgetUser.classList.add("confirm");
      forgetUser.dataset.armed = subject;
      forgetUser.textContent = "Really forget everything about this user?";
      return;
    }
    disarmForgetUser();
    try {
      const req = { user_id: user };
      if (ns) req.namespace = ns;
      showReceipt(await api("POST", "/v1/users/forget", req));
      await Promise.all([loadFacts(), rerunSearch(), loadAudit(true)]);
    } catch (err) {
      if (!(err instanceof Superseded)) showError("user-error", err);
    }
  });
  if (sessionStorage.getItem(KEY)) enter();
});
