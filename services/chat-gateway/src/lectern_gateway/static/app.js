// Lectern's small web UI. It uses the public HTTP API only (docs/api.md, /docs) with the
// bearer token the user pasted (kept in sessionStorage). Server text is always inserted as
// text (textContent, text nodes), never parsed as HTML.

import { lines, stackedBars } from "./charts.js";
import { readEventStream } from "./sse.js";

const TOKEN_KEY = "lectern.token";
const FINAL_STATUSES = new Set(["indexed", "duplicate", "failed", "superseded", "deleted", "archived"]);
const CITATION_LABEL = /\[((?:T|W)\d+)\]/g;
// progress streams open at once: browsers allow about six connections per host
const MAX_WATCHERS = 3;

const state = {
  token: null,
  claims: null,
  session: null, // the open chat session
  asking: null, // AbortController of the answer being streamed
  askingTurn: null, // its turn id (X-Lectern-Turn-Id): Stop cancels it on the server
  documentsCursor: null,
  watchers: new Map(), // document id -> AbortController of its progress stream
  toWatch: [], // ids of unfinished documents waiting for a progress stream
  flagMessageId: null,
};

// -- DOM helpers ---------------------------------------------------------------------------

const $ = (id) => document.getElementById(id);

// el("a", {href: url, class: "x", onclick: f}, "text", childNode): children are text or nodes
function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (value === null || value === undefined || value === false) continue;
    if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else if (key === "class") node.className = value;
    else node.setAttribute(key, value === true ? "" : String(value));
  }
  append(node, children);
  return node;
}

