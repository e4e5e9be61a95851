// Tests that need no gateway: retries on 429/503 against a tiny local HTTP server, the SSE
// parser, and the browser bundle's exports.
import assert from "node:assert/strict";
import { createServer } from "node:http";
import { after, before, describe, test } from "node:test";
import { LecternClient, LecternError, LecternStreamError, SSEParser, parseRetryAfter } from "../dist/index.js";

/** A server answering each request with the next scripted reply (the last one repeats). */
function scripted() {
  const state = { replies: [], requests: [] };
  const server = createServer((request, response) => {
    let body = "";
    request.on("data", (chunk) => (body += chunk));
    request.on("end", () => {
      state.requests.push({ method: request.method, url: request.url, headers: request.headers, body, at: Date.now() });
      const reply = state.replies[Math.min(state.requests.length - 1, state.replies.length - 1)];
      response.writeHead(reply.status, reply.headers ?? {});
      response.end(reply.body === undefined ? "" : JSON.stringify(reply.body));
    });
  });
  return { server, state };
}

const PROBLEM = { "content-type": "application/problem+json" };

describe("retries on 429 and 503", () => {
  const { server, state } = scripted();
  let client;
  before(async () => {
    await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
    const { port } = server.address();
    client = new LecternClient({ baseUrl: `http://127.0.0.1:${port}/`, token: "t0ken", maxRetries: 2, retryDelayMs: 50 });
  });
  after(() => new Promise((resolve) => server.close(resolve)));

  test("a 503 with Retry-After is retried after the wait it asks for", async () => {
    state.requests = [];
    state.replies = [
      { status: 503, headers: { ...PROBLEM, "retry-after": "1" }, body: { type: "about:blank", title: "Service Unavailable", status: 503, detail: "database restarting" } },
      { status: 200, headers: { "content-type": "application/json" }, body: { candidates: [], queries: ["q"], timings_ms: {} } },
    ];
    const started = Date.now();
    const found = await client.search("mitosis");
    assert.deepEqual(found.queries, ["q"]);
    assert.equal(state.requests.length, 2);
    const waited = state.requests[1].at - state.requests[0].at;
    assert.ok(waited >= 950, `retried after ${waited} ms, Retry-After said 1 s`);
    assert.ok(Date.now() - started < 5000);
    for (const request of state.requests) {
      assert.equal(request.method, "POST");
      assert.equal(request.url, "/v1/search");
      assert.equal(request.headers.authorization, "Bearer t0ken");
      assert.deepEqual(JSON.parse(request.body), { query: "mitosis" });
    }
  });

  test("retries are bounded: the last 503 is a LecternError", async () => {
    state.requests = [];
    state.replies = [
      { status: 503, headers: { ...PROBLEM, "retry-after": "0" }, body: { type: "about:blank", title: "Service Unavailable", status: 503, detail: "still down", reason: "unavailable" } },
    ];
    await assert.rejects(client.getSession("s1"), (error) => {
      assert.ok(error instanceof LecternError);
      assert.equal(error.status, 503);
      assert.equal(error.title, "Service Unavailable");
      assert.equal(error.detail, "still down");
      assert.equal(error.reason, "unavailable");
      assert.equal(error.retryAfterMs, 0);
      return true;
    });
    assert.equal(state.requests.length, 3); // the first try and maxRetries (2) retries
  });

  test("a 429 whose Retry-After is beyond maxRetryDelayMs fails at once", async () => {
    state.requests = [];
    state.replies = [
      { status: 429, headers: { ...PROBLEM, "retry-after": "3600" }, body: { type: "about:blank", title: "Too many requests", status: 429, detail: "the free plan allows 4 messages a day", instance: "/v1/sessions/s1/messages" } },
    ];
    const started = Date.now();
    await assert.rejects(client.createSession({}), (error) => {
      assert.ok(error instanceof LecternError);
      assert.equal(error.status, 429);
      assert.equal(error.retryAfterMs, 3_600_000);
      assert.equal(error.instance, "/v1/sessions/s1/messages");
      assert.match(error.message, /429 Too many requests/);
      return true;
    });
    assert.equal(state.requests.length, 1);
    assert.ok(Date.now() - started < 1000);
  });

  test("a 429 without Retry-After backs off and succeeds", async () => {
    state.requests = [];
    state.replies = [
      { status: 429, headers: PROBLEM, body: { type: "about:blank", title: "Too many requests", status: 429, detail: "slow down" } },
      { status: 201, headers: { "content-type": "application/json" }, body: { id: "s2", mode: "chat" } },
    ];
    const session = await client.createSession({ mode: "chat" });
    assert.equal(session.id, "s2");
    assert.equal(state.requests.length, 2);
  });

  test("an error that is not problem+json still is a LecternError", async () => {
    state.requests = [];
    state.replies = [{ status: 502, headers: { "content-type": "text/html" }, body: "<h1>Bad gateway</h1>" }];
    await assert.rejects(client.getDocument("d1"), (error) => {
      assert.ok(error instanceof LecternError);
      assert.equal(error.status, 502);
      assert.equal(error.type, "about:blank");
      assert.match(error.detail, /Bad gateway/);
      return true;
    });
    assert.equal(state.requests.length, 1); // 502 is not retried
  });
});

test("Retry-After as seconds or an HTTP date", () => {
  assert.equal(parseRetryAfter("2"), 2000);
  assert.equal(parseRetryAfter(null), undefined);
  assert.equal(parseRetryAfter("soon"), undefined);
  const now = Date.parse("2026-11-27T12:00:00Z");
  assert.equal(parseRetryAfter("Fri, 27 Nov 2026 12:00:30 GMT", now), 30_000);
});

