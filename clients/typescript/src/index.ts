/**
 * @lectern/client: the Lectern gateway's API for browsers and Node 20+.
 *
 * ```ts
 * import { LecternClient } from "@lectern/client";
 * const lectern = new LecternClient({ baseUrl: "http://127.0.0.1:8000", token });
 * const session = await lectern.createSession({ mode: "tutor" });
 * const answer = await lectern.ask(session.id, "What does mitosis produce?").collect();
 * ```
 */
export { AnswerStream, LecternClient } from "./client.js";
export type {
  Answer,
  AskOptions,
  Candidate,
  DocumentPage,
  DocumentStatus,
  DocumentView,
  FetchLike,
  LecternClientOptions,
  ListDocumentsQuery,
  Message,
  RequestOptions,
  SendInit,
  SearchRequest,
  SearchResponse,
  Session,
  SessionCreate,
  UploadAccepted,
  UploadMetadata,
  UploadOptions,
  UploadProgress,
  WaitOptions,
} from "./client.js";
export { IndexingError, LecternError, LecternStreamError, parseRetryAfter } from "./errors.js";
export type { Problem } from "./errors.js";
export type * from "./events.js";
export { SSEParser, readEventStream } from "./sse.js";
export type { SSEFrame } from "./sse.js";
export type { components, operations, paths } from "./schema.js";
