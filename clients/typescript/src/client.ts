/**
 * `LecternClient`: the gateway's HTTP API over `fetch()`, for browsers and Node 20+.
 */
import { IndexingError, LecternError, LecternStreamError, parseRetryAfter } from "./errors.js";
import type { ChatEvent, Citation, CheckEvent, ConfidenceEvent, DocumentEvent, DoneEvent, Source } from "./events.js";
import type { components, operations } from "./schema.js";
import { readEventStream } from "./sse.js";

type Schemas = components["schemas"];
/** Fields with a server-side default are optional here (the schema marks them required). */
type Input<T, Required extends keyof T = never> = Partial<T> & Pick<T, Required>;
export type SearchRequest = Input<Schemas["SearchRequest"], "query">;
export type SearchResponse = Schemas["SearchResponse"];
export type Candidate = Schemas["Candidate"];
export type SessionCreate = Input<Schemas["SessionCreate"]>;
export type Session = Schemas["Session"];
export type Message = Schemas["Message"];
export type DocumentView = Schemas["DocumentView"];
export type DocumentPage = Schemas["DocumentPage"];
export type UploadAccepted = Schemas["UploadAccepted"];
export type DocumentStatus = DocumentView["status"];
export type ListDocumentsQuery = NonNullable<
  operations["list_documents_v1_documents_get"]["parameters"]["query"]
>;
/** The upload form's metadata fields (the file aside); `url` instead of a file fetches a page. */
export type UploadMetadata = Partial<
  Omit<operations["upload_document_v1_documents_post"]["requestBody"]["content"]["multipart/form-data"], "file">
> & { url?: string };

type RequestBody = NonNullable<RequestInit["body"]>;

export type FetchLike = (input: string, init?: RequestInit) => Promise<Response>;

export interface LecternClientOptions {
  /** the gateway, e.g. `http://127.0.0.1:8000` */
  baseUrl: string;
  /** a bearer token (JWT), or a function giving one per request (to refresh it) */
  token?: string | (() => string | Promise<string>);
  /** an API key (`X-API-Key`) instead of a token */
  apiKey?: string;
  /** the `fetch` to use (default: the global one); tests and proxies plug in here */
  fetch?: FetchLike;
  /** retries of a request answered 429 or 503 (and of a GET that failed to connect); 3 */
  maxRetries?: number;
  /** the longest Retry-After honoured, ms (a longer one fails at once: a daily limit); 30 s */
  maxRetryDelayMs?: number;
  /** wait before a retry when the answer gave no Retry-After, ms (doubled each time); 1 s */
  retryDelayMs?: number;
  /** headers sent with every request */
  headers?: Record<string, string>;
}

export interface RequestOptions {
  signal?: AbortSignal;
}

export interface UploadProgress {
  /** bytes of the multipart body handed to the network so far */
  sent: number;
  /** the multipart body's size (file, metadata and boundaries) */
  total: number;
}

export interface UploadOptions extends RequestOptions {
  /** the file name the gateway records (default: the File's name, else `upload`) */
  filename?: string;
  metadata?: UploadMetadata;
  /** `replaces=<id>`: upload a new version of that document */
  replaces?: string;
  /** progress of the upload's bytes; see `progress` for how it is measured */
  onProgress?: (progress: UploadProgress) => void;
  /**
   * How progress is measured:
   * - `stream`: the body is a `ReadableStream` and every chunk the network takes is
   *   counted (Node 20+; in browsers only Chromium, over HTTP/2 or HTTP/3);
   * - `xhr`: the browser's `XMLHttpRequest` upload events (real bytes on the wire; the only
   *   way to get them over HTTP/1.1 in a browser; ignores a custom `fetch`);
   * - `none`: one buffered request; `onProgress` is called with 0 before and with the total
   *   once the gateway answered;
   * - `auto` (default): `stream` in Node, `xhr` in a browser (unless a custom `fetch` was
   *   given), else `none`.
   */
  progress?: "auto" | "stream" | "xhr" | "none";
}

export interface WaitOptions extends RequestOptions {
  /** between polls, ms; 1000 */
  intervalMs?: number;
  /** give up after, ms (IndexingError `timeout`); 10 minutes */
  timeoutMs?: number;
  /** every document read while waiting */
  onStatus?: (document: DocumentView) => void;
}