test("the SSE parser: CRLF split across chunks, comments, multi-line data, ids", () => {
  const parser = new SSEParser();
  const text = ": ping\r\n\r\nid: t:1\r\nevent: token\r\ndata: {\"type\":\"token\",\r\ndata: \"text\":\"a\"}\r\n\r\nid: t:2\nevent: done\ndata: {}\n\n";
  const frames = [];
  for (const piece of text.match(/[\s\S]{1,3}/g)) frames.push(...parser.push(piece));
  assert.deepEqual(frames, [
    { event: "token", data: '{"type":"token",\n"text":"a"}', id: "t:1" },
    { event: "done", data: "{}", id: "t:2" },
  ]);
  // a frame without its blank line is never dispatched
  assert.deepEqual(parser.push("id: t:3\r\nevent: token\r\ndata: {"), []);
});

test("the browser bundle is one self-contained ES module", async () => {
  const { readFile } = await import("node:fs/promises");
  const source = await readFile(new URL("../dist/lectern-client.browser.js", import.meta.url), "utf8");
  assert.doesNotMatch(source, /^\s*import\s/m, "no imports left in the bundle");
  assert.doesNotMatch(source, /node:/, "no Node built-ins in the bundle");
  const bundle = await import("../dist/lectern-client.browser.js");
  for (const name of ["LecternClient", "LecternError", "LecternStreamError", "AnswerStream", "SSEParser"]) {
    assert.equal(typeof bundle[name], "function", name);
  }
});

describe("the answer stream against a scripted server", () => {
  const turn = "11111111-2222-3333-4444-555555555555";
  const frames = [
    { type: "sources", sources: [] },
    { type: "token", text: "Mitosis ", origin: "model" },
    { type: "token", text: "produces two cells.", origin: "model" },
    { type: "error", reason: "generation_failed", message: "every model is down", retryable: true },
  ].map((data, i) => `id: ${turn}:${i + 1}\r\nevent: ${data.type}\r\ndata: ${JSON.stringify(data)}\r\n\r\n`);
  const requests = [];
  let script = () => [];
  const server = createServer((request, response) => {
    requests.push({ method: request.method, url: request.url, headers: request.headers });
    request.resume();
    request.on("end", () => {
      response.writeHead(200, {
        "content-type": "text/event-stream",
        "x-lectern-turn-id": turn,
        "content-location": `/v1/sessions/s1/messages/${turn}/events`,
      });
      const after = Number((request.headers["last-event-id"] ?? ":0").split(":").at(-1));
      // the server sends what the script says, from the start: the client skips what it saw
      response.end(script(requests.length, after).join(""));
    });
  });
  let client;
  before(async () => {
    await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
    client = new LecternClient({ baseUrl: `http://127.0.0.1:${server.address().port}`, token: "t" });
  });
  after(() => new Promise((resolve) => server.close(resolve)));

  test("resumes a stream that ended early, skips what it saw, and ends on error", async () => {
    requests.length = 0;
    // first: two events then the connection ends; then everything again from the start
    script = (n) => (n === 1 ? frames.slice(0, 2) : frames);
    const stream = client.ask("s1", "What does mitosis produce?", { resumeDelayMs: 10 });
    await assert.rejects(stream.collect(), (error) => {
      assert.ok(error instanceof LecternStreamError);
      assert.equal(error.reason, "generation_failed");
      assert.equal(error.retryable, true);
      assert.equal(error.turnId, turn);
      return true;
    });
    assert.equal(stream.resumes, 1);
    assert.equal(stream.lastEventId, `${turn}:4`);
    assert.equal(requests.length, 2);
    assert.equal(requests[1].method, "GET");
    assert.equal(requests[1].url, `/v1/sessions/s1/messages/${turn}/events`);
    assert.equal(requests[1].headers["last-event-id"], `${turn}:2`);
  });

  test("a restart (the turn taken over by another replica) discards what came before it", async () => {
    const taken = [
      { type: "sources", sources: [] },
      { type: "token", text: "Mitosis makes ", origin: "model" },
      { type: "restart", reason: "takeover", message: "answered again from its start" },
      { type: "sources", sources: [] },
      { type: "token", text: "Mitosis produces two cells.", origin: "model" },
      { type: "done", message_id: "m1", user_message_id: turn, session_id: "s1", citations: [],
        unsupported: [], band: "high", confidence: 0.9, knowledge_gap: false,
        answered_by: "gemini", persona: null, memories_used: [], usage: {}, timings_ms: {} },
    ].map((data, i) => `id: ${turn}:${i + 1}\r\nevent: ${data.type}\r\ndata: ${JSON.stringify(data)}\r\n\r\n`);
    script = () => taken;
    const answer = await client.ask("s1", "What does mitosis produce?").collect();
    assert.equal(answer.text, "Mitosis produces two cells.");
    assert.equal(answer.done.answered_by, "gemini");
  });

  test("gives up after maxResumes drops in a row without a new event", async () => {
    requests.length = 0;
    script = () => frames.slice(0, 1);
    const stream = client.ask("s1", "What does mitosis produce?", { resumeDelayMs: 1, maxResumes: 2 });
    const seen = [];
    await assert.rejects(
      (async () => {
        for await (const event of stream) seen.push(event.type);
      })(),
      (error) => error instanceof LecternStreamError && error.reason === "stream_incomplete",
    );
    assert.deepEqual(seen, ["sources"]);
    assert.equal(requests.length, 4); // the question, then 3 resumes without a new event (> 2)
  });
});