function append(node, children) {
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function formatDate(value) {
  if (!value) return "";
  const date = new Date(value);
  return Number.isNaN(date.getTime()) ? String(value) : date.toLocaleString();
}

function pages(item) {
  const start = item.page_start;
  const end = item.page_end;
  if (item.slide) return `slide ${item.slide}`;
  if (!start) return "";
  return end && end !== start ? `pp. ${start}–${end}` : `p. ${start}`;
}

// A section path without the document's title in front (Markdown lessons start with it).
function sectionOf(section, title) {
  if (!section || section === title) return "";
  return section.startsWith(`${title} > `) ? section.slice(title.length + 3) : section;
}

function notify(message, { error = false } = {}) {
  const notice = $("notice");
  $("notice-text").textContent = message;
  notice.classList.toggle("error", error);
  notice.setAttribute("role", error ? "alert" : "status");
  notice.hidden = false;
}

function clearNotice() {
  $("notice").hidden = true;
}

// -- the API -------------------------------------------------------------------------------

class ApiError extends Error {
  constructor(status, problem, fallback) {
    super((problem && (problem.detail || problem.title)) || fallback || `HTTP ${status}`);
    this.status = status;
    this.problem = problem;
  }
}

async function api(path, { method = "GET", json, body, headers = {}, signal, auth = true } = {}) {
  const sent = new Headers(headers);
  if (auth && state.token) sent.set("Authorization", `Bearer ${state.token}`);
  if (json !== undefined) {
    sent.set("Content-Type", "application/json");
    body = JSON.stringify(json);
  }
  if (!sent.has("Accept")) sent.set("Accept", "application/json");
  const response = await fetch(path, { method, headers: sent, body, signal });
  if (!response.ok) {
    let problem = null;
    try {
      problem = await response.json();
    } catch {
      problem = null;
    }
    const error = new ApiError(response.status, problem, response.statusText);
    if ((response.status === 429 || response.status === 503) && response.headers.get("Retry-After")) {
      error.message += ` (try again in ${response.headers.get("Retry-After")} s)`;
    }
    // a stored token that stopped working (expired, secret changed): back to signing in
    if (response.status === 401 && auth && sessionStorage.getItem(TOKEN_KEY)) {
      signOut(`Signed out: the gateway refused the token (${error.message}).`);
    }
    throw error;
  }
  return response;
}

async function apiJSON(path, options) {
  const response = await api(path, options);
  return response.status === 204 ? null : response.json();
}

// Run an action; show its error (unless it was a deliberate abort).
async function attempt(action) {
  try {
    return await action();
  } catch (error) {
    if (error.name === "AbortError") return undefined;
    if (!(error instanceof ApiError && error.status === 401)) {
      notify(error.message || String(error), { error: true });
    }
    return undefined;
  }
}

// -- signing in ----------------------------------------------------------------------------

// The token's claims, for display and for choosing screens; the gateway verifies it.
function decodeClaims(token) {
  try {
    const part = token.split(".")[1].replace(/-/g, "+").replace(/_/g, "/");
    const json = decodeURIComponent(
      Array.from(atob(part), (c) => `%${c.charCodeAt(0).toString(16).padStart(2, "0")}`).join(""),
    );
    const claims = JSON.parse(json);
    return typeof claims === "object" && claims !== null ? claims : null;
  } catch {
    return null;
  }
}

const isStaff = () => ["teacher", "admin"].includes(state.claims?.role);

async function signIn(token) {
  state.token = token.trim();
  state.claims = decodeClaims(state.token) || {};
  try {
    // any authenticated call proves the token; this one every role may make
    await api("/v1/sessions?limit=1");
  } catch (error) {
    state.token = null;
    state.claims = null;
    if (error instanceof ApiError && error.status === 401) {
      notify(`The gateway refused this token: ${error.message}`, { error: true });
    }
    throw error;
  }
  sessionStorage.setItem(TOKEN_KEY, state.token);
  $("token-input").value = "";
  clearNotice();
  renderShell();
  const wanted = location.hash.slice(1);
  go(viewAllowed(wanted) ? wanted : "chat");
}

// Show a view through the URL's fragment, so the browser's back button works.
function go(view) {
  if (location.hash.slice(1) === view) showView(view);
  else location.hash = view; // the hashchange handler shows it
}

function signOut(message) {
  stopWatchers();
  state.asking?.abort();
  state.token = null;
  state.claims = null;
  state.session = null;
  sessionStorage.removeItem(TOKEN_KEY);
  // nothing of the previous user stays on screen for the next one
  for (const id of ["messages", "session-list", "document-rows", "search-results", "memory-list",
                    "syllabus-tree", "quiz-area", "quiz-list"]) {
    $(id).replaceChildren();
  }
  $("session-header").replaceChildren(el("p", { class: "hint" }, "Start a session, or open a past one."));
  $("search-summary").textContent = "";
  $("ask-form").hidden = true;
  renderShell();
  showView("signin");
  if (message) notify(message, { error: true });
}

function renderShell() {
  const signedIn = Boolean(state.token);
  $("nav").hidden = !signedIn;
  $("whoami").hidden = !signedIn;
  if (signedIn) {
    const c = state.claims;
    $("whoami-text").textContent = `${c.sub ?? "?"} · ${c.role ?? "?"} · tenant ${c.tenant ?? "?"}`;
  }
  for (const link of document.querySelectorAll("#nav [data-view]")) {
    const forWhom = link.dataset.for;
    link.hidden = (forWhom === "staff" && !isStaff()) || (forWhom === "student" && isStaff());
  }
}

function viewAllowed(view) {
  const link = document.querySelector(`#nav [data-view="${CSS.escape(view)}"]`);
  return Boolean(link) && !link.hidden;
}

function showView(view) {
  if (!state.token) view = "signin";
  else if (!viewAllowed(view)) view = "chat";
  for (const section of document.querySelectorAll("main > .view")) {
    section.hidden = section.id !== `view-${view}`;
  }
  for (const link of document.querySelectorAll("#nav [data-view]")) {
    if (link.dataset.view === view) link.setAttribute("aria-current", "page");
    else link.removeAttribute("aria-current");
  }
  document.title = `Lectern · ${view === "signin" ? "sign in" : view}`;
  if (view === "chat") {
    attempt(loadSessions);
    attempt(loadPersonas);
    attempt(loadNotices);
  }
  if (view === "documents") attempt(() => loadDocuments({ reset: true }));
  if (view === "memories") attempt(loadMemories);
  if (view === "syllabus") attempt(loadSyllabus);
  if (view === "quizzes") attempt(loadQuizzes);
  if (view === "quality") attempt(loadQuality);
  if (view === "review") attempt(loadReview);
  if (view !== "documents") stopWatchers();
}

// -- chat ----------------------------------------------------------------------------------

async function loadSessions() {
  const sessions = await apiJSON("/v1/sessions?limit=50");
  const list = $("session-list");
  list.replaceChildren();
  if (sessions.length === 0) list.append(el("li", { class: "hint" }, "No sessions yet."));
  for (const session of sessions) {
    const current = state.session?.id === session.id;
    const subject = session.subject ? ` · ${session.subject}` : "";
    const label = session.title || `${session.mode} session${subject}`;
    list.append(
      el("li", {},
        el("button", {
          type: "button", class: "link", "aria-current": current ? "true" : null,
          onclick: () => attempt(() => openSession(session)),
        }, label),
        el("span", { class: "hint" }, ` ${formatDate(session.last_activity_at)}`,
          session.status === "ended" ? " · ended" : ""),
      ),
    );
  }
}

async function openSession(session) {
  state.asking?.abort();
  state.session = session;
  renderSessionHeader();
  const messages = await apiJSON(`/v1/sessions/${encodeURIComponent(session.id)}/messages`);
  const list = $("messages");
  list.replaceChildren();
  for (const message of messages) {
    if (message.role === "user") list.append(userMessage(message.content));
    else list.append(storedAnswer(message));
  }
  $("ask-form").hidden = session.status !== "active";
  await loadSessions();
  if (session.status === "active") $("question").focus();
}

function renderSessionHeader() {
  const session = state.session;
  const header = $("session-header");
  header.replaceChildren(
    el("h2", {}, session.title || `${session.mode === "tutor" ? "Tutor" : "Chat"} session`),
    el("p", { class: "hint" },
      [session.persona && `tutor ${session.persona}`, session.subject && `subject ${session.subject}`,
       `started ${formatDate(session.created_at)}`,
       session.status === "ended" ? "ended" : "active"].filter(Boolean).join(" · ")),
  );
  if (session.status === "active") {
    header.append(el("button", { type: "button", onclick: () => attempt(endSession) }, "End session"));
  }
}

async function endSession() {
  const ended = await apiJSON(`/v1/sessions/${encodeURIComponent(state.session.id)}/end`, {
    method: "POST",
  });
  state.session = ended.session;
  renderSessionHeader();
  $("ask-form").hidden = true;
  notify("Session ended. The tutor will remember what you found hard (see My memories).");
  await loadSessions();
}

// The tutor personas the student may pick (those of their classes).
async function loadPersonas() {
  const personas = await apiJSON("/v1/personas");
  const select = $("session-persona");
  const chosen = select.value;
  select.replaceChildren(el("option", { value: "" }, "Lectern (no persona)"));
  for (const persona of personas) {
    select.append(el("option", { value: persona.slug }, persona.display_name));
  }
  select.value = personas.some((p) => p.slug === chosen) ? chosen : "";
}

async function newSession(event) {
  event.preventDefault();
  const body = {};
  const persona = $("session-persona").value;
  // a persona brings its own default mode unless one was picked here
  if (persona) body.persona = persona;
  if (!persona || $("session-mode").value !== "chat") body.mode = $("session-mode").value;
  const subject = $("session-subject").value.trim();
  if (subject) body.subject = subject;
  const session = await apiJSON("/v1/sessions", { method: "POST", json: body });
  await openSession(session);
}

function userMessage(text) {
  return el("li", { class: "message user" }, el("p", { class: "who" }, "You"), el("p", {}, text));
}

// One assistant answer: text with clickable citations, its sources, confidence and actions.
class Answer {
  constructor() {
    this.text = "";
    this.sources = new Map(); // label -> {chunk_id, title, section, pages}
    this.citations = new Map(); // label -> citation
    this.messageId = null;
    this.body = el("div", { class: "answer-text" });
    this.sourceList = el("ul", { class: "sources", "aria-label": "Sources" });
    // web pages the model's search found: a list of their own, apart from the course
    this.webSources = new Map(); // label -> {url, title}
    this.webSpans = []; // {end, label}: where a [W#] goes in the live text
    this.webList = el("ul", { class: "sources web-sources", "aria-label": "Web sources" });
    this.webBox = el("div", { class: "web-box", hidden: "" },
      el("p", { class: "hint" }, "From the web (not your course material):"), this.webList);
    this.meta = el("p", { class: "answer-meta" });
    this.actions = el("div", { class: "row" });
    this.node = el("li", { class: "message assistant" },
      el("p", { class: "who" }, "Lectern"), this.body, this.sourceList, this.webBox, this.meta,
      this.actions);
  }

  addSource(source) {
    this.sources.set(source.label, source);
    this.renderSources();
  }

  addCitation(citation) {
    if (citation.kind === "web") {
      if (!this.webSources.has(citation.label)) {
        this.webSources.set(citation.label, { url: citation.url, title: citation.title });
        this.renderSources();
      }
      const spanned = typeof citation.span_end === "number";
      if (spanned && !this.webSpans.some((s) => s.end === citation.span_end && s.label === citation.label)) {
        this.webSpans.push({ end: citation.span_end, label: citation.label });
      }
      if (!this.citations.has(citation.label) || !spanned) this.citations.set(citation.label, citation);
      return;
    }
    this.citations.set(citation.label, citation);
    if (citation.kind === "textbook" && citation.chunk_id && !this.sources.has(citation.label)) {
      this.sources.set(citation.label, {
        label: citation.label, chunk_id: citation.chunk_id, title: citation.title || "source",
      });
      this.renderSources();
    }
  }

  chunkFor(label) {
    return this.sources.get(label)?.chunk_id || this.citations.get(label)?.chunk_id || null;
  }

  // The answer's text, each [T#] a button opening the source viewer, each [W#] a web link.
  renderText() {
    const text = this.textWithWebLabels();
    const parts = [];
    let last = 0;
    for (const match of text.matchAll(CITATION_LABEL)) {
      parts.push(text.slice(last, match.index));
      parts.push(this.citationNode(match[1], match[0]));
      last = match.index + match[0].length;
    }
    parts.push(text.slice(last));
    this.body.replaceChildren();
    append(this.body, parts);
  }

  // The streamed text with each [W#] after the span it grounds (a stored answer has them).
  textWithWebLabels() {
    if (!this.webSpans.length || /\[W\d+\]/.test(this.text)) return this.text;
    let out = this.text;
    const spans = [...this.webSpans].sort((a, b) => b.end - a.end || b.label.localeCompare(a.label));
    for (const { end, label } of spans) {
      const at = Math.min(Math.max(end, 0), out.length);
      out = `${out.slice(0, at)}[${label}]${out.slice(at)}`;
    }
    return out;
  }

  citationNode(label, shown) {
    const citation = this.citations.get(label);
    if (label.startsWith("W")) {
      const url = safeUrl(citation?.url);
      if (!url) return shown;
      return el("a", { href: url, target: "_blank", rel: "noopener noreferrer", class: "cite",
        title: citation.title || url }, shown);
    }
    const chunkId = this.chunkFor(label);
    if (!chunkId) return shown;
    const source = this.sources.get(label);
    const unsupported = citation && citation.supported === false;
    return el("button", {
      type: "button", class: unsupported ? "cite unsupported" : "cite",
      "aria-label": `Source ${label}: ${source?.title || "open"}${unsupported ? " (weak support)" : ""}`,
      onclick: () => attempt(() => openSource(chunkId, this.messageId)),
    }, shown);
  }

  renderSources() {
    this.webList.replaceChildren();
    for (const [label, web] of [...this.webSources].sort(byLabel)) {
      const url = safeUrl(web.url);
      this.webList.append(el("li", {},
        url ? el("a", { href: url, target: "_blank", rel: "noopener noreferrer" },
          `[${label}] ${web.title || url}`) : `[${label}] ${web.title || ""}`));
    }
    this.webBox.hidden = this.webSources.size === 0;
    this.sourceList.replaceChildren();
    for (const [label, source] of [...this.sources].sort(byLabel)) {
      const where = [sectionOf(source.section, source.title), pages(source)].filter(Boolean).join(" · ");
      this.sourceList.append(
        el("li", {},
          el("button", {
            type: "button", class: "link",
            onclick: () => attempt(() => openSource(source.chunk_id, this.messageId)),
          }, `[${label}] ${source.title}`),
          where ? el("span", { class: "hint" }, ` ${where}`) : null),
      );
    }
  }

  renderConfidence(band, score) {
    this.meta.replaceChildren(
      el("span", { class: `band band-${band}` }, `confidence: ${band}`),
      typeof score === "number" ? ` ${score.toFixed(2)}` : "",
    );
  }

  finish(messageId, { knowledgeGap = false, answeredBy = null } = {}) {
    this.messageId = messageId;
    this.renderText();
    this.renderSources();
    if (this.verdict) {
      this.meta.prepend(el("span", { class: `band verdict-${this.verdict}` }, `your answer: ${this.verdict}`), " ");
    }
    if (knowledgeGap) {
      this.meta.append(" · no material on this yet: your teacher has been told");
    }
    if (answeredBy) this.meta.append(` · answered by ${answeredBy}`);
    if (this.persona) this.meta.append(` · tutor: ${this.persona}`);
    this.actions.replaceChildren(
      el("button", { type: "button", class: "small", onclick: () => openFlag(messageId) },
        "Flag this answer"),
    );
  }
}

function byLabel([a], [b]) {
  return a.localeCompare(b, undefined, { numeric: true });
}

function safeUrl(url) {
  try {
    const parsed = new URL(url);
    return parsed.protocol === "https:" || parsed.protocol === "http:" ? parsed.href : null;
  } catch {
    return null;
  }
}

function storedAnswer(message) {
  const answer = new Answer();
  answer.text = message.content;
  for (const citation of message.citations || []) answer.addCitation(citation);
  if (message.confidence_band) answer.renderConfidence(message.confidence_band, message.confidence);
  answer.finish(message.id, { answeredBy: message.answered_by });
  return answer.node;
}

async function ask(event) {
  event.preventDefault();
  if (state.asking || !state.session) return;
  const question = $("question").value.trim();
  if (!question) return;
  const sessionId = state.session.id;
  const list = $("messages");
  list.append(userMessage(question));
  const answer = new Answer();
  answer.body.setAttribute("aria-busy", "true");
  answer.body.textContent = "…";
  list.append(answer.node);
  answer.node.scrollIntoView({ block: "end" });
  $("question").value = "";
  const controller = new AbortController();
  state.asking = controller;
  $("ask-button").disabled = true;
  $("stop-button").hidden = false;
  // a dropped connection resumes where it stopped: the same Idempotency-Key (never asked
  // twice) and the last event id seen
  const key = crypto.randomUUID();
  let lastId = "";
  let finished = false;
  try {
    for (let tries = 0; !finished; tries += 1) {
      const headers = { Accept: "text/event-stream", "Idempotency-Key": key };
      if (lastId) headers["Last-Event-ID"] = lastId;
      try {
        const response = await api(`/v1/sessions/${encodeURIComponent(sessionId)}/messages`, {
          method: "POST", json: { content: question }, signal: controller.signal, headers,
        });
        state.askingTurn = response.headers.get("X-Lectern-Turn-Id");
        if (!lastId) answer.body.textContent = "";
        for await (const frame of readEventStream(response.body)) {
          lastId = frame.id || lastId;
          let data;
          try {
            data = JSON.parse(frame.data);
          } catch {
            continue;
          }
          handleAnswerEvent(answer, frame.event, data);
          finished = finished || frame.event === "done" || frame.event === "error";
          answer.node.scrollIntoView({ block: "end" });
        }
        finished = true;
      } catch (error) {
        // a network failure (not a refusal, not Stop): try again a few times
        if (error instanceof ApiError || error.name === "AbortError" || tries >= 3) throw error;
        answer.meta.textContent = "Connection lost; resuming…";
        await new Promise((resolve) => setTimeout(resolve, 1000 * (tries + 1)));
        answer.meta.textContent = "";
      }
    }
  } catch (error) {
    if (error.name === "AbortError") {
      answer.meta.textContent = "Stopped.";
    } else {
      answer.body.textContent = "";
      answer.meta.textContent = `Failed: ${error.message}`;
      if (!(error instanceof ApiError && error.status === 401)) notify(error.message, { error: true });
    }
  } finally {
    answer.body.removeAttribute("aria-busy");
    state.asking = null;
    state.askingTurn = null;
    $("ask-button").disabled = false;
    $("stop-button").hidden = true;
    if (state.token) attempt(loadSessions);
  }
}

function handleAnswerEvent(answer, kind, data) {
  switch (kind) {
    case "sources":
      for (const source of data.sources || []) answer.addSource(source);
      break;
    case "token":
      answer.text += data.text;
      answer.renderText();
      break;
    case "citation":
      answer.addCitation(data.citation);
      answer.renderText();
      break;
    case "confidence":
      answer.renderConfidence(data.band, data.score);
      break;
    case "check":
      // tutor and drill modes: the reply to the last question, judged against the sources
      if (data.phase === "judged") answer.verdict = data.verdict;
      break;
    case "done":
      answer.persona = data.persona ? data.persona.split("@")[0] : null;
      for (const citation of data.citations || []) answer.addCitation(citation);
      answer.renderConfidence(data.band, data.confidence);
      answer.finish(data.message_id, {
        knowledgeGap: data.knowledge_gap, answeredBy: data.answered_by,
      });
      break;
    case "restart":
      // another replica answers the question again from its start: drop the partial answer
      answer.text = "";
      answer.sources.clear();
      answer.citations.clear();
      answer.webSources.clear();
      answer.webSpans = [];
      answer.renderSources();
      answer.renderText();
      break;
    case "error":
      answer.meta.replaceChildren(
        el("span", { class: "band band-gap" }, "error"),
        ` ${data.message}${data.retryable ? " (try again)" : ""}`,
      );
      break;
    default:
      break;
  }
}

// -- the quality dashboard (staff) ---------------------------------------------------------

const BAND_COLORS = [
  { key: "high", name: "high", color: "#2e7d32" },
  { key: "medium", name: "medium", color: "#f9a825" },
  { key: "low", name: "low", color: "#ef6c00" },
  { key: "gap", name: "knowledge gap", color: "#c62828" },
];

async function loadQuality(event) {
  event?.preventDefault();
  const days = Math.max(1, Number($("quality-days").value) || 14);
  const to = new Date();
  const from = new Date(to.getTime() - (days - 1) * 86400000);
  const iso = (d) => d.toISOString().slice(0, 10);
  const params = new URLSearchParams({ from: iso(from), to: iso(to), group_by: $("quality-group").value });
  const data = await apiJSON(`/v1/metrics/quality?${params}`);
  const t = data.totals;
  const pct = (x) => `${Math.round(x * 100)}%`;
  $("quality-summary").replaceChildren(
    el("p", {}, `${t.questions} questions · knowledge gaps ${pct(t.gap_rate)} · flagged ${t.flagged}`
      + ` · answers citing a source ${pct(t.with_citations)} · model fallbacks ${t.fallbacks}`),
    el("p", { class: "hint" }, `time to first token p50 ${t.ttft_ms.p50 ?? "–"} ms, p95 `
      + `${t.ttft_ms.p95 ?? "–"} ms · retrieval p95 ${t.retrieval_ms.p95 ?? "–"} ms · ingest backlog `
      + `${data.ingest_backlog.pending} pending, ${data.ingest_backlog.processing} processing`
      + (data.scope === "classes" ? ` · your classes: ${data.classes.join(", ") || "none"}` : "")),
    el("button", { type: "button", class: "link", onclick: () => attempt(() => showQuestions(t.questions_url)) },
      "Show these questions"),
  );
  const bars = data.series.map((s) => ({
    label: `${s.day.slice(5)}${s.group && s.group !== "all" ? ` ${s.group}` : ""}`,
    values: s.answers, href: s.questions_url,
  }));
  const latency = data.series.map((s) => ({
    label: s.day.slice(5), values: { p50: s.ttft_ms.p50, p95: s.ttft_ms.p95 },
  }));
  $("quality-charts").replaceChildren(
    el("h2", {}, "Answers by confidence band"),
    stackedBars(bars, BAND_COLORS, {
      label: "answers by band per day", onPick: (d) => attempt(() => showQuestions(d.href)),
    }),
    el("p", { class: "hint" }, "Pick a bar to see its questions."),
    el("h2", {}, "Time to first token (ms)"),
    lines(latency, [
      { key: "p50", name: "p50", color: "#1565c0" }, { key: "p95", name: "p95", color: "#6a1b9a" },
    ], { label: "time to first token per day", unit: " ms" }),
  );
  const list = (title, items, render) => el("div", { class: "card" }, el("h2", {}, title),
    items.length ? el("ul", {}, ...items.map((item) => el("li", {}, ...render(item))))
      : el("p", { class: "hint" }, "None."));
  $("quality-lists").replaceChildren(
    list("Top knowledge-gap topics", data.top_gap_topics, (g) => [
      el("button", { type: "button", class: "link", onclick: () => attempt(() => showQuestions(g.questions_url)) },
        g.topic), ` (${g.questions})`]),
    list("Most-cited documents", data.most_cited, (d) => [`${d.title} (${d.citations})`]),
    list("Documents never cited", data.never_cited, (d) => [d.title]),
  );
}

async function showQuestions(url) {
  const rows = await apiJSON(url);
  const box = $("quality-questions");
  box.hidden = false;
  box.replaceChildren(el("h2", {}, `Questions (${rows.length})`),
    el("ul", {}, ...rows.map((r) => el("li", {}, r.question,
      el("span", { class: "hint" }, ` · ${r.band || "no answer"}${r.flagged ? " · flagged" : ""}`
        + `${r.persona ? ` · ${r.persona}` : ""}`)))));
  box.scrollIntoView({ block: "start" });
}

// -- the source viewer ---------------------------------------------------------------------

async function openSource(chunkId, messageId) {
  const path = `/v1/chunks/${encodeURIComponent(chunkId)}`;
  // with the answer's id, the viewer marks the spans that answer cited
  const chunk = await apiJSON(messageId ? `${path}?message_id=${encodeURIComponent(messageId)}` : path);
  $("source-title").textContent = chunk.document_title;
  const section = sectionOf(chunk.section, chunk.document_title);
  $("source-meta").textContent = [section, pages(chunk), chunk.filename].filter(Boolean).join(" · ");
  const cited = $("source-cited");
  cited.replaceChildren();
  for (const h of chunk.highlights) {
    if (h.cited_sentence && h.kind === "sentence") {
      cited.append(el("p", { class: "hint" }, `[${h.label}] cited for: “${h.cited_sentence}”`));
    }
  }
  $("source-original").replaceChildren(
    el("button", {
      type: "button", class: "small", "data-action": "open-original",
      onclick: () => attempt(() => openOriginal(chunk.document_id, chunk.page_start)),
    }, chunk.page_start ? `Open the original at p. ${chunk.page_start}` : "Open the original"),
  );
  $("source-text").replaceChildren(...markedText(chunk.text, chunk.highlights));
  const dialog = $("source-dialog");
  if (!dialog.open) dialog.showModal();
  dialog.querySelector("mark")?.scrollIntoView({ block: "center" });
}

// The uploaded file in a new tab (fetched with the bearer token, shown from a blob URL); a
// PDF opens at the cited page through the browser's own viewer (#page=N).
async function openOriginal(documentId, page) {
  const response = await api(`/v1/documents/${encodeURIComponent(documentId)}/file`, {
    headers: { Accept: "*/*" },
  });
  const url = URL.createObjectURL(await response.blob());
  window.open(page ? `${url}#page=${page}` : url, "_blank", "noopener");
  setTimeout(() => URL.revokeObjectURL(url), 60_000);
}

// The chunk's text as nodes, with the cited spans in <mark> (overlapping spans merged) and
// the answer in them (the span the reader found, or the table cell the question asks for)
// in <strong class="answer">.
function markedText(text, highlights) {
  const answers = highlights
    .filter((h) => h.kind !== "sentence" && h.start >= 0 && h.end > h.start && h.end <= text.length)
    .sort((a, b) => a.start - b.start);
  const spans = highlights
    .filter((h) => h.kind === "sentence")
    .map((h) => ({ start: h.start, end: h.end, labels: [h.label] }))
    .filter((s) => s.start >= 0 && s.end > s.start && s.end <= text.length)
    .sort((a, b) => a.start - b.start);
  const merged = [];
  for (const span of spans) {
    const previous = merged[merged.length - 1];
    if (previous && span.start <= previous.end) {
      previous.end = Math.max(previous.end, span.end);
      previous.labels.push(...span.labels);
    } else {
      merged.push({ ...span });
    }
  }
  const nodes = [];
  let last = 0;
  for (const span of merged) {
    nodes.push(document.createTextNode(text.slice(last, span.start)));
    nodes.push(el("mark", { title: `cited as ${span.labels.join(", ")}` },
      ...withAnswers(text, span.start, span.end, answers)));
    last = span.end;
  }
  nodes.push(document.createTextNode(text.slice(last)));
  return nodes;
}

// text[start:end] as nodes, the parts inside an answer span in <strong class="answer">.
function withAnswers(text, start, end, answers) {
  const nodes = [];
  let at = start;
  for (const a of answers) {
    const from = Math.max(a.start, at);
    const to = Math.min(a.end, end);
    if (to <= from) continue;
    nodes.push(document.createTextNode(text.slice(at, from)));
    nodes.push(el("strong", { class: "answer", title: "the answer" }, text.slice(from, to)));
    at = to;
  }
  nodes.push(document.createTextNode(text.slice(at, end)));
  return nodes;
}

// -- flags ---------------------------------------------------------------------------------

function openFlag(messageId) {
  state.flagMessageId = messageId;
  $("flag-form").reset();
  const dialog = $("flag-dialog");
  dialog.returnValue = ""; // Esc closes without setting it: never resend an earlier flag
  dialog.showModal();
}

async function sendFlag() {
  const details = $("flag-details").value.trim();
  await apiJSON(`/v1/messages/${encodeURIComponent(state.flagMessageId)}/flags`, {
    method: "POST", json: { reason: $("flag-reason").value, details: details || null },
  });
  notify("Thank you: the answer was flagged for your teacher to review.");
}

// -- documents -----------------------------------------------------------------------------

async function loadDocuments({ reset = false } = {}) {
  if (reset) {
    stopWatchers();
    state.documentsCursor = null;
    $("document-rows").replaceChildren();
  }
  const params = new URLSearchParams({ limit: "50" });
  if ($("documents-mine").checked) params.set("mine", "true");
  if (state.documentsCursor) params.set("cursor", state.documentsCursor);
  const page = await apiJSON(`/v1/documents?${params}`);
  for (const document_ of page.items) upsertDocumentRow(document_);
  if (reset && page.items.length === 0) {
    $("document-rows").append(el("tr", {}, el("td", { colspan: "7", class: "hint" }, "No documents yet.")));
  }
  state.documentsCursor = page.next_cursor;
  $("documents-more").hidden = !page.next_cursor;
}

function documentRowId(id) {
  return `document-${id}`;
}

function upsertDocumentRow(doc, { first = false } = {}) {
  const status = el("td", { class: "status" }, statusBadge(doc));
  const row = el("tr", { id: documentRowId(doc.id) },
    el("th", { scope: "row" }, doc.title, el("div", { class: "hint" },
      doc.version > 1 ? `${doc.filename} · v${doc.version}` : doc.filename)),
    status,
    el("td", {}, doc.subject || ""),
    el("td", {}, doc.grade_level ?? ""),
    el("td", {}, String(doc.chunk_count)),
    el("td", {}, formatDate(doc.created_at), el("div", { class: "hint" }, doc.uploaded_by)),
    el("td", {}, doc.status === "deleted" ? "" : [
      doc.status === "indexed" ? el("button", {
        type: "button", class: "small", "aria-label": `Archive ${doc.title}`,
        onclick: () => attempt(() => setArchived(doc, true)),
      }, "Archive") : null,
      doc.status === "archived" ? el("button", {
        type: "button", class: "small", "aria-label": `Restore ${doc.title}`,
        onclick: () => attempt(() => setArchived(doc, false)),
      }, "Restore") : null,
      el("button", {
        type: "button", class: "small", "aria-label": `Edit ${doc.title}`,
        onclick: () => attempt(() => editDocument(doc)),
      }, "Edit"),
      el("button", {
        type: "button", class: "small danger", "aria-label": `Delete ${doc.title}`,
        onclick: () => attempt(() => deleteDocument(doc)),
      }, "Delete"),
    ]),
  );
  const existing = $(documentRowId(doc.id));
  if (existing) existing.replaceWith(row);
  else if (first) $("document-rows").prepend(row); // the list is newest first
  else $("document-rows").append(row);
  if (!FINAL_STATUSES.has(doc.status) && !state.watchers.has(doc.id) && !state.toWatch.includes(doc.id)) {
    state.toWatch.push(doc.id);
    startWatchers();
  }
  return row;
}

function statusBadge(doc) {
  const badge = el("span", { class: `status-${doc.status}` }, doc.status);
  if (doc.status === "failed" && doc.error) {
    const why = [doc.error.stage, doc.error.message].filter(Boolean).join(": ");
    return [badge, el("div", { class: "hint" }, why)];
  }
  if (doc.status === "duplicate" && doc.duplicate_of) {
    return [badge, el("div", { class: "hint" }, "same text as another document")];
  }
  return badge;
}

function startWatchers() {
  while (state.watchers.size < MAX_WATCHERS && state.toWatch.length > 0) {
    watchDocument(state.toWatch.shift());
  }
}

// Live progress from GET /v1/documents/{id}/events, read with fetch (it needs the header).
async function watchDocument(id) {
  const controller = new AbortController();
  state.watchers.set(id, controller);
  try {
    const response = await api(`/v1/documents/${encodeURIComponent(id)}/events`, {
      signal: controller.signal, headers: { Accept: "text/event-stream" },
    });
    for await (const frame of readEventStream(response.body)) {
      const data = JSON.parse(frame.data);
      if (frame.event === "progress") showProgress(id, data);
      else if (data && data.id) upsertDocumentRow(data);
    }
  } catch (error) {
    if (error.name !== "AbortError") notify(`Progress of a document: ${error.message}`, { error: true });
  } finally {
    if (state.watchers.get(id) === controller) {
      state.watchers.delete(id);
      startWatchers();
    }
  }
}

function showProgress(id, progress) {
  const cell = $(documentRowId(id))?.querySelector(".status");
  if (!cell) return;
  const counts = progress.total ? ` ${progress.done ?? 0}/${progress.total}` : "";
  const label = `${progress.stage || "working"}${counts}`;
  const bar = el("progress", { max: progress.total || 1, value: progress.total ? progress.done ?? 0 : null,
    "aria-label": `Indexing: ${label}` });
  cell.replaceChildren(
    el("span", { class: "status-processing" }, "processing"), el("div", { class: "hint" }, label), bar,
  );
}

function stopWatchers() {
  state.toWatch = [];
  for (const controller of state.watchers.values()) controller.abort();
  state.watchers.clear();
}

async function upload(event) {
  event.preventDefault();
  const form = $("upload-form");
  const data = new FormData();
  for (const [name, value] of new FormData(form)) {
    // unset metadata stays unset rather than empty
    if (value instanceof File || value.trim()) data.append(name, value);
  }
  const response = await api("/v1/documents", { method: "POST", body: data });
  const accepted = await response.json();
  form.reset();
  notify(accepted.duplicate
    ? `Already uploaded: “${accepted.document.title}” (${accepted.status}).`
    : `Uploaded “${accepted.document.title}”: indexing…`);
  $("document-rows").querySelector("td[colspan]")?.parentElement.remove(); // "No documents yet."
  upsertDocumentRow(accepted.document, { first: true });
}

// Archive (out of search and chat at once, restorable) or restore a document.
async function setArchived(doc, archived) {
  const id = encodeURIComponent(doc.id);
  const path = archived ? `/v1/documents/${id}/archive` : `/v1/documents/${id}/restore`;
  const changed = await apiJSON(path, { method: "POST" });
  upsertDocumentRow(changed);
  notify(`${archived ? "Archived" : "Restored"} “${changed.title}”.`);
}

async function deleteDocument(doc) {
  if (!confirm(`Delete “${doc.title}”? Its chunks leave search and chat at once.`)) return;
  const deleted = await apiJSON(`/v1/documents/${encodeURIComponent(doc.id)}`, { method: "DELETE" });
  upsertDocumentRow(deleted);
  notify(`Deleted “${deleted.title}”.`);
}

// Edit a document's metadata (takes effect at once; nothing is re-embedded) and read its
// history (the audit log: who changed what, when).
async function editDocument(doc) {
  const id = encodeURIComponent(doc.id);
  const dialog = $("edit-dialog");
  $("edit-doc-title").value = doc.title;
  $("edit-subject").value = doc.subject || "";
  $("edit-grade").value = doc.grade_level ?? "";
  $("edit-tags").value = (doc.topic_tags || []).join(", ");
  $("edit-freshness").value = doc.freshness_date || "";
  const [history, versions] = await Promise.all([
    apiJSON(`/v1/documents/${id}/audit`), apiJSON(`/v1/documents/${id}/versions`),
  ]);
  $("edit-versions").replaceChildren(...versions.map((v) => el("li", {},
    `v${v.version} · ${v.status} · ${v.filename} · ${v.chunk_count} chunks · ${formatDate(v.created_at)}`)));
  $("edit-history").replaceChildren(...(history.length ? history.map((entry) => el("li", {},
    `${formatDate(entry.at)} · ${entry.actor} · ${entry.action}`,
    el("div", { class: "hint" }, Object.entries(entry.changes)
      .map(([field, [before, after]]) => `${field}: ${JSON.stringify(before)} → ${JSON.stringify(after)}`)
      .join("; ")),
  )) : [el("li", { class: "hint" }, "No changes yet.")]));
  dialog.returnValue = "";
  dialog.showModal();
  await new Promise((resolve) => dialog.addEventListener("close", resolve, { once: true }));
  if (dialog.returnValue === "reprocess") {
    // a new version from the stored file; this one answers until it is indexed
    const accepted = await apiJSON(`/v1/documents/${id}/reprocess`, { method: "POST" });
    upsertDocumentRow(accepted.document, { first: true });
    notify(`Indexing “${accepted.document.title}” again (version ${accepted.version})…`);
    return;
  }
  if (dialog.returnValue !== "save") return;
  const grade = $("edit-grade").value.trim();
  const changed = await apiJSON(`/v1/documents/${id}`, {
    method: "PATCH",
    json: {
      title: $("edit-doc-title").value.trim(),
      subject: $("edit-subject").value.trim() || null,
      grade_level: grade ? Number(grade) : null,
      topic_tags: $("edit-tags").value.split(",").map((t) => t.trim()).filter(Boolean),
      freshness_date: $("edit-freshness").value || null,
    },
  });
  upsertDocumentRow(changed);
  notify(`Saved “${changed.title}”.`);
}

// -- review queues -------------------------------------------------------------------------

async function loadReview() {
  const [summary, conflicts, gaps, flags, duplicates, stale] = await Promise.all([
    apiJSON("/v1/review"), apiJSON("/v1/review/conflicts"), apiJSON("/v1/review/gaps"),
    apiJSON("/v1/review/flags"), apiJSON("/v1/review/duplicates"), apiJSON("/v1/review/stale"),
  ]);
  $("review-summary").textContent = `${summary.conflicts} conflicts · ${summary.gap_questions} `
    + `gap questions in ${summary.gap_topics} topics · ${summary.flags} flagged answers · `
    + `${summary.duplicates} near-duplicates · ${summary.stale} past their horizon`;
  const none = (text) => el("p", { class: "hint" }, text);
  const button = (label, action) => el("button", { type: "button", class: "small",
    onclick: () => attempt(async () => { await action(); await loadReview(); }) }, label);

  $("review-conflicts").replaceChildren(...(conflicts.length ? conflicts.map((c) => {
    const side = (s, key) => el("td", {},
      el("strong", {}, s.title), el("div", { class: "hint" }, [pages(s), s.section.join(" > ")]
        .filter(Boolean).join(" · ")), el("blockquote", {}, s.statement),
      button(`Archive ${key}`, () => resolveConflict(c, `archive_${key}`)));
    return el("table", { class: "card conflict" },
      el("caption", {}, `${c.kind === "number" ? "Different numbers" : "Negation"}: ${c.detail}`),
      el("tr", {}, side(c.a, "a"), side(c.b, "b")),
      el("tr", {}, el("td", { colspan: "2" },
        button("Material fixed", () => resolveConflict(c, "fixed")),
        button("Not a conflict", () => resolveConflict(c, "not_a_conflict")))));
  }) : [none("No conflicting sources.")]));

  $("review-gaps").replaceChildren(...(gaps.length ? gaps.map((g) => el("div", { class: "card" },
    el("strong", {}, g.topic), ` · ${g.count} questions from ${g.students} students `,
    button("Re-try now", () => retryGaps(g.topic)),
    el("label", { class: "small" }, "Upload material for it: ",
      el("input", { type: "file", "aria-label": `Upload material for ${g.topic}`,
        onchange: (event) => attempt(() => closeGapWith(g.topic, event.target)) })),
    el("ul", {}, ...g.questions.map((q) => el("li", {}, q.question,
      q.retried_at ? el("span", { class: "hint" }, ` (re-tried ${formatDate(q.retried_at)})`) : null))),
  )) : [none("No open knowledge gaps.")]));

  $("review-flags").replaceChildren(...(flags.length ? flags.map((f) => el("div", { class: "card" },
    el("p", {}, el("strong", {}, "Question: "), f.question || "?"),
    el("p", {}, el("strong", {}, "Answer: "), f.answer),
    el("p", { class: "hint" }, `Flagged ${f.reason}${f.details ? `: ${f.details}` : ""} · `
      + (f.sources.map((s) => `[${s.label}] ${s.title || ""}`).join(", ") || "no sources")),
    button("Material fixed", () => resolveFlag(f, "fixed_material")),
    button("Wrong source", () => resolveFlag(f, "wrong_source")),
    button("Dismiss", () => resolveFlag(f, "dismissed")),
  )) : [none("No flagged answers.")]));

  $("review-duplicates").replaceChildren(...(duplicates.length ? duplicates.map((d) => el("div",
    { class: "card" }, `“${d.document.title}” nearly repeats “${d.duplicate_of.title}”`
      + (d.score ? ` (${Math.round(d.score * 100)}% alike) ` : " "),
    button("Keep both", () => decideDuplicate(d, "keep")),
    button("Merge into the earlier one", () => decideDuplicate(d, "merge")),
    button("Distinct", () => decideDuplicate(d, "distinct")),
  )) : [none("No near-duplicates to decide on.")]));

  $("review-stale").replaceChildren(...(stale.length ? stale.map((d) => el("div", { class: "card" },
    `“${d.document.title}” (${d.document.subject || "no subject"}) dated ${d.dated}: `
      + `${d.overdue_days} days past its ${d.horizon_days}-day horizon `,
    button("Edit", () => editDocument({ ...d.document, freshness_date: d.dated })),
    button("Archive", () => setArchived(d.document, true)),
  )) : [none("Nothing past its horizon.")]));
}

async function resolveConflict(conflict, resolution) {
  await apiJSON(`/v1/review/conflicts/${encodeURIComponent(conflict.id)}/resolve`,
    { method: "POST", json: { resolution } });
  notify("Conflict resolved.");
}

async function resolveFlag(flag, action) {
  const source = flag.sources[0];
  await apiJSON(`/v1/review/flags/${encodeURIComponent(flag.id)}/resolve`, {
    method: "POST",
    json: { action, document_id: action === "dismissed" ? null : source?.document_id ?? null },
  });
  notify("Flag resolved.");
}

async function retryGaps(topic) {
  const results = await apiJSON("/v1/review/gaps/retry", { method: "POST", json: { topic } });
  const answered = results.filter((r) => r.outcome === "answered").length;
  notify(`${answered} of ${results.length} questions now answered; their students were told.`);
}

// Upload material for a gap topic: its questions are re-tried once it is indexed.
async function closeGapWith(topic, input) {
  const file = input.files[0];
  if (!file) return;
  const data = new FormData();
  data.append("file", file);
  const accepted = await (await api("/v1/documents", { method: "POST", body: data })).json();
  await apiJSON("/v1/review/gaps/close",
    { method: "POST", json: { topic, document_id: accepted.document.id } });
  input.value = "";
  notify(`Uploaded “${accepted.document.title}”: the questions on ${topic} are re-tried once it is indexed.`);
}

async function decideDuplicate(pair, decision) {
  await apiJSON(`/v1/review/duplicates/${encodeURIComponent(pair.document.id)}`,
    { method: "POST", json: { decision } });
  notify(`“${pair.document.title}”: ${decision}.`);
}

async function setHorizon(event) {
  event.preventDefault();
  const subject = $("horizon-subject").value.trim();
  await apiJSON(`/v1/review/horizons/${encodeURIComponent(subject)}`,
    { method: "PUT", json: { days: Number($("horizon-days").value) } });
  notify(`Horizon of ${subject} set.`);
  await loadReview();
}

// A student's notices: a question of theirs that now has an answer.
async function loadNotices() {
  const box = $("notices");
  const notices = await apiJSON("/v1/notices?unread=true");
  box.hidden = notices.length === 0;
  box.replaceChildren(...notices.map((n) => el("p", {}, n.text, " ",
    n.session_id ? el("button", { type: "button", class: "small", onclick: () => attempt(async () => {
      await apiJSON(`/v1/notices/${encodeURIComponent(n.id)}/read`, { method: "POST" });
      const sessions = await apiJSON("/v1/sessions");
      const session = sessions.find((s) => s.id === n.session_id);
      if (session) await openSession(session);
      await loadNotices();
    }) }, "Open the answer") : null)));
}

// -- search --------------------------------------------------------------------------------

async function search(event) {
  event.preventDefault();
  const filters = {
    collections: $("search-assessment").checked ? ["educational", "assessment"] : ["educational"],
  };
  const subject = $("search-subject").value.trim();
  if (subject) filters.subject = subject;
  const k = Number.parseInt($("search-k").value, 10) || 10;
  const body = { query: $("search-query").value.trim(), k, filters };
  const result = await apiJSON("/v1/search", { method: "POST", json: body });
  const list = $("search-results");
  list.replaceChildren();
  const total = Object.values(result.timings_ms || {}).reduce((a, b) => a + b, 0);
  $("search-summary").textContent = `${result.candidates.length} results` +
    (result.queries.length ? ` for ${result.queries.map((q) => `“${q}”`).join(", ")}` : "") +
    (total ? ` · ${Math.round(total)} ms` : "");
  for (const c of result.candidates) {
    const ranks = [
      c.dense_rank ? `dense #${c.dense_rank}` : null,
      c.sparse_rank ? `keyword #${c.sparse_rank}` : null,
      `fused ${c.fused_score.toFixed(4)}`,
    ].filter(Boolean).join(" · ");
    list.append(
      el("li", { class: "card" },
        el("h2", {}, el("button", {
          type: "button", class: "link", onclick: () => attempt(() => openSource(c.chunk_id, null)),
        }, c.title)),
        el("p", { class: "hint" },
          [sectionOf(c.section_path, c.title), pages(c), ranks].filter(Boolean).join(" · ")),
        el("p", { class: "excerpt" }, c.text.length > 600 ? `${c.text.slice(0, 600)}…` : c.text),
      ),
    );
  }
}

// -- memories ------------------------------------------------------------------------------

async function loadMemories() {
  const memories = await apiJSON("/v1/me/memories");
  const list = $("memory-list");
  list.replaceChildren();
  if (memories.length === 0) {
    list.append(el("li", { class: "hint" },
      "Nothing remembered yet: memories are distilled from your sessions when they end."));
  }
  for (const memory of memories) {
    list.append(
      el("li", { class: "card memory" },
        el("span", { class: `kind kind-${memory.kind}` }, memory.kind),
        el("p", {}, memory.text),
        memory.because
          ? el("p", { class: "evidence" }, `Because you ${memory.because}.`)
          : false,
        el("p", { class: "hint" },
          [memory.topic, `strength ${memory.strength.toFixed(2)}`, formatDate(memory.updated_at)]
            .filter(Boolean).join(" · ")),
        el("button", {
          type: "button", class: "small", "aria-label": `Forget: ${memory.text}`,
          onclick: () => attempt(() => forgetMemory(memory.id)),
        }, "Forget"),
      ),
    );
  }
}

async function forgetMemory(id) {
  await api(`/v1/me/memories/${encodeURIComponent(id)}`, { method: "DELETE" });
  notify("Forgotten.");
  await loadMemories();
}

async function forgetAll() {
  if (!confirm("Forget everything the tutor remembers about you?")) return;
  const result = await apiJSON("/v1/me/memories", { method: "DELETE" });
  notify(`Forgot ${result.deleted} memories.`);
  await loadMemories();
}

// -- syllabus ------------------------------------------------------------------------------

async function loadSyllabus(event) {
  event?.preventDefault();
  const subject = $("syllabus-subject").value.trim();
  const syllabus = await apiJSON(`/v1/syllabus?subject=${encodeURIComponent(subject)}`);
  const tree = $("syllabus-tree");
  tree.replaceChildren();
  if (syllabus.modules.length === 0) tree.append(el("p", { class: "hint" }, "No indexed material yet."));
  for (const module of syllabus.modules) {
    const block = el("section", { class: "card syllabus-module" },
      el("h2", {}, module.module || "Material without a module"));
    for (const doc of module.documents) {
      const list = el("ol", { class: "syllabus-sections" });
      for (const section of doc.sections) {
        list.append(syllabusSection(doc, section));
      }
      block.append(el("h3", {}, doc.title), list);
    }
    tree.append(block);
  }
}

function syllabusSection(doc, section) {
  const title = section.title || "(before the first heading)";
  return el("li", { class: `syllabus-section level-${Math.min(section.level, 4)}` },
    el("p", { class: "syllabus-heading" }, el("strong", {}, title),
      el("span", { class: "hint" }, ` ${pages(section)} · ${section.chunk_count} passages`)),
    section.overview && section.overview !== section.title
      ? el("p", { class: "hint" }, section.overview) : null,
    el("div", { class: "row" },
      el("button", { type: "button", class: "small",
        onclick: () => attempt(() => openSource(section.first_chunk_id)) }, "Read"),
      el("button", { type: "button", class: "small", "data-action": "quiz-section",
        onclick: () => attempt(() => quizOnSection(doc, section)) }, "Quiz me on this"),
      el("button", { type: "button", class: "small", "data-action": "chat-section",
        onclick: () => attempt(() => chatAboutSection(section)) }, "Ask about this"),
    ),
  );
}

async function quizOnSection(doc, section) {
  const quiz = await apiJSON("/v1/quizzes", {
    method: "POST",
    json: { document_ids: [doc.id], section: section.path, num_questions: 5 },
  });
  go("quizzes");
  showQuiz(quiz);
}

async function chatAboutSection(section) {
  const session = await apiJSON("/v1/sessions", { method: "POST", json: { mode: "tutor" } });
  go("chat");
  await openSession(session);
  const title = section.title.replace(/^\s*[\d.]+\s+/, "");
  $("question").value = `Explain ${title}.`;
  $("question").focus();
}

// -- quizzes -------------------------------------------------------------------------------

async function loadQuizzes() {
  const quizzes = await apiJSON("/v1/quizzes?limit=20");
  const list = $("quiz-list");
  list.replaceChildren();
  if (quizzes.length === 0) list.append(el("li", { class: "hint" }, "No quizzes yet."));
  for (const quiz of quizzes) {
    list.append(el("li", {},
      el("button", { type: "button", class: "link", onclick: () => showQuiz(quiz) }, quiz.title),
      el("span", { class: "hint" }, ` ${quiz.questions.length} questions · ${formatDate(quiz.created_at)}`)));
  }
}

async function newQuiz(event) {
  event.preventDefault();
  const body = {
    num_questions: Number($("quiz-count").value) || 5,
    difficulty: $("quiz-difficulty").value,
  };
  const subject = $("quiz-subject").value.trim();
  if (subject) body.subject = subject;
  showQuiz(await apiJSON("/v1/quizzes", { method: "POST", json: body }));
  await loadQuizzes();
}

function showQuiz(quiz) {
  const form = el("form", { id: "quiz-take", class: "card quiz" }, el("h2", {}, quiz.title));
  quiz.questions.forEach((question, index) => {
    const name = `q-${index}`;
    const box = el("fieldset", { class: "quiz-question", "data-question-id": question.id },
      el("legend", {}, `${index + 1}. ${question.prompt}`));
    if (question.options.length > 0) {
      question.options.forEach((option, n) => {
        const id = `${name}-${n}`;
        box.append(el("div", { class: "option" },
          el("input", { type: "radio", name, id, value: option }),
          el("label", { for: id }, option)));
      });
    } else {
      box.append(el("label", { for: name, class: "visually-hidden" }, "Your answer"),
        el("input", { type: "text", id: name, name, maxlength: 300, autocomplete: "off" }));
    }
    box.append(el("p", { class: "quiz-result", hidden: true }));
    form.append(box);
  });
  form.append(el("button", { type: "submit" }, "Check my answers"));
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    attempt(() => submitQuiz(quiz, form));
  });
  $("quiz-area").replaceChildren(form);
  form.querySelector("input")?.focus();
}