export interface AskOptions extends RequestOptions {
  /** the turn's Idempotency-Key (default: a random UUID); a retry with it never asks twice */
  idempotencyKey?: string;
  /**
   * How a dropped stream resumes, from the event after the last one seen:
   * `get` (default) reads the turn's events URL once its id is known (before that, the
   * `POST` is repeated with the same Idempotency-Key); `post` always repeats the `POST`.
   */
  resume?: "get" | "post";
  /** resumes in a row without a new event before giving up; 5 */
  maxResumes?: number;
  /** first wait before resuming, ms (doubled each time, at most 5 s); 250 */
  resumeDelayMs?: number;
}

/** The whole answer of a turn, as `AnswerStream.collect()` gathers it. */
export interface Answer {
  turnId: string;
  text: string;
  sources: Source[];
  citations: Citation[];
  checks: CheckEvent[];
  confidence: ConfidenceEvent | undefined;
  done: DoneEvent;
  events: ChatEvent[];
  /** how many times the stream was resumed */
  resumes: number;
}

const TERMINAL = new Set(["done", "error"]);
const GIVE_UP_STATUSES = new Set(["failed", "deleted", "superseded", "archived"]);

function isNode(): boolean {
  const proc = (globalThis as { process?: { versions?: { node?: string } } }).process;
  return typeof proc?.versions?.node === "string";
}

function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) {
      reject(signal.reason);
      return;
    }
    const onAbort = (): void => {
      clearTimeout(timer);
      reject(signal?.reason);
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}

function randomKey(): string {
  const c = (globalThis as { crypto?: { randomUUID?: () => string } }).crypto;
  if (c?.randomUUID) return c.randomUUID();
  return `${Date.now().toString(36)}-${Math.random().toString(36).slice(2)}-${Math.random().toString(36).slice(2)}`;
}

function splitEventId(id: string): { turn: string; seq: number } | undefined {
  const colon = id.lastIndexOf(":");
  if (colon <= 0) return undefined;
  const seq = Number(id.slice(colon + 1));
  return Number.isInteger(seq) ? { turn: id.slice(0, colon), seq } : undefined;
}

/** Options of `send()` / `request()`, the client's low-level calls. */
export interface SendInit {
  method?: string;
  query?: Record<string, unknown>;
  /** a JSON body */
  json?: unknown;
  /** a body factory: called again for every retry (a stream can be read once) */
  body?: () => RequestBody | Promise<RequestBody>;
  headers?: Record<string, string>;
  signal?: AbortSignal | undefined;
  /** a transport other than fetch (the XHR upload) */
  transport?: FetchLike;
  /** extra RequestInit members (`duplex` for a streamed body) */
  extra?: Record<string, unknown>;
}

export class LecternClient {
  readonly baseUrl: string;
  private readonly options: LecternClientOptions;
  private readonly fetchImpl: FetchLike;
  private readonly customFetch: boolean;

  constructor(options: LecternClientOptions) {
    this.options = options;
    this.baseUrl = options.baseUrl.replace(/\/+$/, "");
    this.customFetch = options.fetch !== undefined;
    const globalFetch = globalThis.fetch?.bind(globalThis);
    if (!options.fetch && !globalFetch) throw new Error("no fetch() here: pass options.fetch");
    this.fetchImpl = options.fetch ?? (globalFetch as FetchLike);
  }

  // ---- plumbing ------------------------------------------------------------------------

  /** The URL of an API path (with a query string of the defined, non-null values). */
  url(path: string, query?: Record<string, unknown>): string {
    const params = new URLSearchParams();
    for (const [name, value] of Object.entries(query ?? {})) {
      if (value === undefined || value === null) continue;
      for (const item of Array.isArray(value) ? value : [value]) params.append(name, String(item));
    }
    const search = params.toString();
    return `${this.baseUrl}${path}${search ? `?${search}` : ""}`;
  }

  private async authHeaders(): Promise<Record<string, string>> {
    const headers: Record<string, string> = { ...this.options.headers };
    const token = this.options.token;
    if (token !== undefined) {
      headers.Authorization = `Bearer ${typeof token === "function" ? await token() : token}`;
    }
    if (this.options.apiKey !== undefined) headers["X-API-Key"] = this.options.apiKey;
    return headers;
  }

