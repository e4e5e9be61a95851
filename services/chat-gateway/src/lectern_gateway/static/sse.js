// Server-Sent Events read from a fetch() response body.
//
// EventSource can neither POST (the answer stream of POST /v1/sessions/{id}/messages) nor
// send an Authorization header (GET /v1/documents/{id}/events), so the UI reads both
// streams with fetch() and parses the frames here, following the WHATWG event-stream rules:
// lines end with CRLF, LF or CR; a blank line ends an event; ":" starts a comment (pings).

export class SSEParser {
  constructor() {
    this.buffer = "";
    this.lastId = "";
    this.reset();
  }

  reset() {
    this.eventName = "";
    this.dataLines = [];
  }

  // Feed decoded text; returns the events it completed, as {event, data, id} objects (id:
  // the last event id seen, which a dropped stream sends back as Last-Event-ID).
  push(text) {
    this.buffer += text;
    const events = [];
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
          events.push({
            event: this.eventName || "message", data: this.dataLines.join("\n"), id: this.lastId,
          });
        }
        this.reset();
        continue;
      }
      if (line.startsWith(":")) continue;
      const colon = line.indexOf(":");
      const field = colon === -1 ? line : line.slice(0, colon);
      let value = colon === -1 ? "" : line.slice(colon + 1);
      if (value.startsWith(" ")) value = value.slice(1);
      if (field === "event") this.eventName = value;
      else if (field === "data") this.dataLines.push(value);
      else if (field === "id" && !value.includes("\0")) this.lastId = value;
      // "retry" matters for EventSource reconnection only: ignored
    }
    return events;
  }
}

// Yield the events of a fetch() response body until the server closes the stream.
export async function* readEventStream(body) {
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
    // also when the caller stops early: close the connection (a no-op once it has ended)
    reader.cancel().catch(() => {});
  }
}
