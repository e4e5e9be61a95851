/** Errors of the Lectern client. */

/** An RFC 9457 problem+json body as the gateway sends it (extra members kept). */
export interface Problem {
  type: string;
  title: string;
  status: number;
  detail: string;
  instance?: string;
  /** e.g. `bad_input`, `not_in_class`, `internal` when the gateway states one */
  reason?: string;
  /** 422: the fields at fault */
  errors?: unknown;
  [member: string]: unknown;
}

/**
 * The gateway answered with an error status: its problem+json body, typed.
 *
 * A body that is not problem+json (a proxy's HTML page, say) still gives a `LecternError`,
 * with `type` "about:blank", the status text as `title` and the body's start as `detail`.
 */
export class LecternError extends Error {
  readonly status: number;
  readonly type: string;
  readonly title: string;
  readonly detail: string;
  readonly instance: string | undefined;
  readonly reason: string | undefined;
  /** the whole problem body */
  readonly problem: Problem;
  /** Retry-After of a 429 or 503, in milliseconds (when the gateway sent one) */
  readonly retryAfterMs: number | undefined;

  constructor(problem: Problem, retryAfterMs?: number) {
    super(`${problem.status} ${problem.title}: ${problem.detail}`);
    this.name = "LecternError";
    this.status = problem.status;
    this.type = problem.type;
    this.title = problem.title;
    this.detail = problem.detail;
    this.instance = problem.instance;
    this.reason = typeof problem.reason === "string" ? problem.reason : undefined;
    this.problem = problem;
    this.retryAfterMs = retryAfterMs;
  }

  /** Read an error response's body (consumed) into a `LecternError`. */
  static async fromResponse(response: Response): Promise<LecternError> {
    const text = await response.text().catch(() => "");
    let body: Record<string, unknown> | undefined;
    try {
      const parsed: unknown = JSON.parse(text);
      if (parsed !== null && typeof parsed === "object" && !Array.isArray(parsed)) {
        body = parsed as Record<string, unknown>;
      }
    } catch {
      body = undefined;
    }
    const detail = body?.detail;
    const problem: Problem = {
      ...body,
      type: typeof body?.type === "string" ? body.type : "about:blank",
      title:
        typeof body?.title === "string" ? body.title : response.statusText || `HTTP ${response.status}`,
      status: typeof body?.status === "number" ? body.status : response.status,
      detail:
        typeof detail === "string"
          ? detail
          : detail !== undefined
            ? JSON.stringify(detail)
            : text.slice(0, 500),
    };
    return new LecternError(problem, parseRetryAfter(response.headers.get("retry-after")));
  }
}

/** The answer stream ended with an `error` event (the turn failed on the gateway's side). */
export class LecternStreamError extends Error {
  /** e.g. `generation_failed`; the client's own: `turn_restarted`, `stream_incomplete` */
  readonly reason: string;
  /** whether asking again may succeed */
  readonly retryable: boolean;
  readonly turnId: string | undefined;

  constructor(reason: string, message: string, retryable: boolean, turnId?: string) {
    super(message);
    this.name = "LecternStreamError";
    this.reason = reason;
    this.retryable = retryable;
    this.turnId = turnId;
  }
}

/** `waitUntilIndexed` gave up: the document failed, left, or the wait timed out. */
export class IndexingError extends Error {
  /** `failed`, `deleted`, `superseded`, `archived` or `timeout` */
  readonly reason: string;
  /** the document as last read */
  readonly document: unknown;

  constructor(reason: string, message: string, document: unknown) {
    super(message);
    this.name = "IndexingError";
    this.reason = reason;
    this.document = document;
  }
}

/** Retry-After (delta-seconds or an HTTP-date) in milliseconds; undefined when absent or bad. */
export function parseRetryAfter(value: string | null, now: number = Date.now()): number | undefined {
  if (value === null || value.trim() === "") return undefined;
  const trimmed = value.trim();
  if (/^\d+(\.\d+)?$/.test(trimmed)) return Math.round(Number(trimmed) * 1000);
  const date = Date.parse(trimmed);
  return Number.isNaN(date) ? undefined : Math.max(0, date - now);
}