  /**
   * Send a request; a 429 or 503 is retried after its Retry-After (or a doubling delay)
   * up to `maxRetries` times, unless the wait asked for is over `maxRetryDelayMs`. A GET
   * that fails to connect is retried the same way. Any other error status, and the last
   * 429/503, throws a `LecternError`.
   */
  async send(path: string, init: SendInit = {}): Promise<Response> {
    const method = init.method ?? "GET";
    const maxRetries = this.options.maxRetries ?? 3;
    const maxDelay = this.options.maxRetryDelayMs ?? 30_000;
    const baseDelay = this.options.retryDelayMs ?? 1000;
    const transport = init.transport ?? this.fetchImpl;
    for (let attempt = 0; ; attempt++) {
      const headers: Record<string, string> = {
        Accept: "application/json, application/problem+json",
        ...(await this.authHeaders()),
        ...init.headers,
      };
      let body: RequestBody | undefined;
      if (init.json !== undefined) {
        headers["Content-Type"] = "application/json";
        body = JSON.stringify(init.json);
      } else if (init.body) {
        body = await init.body();
      }
      let response: Response;
      try {
        response = await transport(this.url(path, init.query), {
          method,
          headers,
          body,
          signal: init.signal,
          ...init.extra,
        } as RequestInit);
      } catch (error) {
        if (init.signal?.aborted || method !== "GET" || attempt >= maxRetries) throw error;
        await sleep(baseDelay * 2 ** attempt, init.signal);
        continue;
      }
      if (response.ok) return response;
      if ((response.status === 429 || response.status === 503) && attempt < maxRetries) {
        const asked = parseRetryAfter(response.headers.get("retry-after"));
        const wait = asked ?? baseDelay * 2 ** attempt;
        if (wait <= maxDelay) {
          await response.body?.cancel().catch(() => undefined);
          await sleep(wait, init.signal);
          continue;
        }
      }
      throw await LecternError.fromResponse(response);
    }
  }

  /** Send a request and parse its JSON answer. */
  async request<T>(path: string, init: SendInit = {}): Promise<T> {
    const response = await this.send(path, init);
    if (response.status === 204) return undefined as T;
    return (await response.json()) as T;
  }

  // ---- documents -----------------------------------------------------------------------

  /**
   * Upload a file (a `Blob` or `File`; in Node, e.g. `new Blob([bytes])` or
   * `await fs.openAsBlob(path)`) with its metadata: 202 for a new document, 200 with the
   * existing one for identical bytes (`duplicate`). See `UploadOptions.progress` for how
   * progress is measured on each platform.
   */
  async uploadDocument(file: Blob, options: UploadOptions = {}): Promise<UploadAccepted> {
    const filename =
      options.filename ?? (typeof (file as File).name === "string" && (file as File).name ? (file as File).name : "upload");
    const form = new FormData();
    this.addMetadata(form, options.metadata);
    form.append("file", file, filename);
    return this.sendForm(form, options);
  }

  /** Add a web page by URL (the gateway fetches it, with its limits). */
  async uploadUrl(url: string, options: Omit<UploadOptions, "filename" | "onProgress" | "progress"> = {}): Promise<UploadAccepted> {
    const form = new FormData();
    this.addMetadata(form, { ...options.metadata, url });
    return this.sendForm(form, { ...options, progress: "none" });
  }

  private addMetadata(form: FormData, metadata: UploadMetadata | undefined): void {
    for (const [name, value] of Object.entries(metadata ?? {})) {
      if (value === undefined || value === null) continue;
      for (const item of Array.isArray(value) ? value : [value]) form.append(name, String(item));
    }
  }

  private async sendForm(form: FormData, options: UploadOptions): Promise<UploadAccepted> {
    const onProgress = options.onProgress;
    let mode = options.progress ?? "auto";
    if (mode === "auto") {
      if (!onProgress) mode = "none";
      else if (isNode()) mode = "stream";
      else if (typeof XMLHttpRequest !== "undefined" && !this.customFetch) mode = "xhr";
      else mode = "none";
    }
    const init: SendInit = { method: "POST", query: { replaces: options.replaces }, signal: options.signal };
    if (!onProgress || mode === "none") {
      // the platform encodes the form itself (a browser streams a File from disk)
      let total = 0;
      if (onProgress) {
        total = (await new Response(form).blob()).size;
        onProgress({ sent: 0, total });
      }
      init.body = () => form;
      const response = await this.send("/v1/documents", init);
      onProgress?.({ sent: total, total });
      return (await response.json()) as UploadAccepted;
    }
    // the multipart encoding the platform would send, as one Blob (so its size is known)
    const encoded = new Response(form);
    init.headers = { "Content-Type": encoded.headers.get("content-type") ?? "multipart/form-data" };
    const blob = await encoded.blob();
    const total = blob.size;
    const report = (sent: number): void => onProgress({ sent, total });
    if (mode === "stream") {
      init.extra = { duplex: "half" };
      init.body = () => {
        let sent = 0;
        report(0);
        const counter = new TransformStream<Uint8Array, Uint8Array>({
          transform(chunk, controller) {
            controller.enqueue(chunk);
            sent += chunk.byteLength;
            report(sent);
          },
        });
        return blob.stream().pipeThrough(counter);
      };
    } else {
      init.body = () => blob;
      init.transport = (url, requestInit) => xhrFetch(url, requestInit ?? {}, report);
    }
    const response = await this.send("/v1/documents", init);
    return (await response.json()) as UploadAccepted;
  }

