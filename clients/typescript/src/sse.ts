/**
 * Server-Sent Events read from a `fetch()` response body (the WHATWG event-stream rules:
 * lines end with CRLF, LF or CR; a blank line dispatches an event; `:` starts a comment,
 * such as the gateway's pings). `EventSource` can neither POST nor send a bearer header,
 * which the answer stream needs.
 */

/** One dispatched event. `id` is the last event id seen so far (SSE semantics). */
export interface SSEFrame {
  event: string;
  data: string;
  id: string;
}

/** An incremental parser: feed it decoded text, get the events it completed. */
export class SSEParser {
  private buffer = "";
  private eventName = "";
  private dataLines: string[] = [];
  /** the last `id:` field seen (sent back as `Last-Event-ID` to resume) */
  lastId = "";

  push(text: string): SSEFrame[] {
    this.buffer += text;
    const frames: SSEFrame[] = [];
    const lineEnd = /\r\n|\r|\n/;
    for (;;) {
      const match = lineEnd.exec(this.buffer);
      if (match === null) break;
      // a CR at the very end may be the first half of a CRLF still in flight
      if (match[0] === "\r" && match.index === this.buffer.length - 1) break;
      const line = this.buffer.slice(0, match.index);
      this.buffer = this.buffer.slice(match.index + match[0].length);
      if (line === "") {
        if (this.dataLines.length > 0) {
          frames.push({
            event: this.eventName || "message",
            data: this.dataLines.join("\n"),
            id: this.lastId,
          });
        }
        this.eventName = "";
        this.dataLines = [];
        continue;
      }
      if (line.startsWith(":")) continue;
      const colon = line.indexOf(":");
      const field = colon === -1 ? line : line.slice(0, colon);
      let value = colon === -1 ? "" : line.slice(colon + 1);
      if (value.startsWith(" ")) value = value.slice(1);
      if (field === "event") this.eventName = value;
      else if (field === "data") this.dataLines.push(value);
      else if (field === "id" && !value.includes("\0")) {
        this.lastId = value;
      }
      // `retry` only matters to EventSource's own reconnection: ignored
    }
    return frames;
  }
}

/**
 * The events of a response body until the server closes it. Stopping early (a `break`)
 * cancels the body, which closes the connection. A half-received last event is dropped.
 */
export async function* readEventStream(
  body: ReadableStream<Uint8Array>,
): AsyncGenerator<SSEFrame, void, undefined> {
  const reader = body.getReader();
  const decoder = new TextDecoder();
  const parser = new SSEParser();
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      yield* parser.push(decoder.decode(value, { stream: true }));
    }
  } finally {
    reader.cancel().catch(() => undefined);
  }
}