async function submitQuiz(quiz, form) {
  const answers = {};
  quiz.questions.forEach((question, index) => {
    const name = `q-${index}`;
    const chosen = form.querySelector(`input[name="${name}"]:checked`);
    const typed = form.querySelector(`input[type=text][name="${name}"]`);
    const value = chosen ? chosen.value : typed ? typed.value : "";
    if (value) answers[question.id] = value;
  });
  const result = await apiJSON(`/v1/quizzes/${encodeURIComponent(quiz.id)}/attempts`, {
    method: "POST", json: { answers },
  });
  for (const item of result.results) {
    const box = form.querySelector(`[data-question-id="${CSS.escape(item.question_id)}"]`);
    const line = box.querySelector(".quiz-result");
    line.classList.toggle("right", item.correct);
    line.classList.toggle("wrong", !item.correct);
    line.replaceChildren(item.feedback, " ",
      el("button", { type: "button", class: "small", "data-action": "quiz-passage",
        onclick: () => attempt(() => openSource(item.chunk_ids[0])) }, "See the passage"));
    line.hidden = false;
  }
  form.querySelector("button[type=submit]").disabled = true;
  form.append(el("p", { class: "quiz-score", role: "status" },
    `Score: ${result.correct} of ${result.total}`));
}

// -- wiring --------------------------------------------------------------------------------