  async getDocument(documentId: string, options: RequestOptions = {}): Promise<DocumentView> {
    return this.request(`/v1/documents/${encodeURIComponent(documentId)}`, { signal: options.signal });
  }

  async listDocuments(query: ListDocumentsQuery = {}, options: RequestOptions = {}): Promise<DocumentPage> {
    return this.request("/v1/documents", { query, signal: options.signal });
  }

  async deleteDocument(documentId: string, options: RequestOptions = {}): Promise<DocumentView> {
    return this.request(`/v1/documents/${encodeURIComponent(documentId)}`, {
      method: "DELETE",
      signal: options.signal,
    });
  }

  /**
   * Poll a document until it is `indexed` (or `duplicate`: its text is already indexed as
   * `duplicate_of`) and return it; `failed`, `deleted`, `superseded`, `archived` or the
   * timeout throw an `IndexingError` (with the document and, when failed, its `error`).
   */
  async waitUntilIndexed(documentId: string, options: WaitOptions = {}): Promise<DocumentView> {
    const interval = options.intervalMs ?? 1000;
    const deadline = Date.now() + (options.timeoutMs ?? 600_000);
    for (;;) {
      const document = await this.getDocument(documentId, options);
      options.onStatus?.(document);
      if (document.status === "indexed" || document.status === "duplicate") return document;
      if (GIVE_UP_STATUSES.has(document.status)) {
        const error = (document as { error?: { message?: string } | null }).error;
        throw new IndexingError(
          document.status,
          `document ${documentId} is ${document.status}${error?.message ? `: ${error.message}` : ""}`,
          document,
        );
      }
      if (Date.now() + interval > deadline) {
        throw new IndexingError(
          "timeout",
          `document ${documentId} is still ${document.status} after ${options.timeoutMs ?? 600_000} ms`,
          document,
        );
      }
      await sleep(interval, options.signal);
    }
  }

  /**
   * A document's progress stream (`status`, `progress`, then `indexed`, `duplicate`,
   * `failed` or `deleted`), until the gateway closes it. Not resumed when dropped: poll
   * with `waitUntilIndexed` for a guarantee.
   */
  async *documentEvents(documentId: string, options: RequestOptions = {}): AsyncGenerator<DocumentEvent> {
    const response = await this.send(`/v1/documents/${encodeURIComponent(documentId)}/events`, {
      headers: { Accept: "text/event-stream" },
      signal: options.signal,
    });
    if (!response.body) return;
    for await (const frame of readEventStream(response.body)) {
      yield { event: frame.event, data: JSON.parse(frame.data) as Record<string, unknown> };
    }
  }

  // ---- search and sessions -------------------------------------------------------------

  /** Hybrid search of the material (a query, or a whole request with filters). */
  async search(request: string | SearchRequest, options: RequestOptions = {}): Promise<SearchResponse> {
    const body = typeof request === "string" ? { query: request } : request;
    return this.request("/v1/search", { method: "POST", json: body, signal: options.signal });
  }

  async createSession(body: SessionCreate = {}, options: RequestOptions = {}): Promise<Session> {
    return this.request("/v1/sessions", { method: "POST", json: body, signal: options.signal });
  }

  async getSession(sessionId: string, options: RequestOptions = {}): Promise<Session> {
    return this.request(`/v1/sessions/${encodeURIComponent(sessionId)}`, { signal: options.signal });
  }

  async listSessions(options: RequestOptions = {}): Promise<Session[]> {
    return this.request("/v1/sessions", { signal: options.signal });
  }

