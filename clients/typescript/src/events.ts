/**
 * The typed events of the answer stream (`POST /v1/sessions/{id}/messages` and
 * `GET /v1/sessions/{id}/messages/{turn}/events`). Every event's SSE `event:` name equals the
 * `type` of its JSON `data:`. Order of one turn: `sources`, then `token`s (interleaved with
 * `citation` and, in tutor and drill modes, `check`), `confidence`, `done`; `error` replaces
 * the rest on failure. Written after the gateway's models in
 * services/chat-gateway/src/lectern_gateway/chat/sse.py (the OpenAPI document describes the
 * stream as text only).
 */

export type ConfidenceBand = "high" | "medium" | "low" | "gap";

/** One source the answer may cite, labelled T1..Tn. */
export interface Source {
  label: string;
  chunk_id: string;
  document_id: string;
  title: string;
  page_start: number | null;
  page_end: number | null;
  slide: number | null;
  section: string | null;
  score: number;
}

/** A citation: a course source [T#] covering a span of the answer, or a web page [W#]. */
export interface Citation {
  label: string;
  kind: "textbook" | "web";
  chunk_id: string | null;
  document_id: string | null;
  url: string | null;
  title: string | null;
  /** character offsets in the answer */
  span_start: number | null;
  span_end: number | null;
  /** the cited sentence */
  text: string | null;
  /** 0..1 */
  support: number | null;
  /** false: flagged unsupported */
  supported: boolean | null;
  /** false: the label names no given source */
  valid: boolean;
}

export interface SourcesEvent {
  type: "sources";
  sources: Source[];
}

/** A text delta, as soon as it is produced. `gateway`: fixed wording (band preamble, gap). */
export interface TokenEvent {
  type: "token";
  text: string;
  origin: "model" | "gateway";
}

export interface CitationEvent {
  type: "citation";
  citation: Citation;
}

export interface ConfidenceEvent {
  type: "confidence";
  score: number;
  band: ConfidenceBand;
  retrieval: number;
  source_quality: number;
  grounding: number;
  grounding_is_prior: boolean;
}

/** Tutor and drill modes: a check question asked, or the student's reply judged. */
export interface CheckEvent {
  type: "check";
  phase: "asked" | "judged";
  question: string;
  kind: string;
  verdict: "right" | "partly" | "wrong" | "skipped" | null;
  expected: string | null;
  evidence: string | null;
  chunk_id: string | null;
}

/** The turn is complete and stored (last event). */
export interface DoneEvent {
  type: "done";
  message_id: string;
  /** the turn's id: the question's message id */
  user_message_id: string;
  session_id: string;
  citations: Citation[];
  unsupported: string[];
  band: ConfidenceBand;
  confidence: number;
  knowledge_gap: boolean;
  /** gemini, gemini-secondary, fallback, offline, gap, tutor-check or drill */
  answered_by: string;
  persona: string | null;
  memories_used: string[];
  usage: Record<string, unknown>;
  timings_ms: Record<string, number>;
}

/** The turn failed; nothing follows. */
export interface ErrorEvent {
  type: "error";
  reason: string;
  message: string;
  retryable: boolean;
}

/**
 * The turn is answered again from its start: the gateway replica answering it stopped,
 * another took it over, and the new text may differ. Discard the turn's events so far
 * (`collect()` does); `sources` and the rest follow.
 */
export interface RestartEvent {
  type: "restart";
  reason: string;
  message: string;
}

export type ChatEvent =
  | SourcesEvent
  | TokenEvent
  | CitationEvent
  | ConfidenceEvent
  | CheckEvent
  | DoneEvent
  | ErrorEvent
  | RestartEvent;

export type ChatEventType = ChatEvent["type"];

/** An event of a document's progress stream (`GET /v1/documents/{id}/events`). */
export interface DocumentEvent {
  /** `status`, `progress`, then `indexed`, `duplicate`, `failed` or `deleted` */
  event: string;
  data: Record<string, unknown>;
}