function devSignIn(role) {
  return attempt(async () => {
    const issued = await apiJSON("/v1/dev/token", { method: "POST", json: { role }, auth: false });
    await signIn(issued.token);
  });
}

function init() {
  $("notice-close").addEventListener("click", clearNotice);
  $("token-form").addEventListener("submit", (event) => {
    event.preventDefault();
    attempt(() => signIn($("token-input").value));
  });
  $("dev-signin").hidden = document.body.dataset.devSignin !== "true";
  for (const button of document.querySelectorAll("[data-dev-role]")) {
    button.addEventListener("click", () => devSignIn(button.dataset.devRole));
  }
  $("sign-out").addEventListener("click", () => signOut());
  window.addEventListener("hashchange", () => {
    clearNotice();
    showView(location.hash.slice(1));
    $("main").focus();
  });

  $("new-session-form").addEventListener("submit", (event) => attempt(() => newSession(event)));
  $("quality-form").addEventListener("submit", (event) => attempt(() => loadQuality(event)));
  $("horizon-form").addEventListener("submit", (event) => attempt(() => setHorizon(event)));
  $("ask-form").addEventListener("submit", ask);
  $("question").addEventListener("keydown", (event) => {
    if (event.key === "Enter" && (event.ctrlKey || event.metaKey)) $("ask-form").requestSubmit();
  });
  $("stop-button").addEventListener("click", () => {
    // stop the answer on the server too (its model call), then hang up
    const sessionId = state.session?.id;
    if (state.askingTurn && sessionId) {
      const [session, turn] = [sessionId, state.askingTurn].map(encodeURIComponent);
      api(`/v1/sessions/${session}/messages/${turn}/cancel`, { method: "POST" }).catch(() => {});
    }
    state.asking?.abort();
  });
  $("flag-dialog").addEventListener("close", () => {
    if ($("flag-dialog").returnValue === "flag") attempt(sendFlag);
  });

  $("upload-form").addEventListener("submit", (event) => attempt(() => upload(event)));
  $("documents-refresh").addEventListener("click", () => attempt(() => loadDocuments({ reset: true })));
  $("documents-mine").addEventListener("change", () => attempt(() => loadDocuments({ reset: true })));
  $("documents-more").addEventListener("click", () => attempt(() => loadDocuments()));
  $("search-form").addEventListener("submit", (event) => attempt(() => search(event)));
  $("memories-refresh").addEventListener("click", () => attempt(loadMemories));
  $("syllabus-form").addEventListener("submit", (event) => attempt(() => loadSyllabus(event)));
  $("quiz-form").addEventListener("submit", (event) => attempt(() => newQuiz(event)));
  $("memories-forget-all").addEventListener("click", () => attempt(forgetAll));

  // an LMS launch opened in a new window hands its sign-in over in the fragment
  // (#lti-token=<token>&view=<view>: never sent to a server), taken out of the URL at once
  const handed = new URLSearchParams(location.hash.slice(1));
  if (handed.get("lti-token")) {
    sessionStorage.setItem(TOKEN_KEY, handed.get("lti-token"));
    history.replaceState(null, "", `${location.pathname}#${handed.get("view") || "chat"}`);
  }
  const saved = sessionStorage.getItem(TOKEN_KEY);
  if (saved) {
    attempt(() => signIn(saved)).then(() => {
      if (!state.token) showView("signin");
    });
  } else {
    renderShell();
    showView("signin");
  }
  document.body.dataset.ready = "true";
}

init();