  async getMessages(sessionId: string, options: RequestOptions = {}): Promise<Message[]> {
    return this.request(`/v1/sessions/${encodeURIComponent(sessionId)}/messages`, { signal: options.signal });
  }

  async endSession(sessionId: string, options: RequestOptions = {}): Promise<unknown> {
    return this.request(`/v1/sessions/${encodeURIComponent(sessionId)}/end`, {
      method: "POST",
      signal: options.signal,
    });
  }

  /** Stop a turn still being answered (409 once it has ended). */
  async cancelTurn(sessionId: string, turnId: string, options: RequestOptions = {}): Promise<unknown> {
    return this.request(
      `/v1/sessions/${encodeURIComponent(sessionId)}/messages/${encodeURIComponent(turnId)}/cancel`,
      { method: "POST", signal: options.signal },
    );
  }

  // ---- the answer stream ---------------------------------------------------------------

  /**
   * Ask a question in a session. Nothing is sent until the stream is iterated:
   *
   * ```ts
   * for await (const event of client.ask(session.id, "What is mitosis?")) {
   *   if (event.type === "token") process.stdout.write(event.text);
   * }
   * ```
   *
   * A dropped connection is resumed by itself after the last event seen, so every event is
   * yielded once; an `error` event is yielded and ends the stream (`collect()` throws it).
   */
  ask(sessionId: string, content: string, options: AskOptions = {}): AnswerStream {
    return new AnswerStream(this, sessionId, content, options);
  }

  /** Replay (or follow, while it is answered) a turn's events after `lastEventId`. */
  turnEvents(sessionId: string, turnId: string, lastEventId?: string, options: RequestOptions = {}): Promise<Response> {
    return this.send(
      `/v1/sessions/${encodeURIComponent(sessionId)}/messages/${encodeURIComponent(turnId)}/events`,
      {
        headers: { Accept: "text/event-stream", ...(lastEventId ? { "Last-Event-ID": lastEventId } : {}) },
        signal: options.signal,
      },
    );
  }
}

/**
 * One question's answer stream: an async iterable of typed events (iterate it once), which
 * resumes by itself after a dropped connection and never yields an event twice.
 */
export class AnswerStream implements AsyncIterable<ChatEvent> {
  readonly idempotencyKey: string;
  /** the turn's id (the question's message id), once the gateway said it */
  turnId: string | undefined;
  /** the SSE id of the last event yielded, `<turn>:<n>` */
  lastEventId: string | undefined;
  /** how many times the stream was resumed */
  resumes = 0;
  private started = false;

  constructor(
    private readonly client: LecternClient,
    readonly sessionId: string,
    readonly content: string,
    private readonly options: AskOptions,
  ) {
    this.idempotencyKey = options.idempotencyKey ?? randomKey();
  }

  [Symbol.asyncIterator](): AsyncIterator<ChatEvent> {
    if (this.started) throw new Error("an AnswerStream is iterated once; ask() again for another");
    this.started = true;
    return this.run();
  }

  /** Read the whole answer; throws `LecternStreamError` when the turn ends in `error`. */
  async collect(): Promise<Answer> {
    const events: ChatEvent[] = [];
    let text = "";
    let sources: Source[] = [];
    const citations: Citation[] = [];
    const checks: CheckEvent[] = [];
    let confidence: ConfidenceEvent | undefined;
    let done: DoneEvent | undefined;
    for await (const event of this) {
      events.push(event);
      if (event.type === "token") text += event.text;
      else if (event.type === "sources") sources = event.sources;
      else if (event.type === "citation") citations.push(event.citation);
      else if (event.type === "check") checks.push(event);
      else if (event.type === "confidence") confidence = event;
      else if (event.type === "done") done = event;
      else if (event.type === "restart") {
        // answered again from the start by another replica: what came before is void
        text = "";
        sources = [];
        citations.length = 0;
        checks.length = 0;
        confidence = undefined;
      } else if (event.type === "error") {
        throw new LecternStreamError(event.reason, event.message, event.retryable, this.turnId);
      }
    }
    if (!done) throw new LecternStreamError("stream_incomplete", "the answer ended without done", true, this.turnId);
    return { turnId: done.user_message_id, text, sources, citations, checks, confidence, done, events, resumes: this.resumes };
  }

  private messagesPath(): string {
    return `/v1/sessions/${encodeURIComponent(this.sessionId)}/messages`;
  }

  private async open(): Promise<Response> {
    const signal = this.options.signal;
    const resumeByGet = (this.options.resume ?? "get") === "get";
    if (this.turnId !== undefined && resumeByGet) {
      return this.client.turnEvents(this.sessionId, this.turnId, this.lastEventId, { signal });
    }
    const headers: Record<string, string> = {
      Accept: "text/event-stream",
      "Idempotency-Key": this.idempotencyKey,
    };
    if (this.lastEventId) headers["Last-Event-ID"] = this.lastEventId;
    return this.client.send(this.messagesPath(), {
      method: "POST",
      json: { content: this.content },
      headers,
      signal,
    });
  }

  private async *run(): AsyncGenerator<ChatEvent, void, undefined> {
    const signal = this.options.signal;
    const maxResumes = this.options.maxResumes ?? 5;
    const firstDelay = this.options.resumeDelayMs ?? 250;
    let seen = 0; // the number n of the last event yielded
    let failures = 0; // resumes in a row without a new event
    for (;;) {
      let progressed = false;
      let dropped: unknown;
      try {
        const response = await this.open();
        const announced = response.headers.get("x-lectern-turn-id");
        if (announced) {
          if (this.turnId !== undefined && announced !== this.turnId) {
            // the key asked anew (the first turn failed or was abandoned): not the same answer
            await response.body?.cancel().catch(() => undefined);
            throw new LecternStreamError(
              "turn_restarted",
              `the gateway started another turn (${announced}) instead of resuming ${this.turnId}`,
              true,
              this.turnId,
            );
          }
          this.turnId = announced;
        }
        if (!response.body) throw new TypeError("the answer stream has no body");
        for await (const frame of readEventStream(response.body)) {
          const position = frame.id ? splitEventId(frame.id) : undefined;
          if (position) {
            if (this.turnId === undefined) this.turnId = position.turn;
            if (position.turn !== this.turnId) continue; // not this turn's
            if (position.seq <= seen) continue; // already yielded before a resume
            seen = position.seq;
            this.lastEventId = frame.id;
          }
          const event = JSON.parse(frame.data) as ChatEvent;
          progressed = true;
          failures = 0;
          yield event;
          if (TERMINAL.has(event.type)) return;
        }
        dropped = new TypeError("the answer stream ended before its done event");
      } catch (error) {
        if (signal?.aborted) throw error;
        if (error instanceof LecternError || error instanceof LecternStreamError || error instanceof SyntaxError) {
          throw error;
        }
        dropped = error; // a network error: resume
      }
      if (!progressed) failures++;
      if (failures > maxResumes) {
        throw new LecternStreamError(
          "stream_incomplete",
          `the answer stream dropped ${failures} times in a row: ${String(dropped)}`,
          true,
          this.turnId,
        );
      }
      this.resumes++;
      await sleep(Math.min(5000, firstDelay * 2 ** Math.max(0, failures - 1)), signal);
    }
  }
}

/**
 * `fetch()`'s shape over XMLHttpRequest, whose upload events give the bytes really sent in
 * a browser (fetch cannot report upload progress there over HTTP/1.1).
 */
function xhrFetch(url: string, init: RequestInit, report: (sent: number) => void): Promise<Response> {
  return new Promise((resolve, reject) => {
    const xhr = new XMLHttpRequest();
    xhr.open(init.method ?? "GET", url);
    for (const [name, value] of Object.entries((init.headers ?? {}) as Record<string, string>)) {
      xhr.setRequestHeader(name, value);
    }
    xhr.responseType = "blob";
    xhr.upload.onprogress = (event) => report(event.loaded);
    xhr.onload = () => {
      const headers = new Headers();
      for (const line of xhr.getAllResponseHeaders().trim().split(/[\r\n]+/)) {
        const colon = line.indexOf(":");
        if (colon > 0) headers.append(line.slice(0, colon).trim(), line.slice(colon + 1).trim());
      }
      resolve(new Response(xhr.response as Blob, { status: xhr.status, statusText: xhr.statusText, headers }));
    };
    xhr.onerror = () => reject(new TypeError("network error"));
    xhr.onabort = () => reject(init.signal?.reason ?? new DOMException("aborted", "AbortError"));
    init.signal?.addEventListener("abort", () => xhr.abort(), { once: true });
    xhr.send(init.body as XMLHttpRequestBodyInit);
  });
}
