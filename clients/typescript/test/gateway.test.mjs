// Tests against a real running gateway: tests/clients/test_typescript_client.py starts one
// (offline answerer, retriever and re-ranker stand-ins on a real NATS, real Postgres), seeds
// course material and runs `node --test` with:
//   LECTERN_URL, LECTERN_TOKEN (a student), LECTERN_TEACHER_TOKEN, LECTERN_TENANT,
//   LECTERN_DOCUMENT_ID and LECTERN_DOCUMENT_TITLE (the seeded document).
// Without LECTERN_URL these tests are skipped (the pytest checks that none was).
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { describe, test } from "node:test";
import { IndexingError, LecternClient, LecternError } from "../dist/index.js";

const env = process.env;
const skip = env.LECTERN_URL ? false : "LECTERN_URL is not set (run tests/clients/test_typescript_client.py)";
const QUESTION = "What does mitosis produce?";

function student(options = {}) {
  return new LecternClient({ baseUrl: env.LECTERN_URL, token: env.LECTERN_TOKEN, ...options });
}

/**
 * A fetch whose first answer stream breaks after `events` events (with `midFrame`, also
 * after the first line of the next one, which never completes), as a dropped connection
 * would; every later request goes through untouched. `calls` records the requests.
 */
function droppingFetch(events, { midFrame = false } = {}) {
  const calls = [];
  let dropped = false;
  const encoder = new TextEncoder();
  const dropping = async (url, init = {}) => {
    calls.push({ url, method: init.method ?? "GET", headers: { ...init.headers } });
    const response = await fetch(url, init);
    const isStream = (response.headers.get("content-type") ?? "").includes("text/event-stream");
    if (dropped || !isStream || !response.ok) return response;
    dropped = true;
    const reader = response.body.getReader();
    const decoder = new TextDecoder();
    let pending = "";
    let count = 0;
    let cut = false;
    const body = new ReadableStream({
      async pull(controller) {
        for (;;) {
          const { value, done } = await reader.read();
          if (done) {
            controller.close();
            return;
          }
          pending += decoder.decode(value, { stream: true });
          let out = "";
          for (;;) {
            if (cut) {
              const line = /\r\n|\n/.exec(pending);
              if (line === null) break;
              out += pending.slice(0, line.index + line[0].length);
              controller.enqueue(encoder.encode(out));
              await reader.cancel();
              controller.error(new TypeError("connection dropped (test)"));
              return;
            }
            const end = /\r\n\r\n|\n\n/.exec(pending);
            if (end === null) break;
            const frame = pending.slice(0, end.index + end[0].length);
            pending = pending.slice(end.index + end[0].length);
            out += frame;
            if (!frame.startsWith(":")) count += 1;
            if (count >= events) {
              if (midFrame) {
                cut = true;
                continue;
              }
              controller.enqueue(encoder.encode(out));
              await reader.cancel();
              controller.error(new TypeError("connection dropped (test)"));
              return;
            }
          }
          if (out) {
            controller.enqueue(encoder.encode(out));
            return;
          }
        }
      },
    });
    return new Response(body, { status: response.status, headers: response.headers });
  };
  return { fetch: dropping, calls };
}

/** Every event of an answer with the SSE id it came with. */
async function read(stream) {
  const received = [];
  for await (const event of stream) received.push({ id: stream.lastEventId, event });
  return received;
}

function textOf(received) {
  return received.filter((r) => r.event.type === "token").map((r) => r.event.text).join("");
}

function assertWhole(received, turnId) {
  const ids = received.map((r) => r.id);
  assert.deepEqual(ids, received.map((_, i) => `${turnId}:${i + 1}`), "each event once, in order, none missing");
  assert.equal(received[0].event.type, "sources");
  assert.equal(received.at(-1).event.type, "done");
}

describe("against a real gateway", { skip }, () => {
  test("search returns the seeded material", async () => {
    const found = await student().search({ query: "mitosis cell division", k: 5 });
    assert.ok(found.candidates.length > 0, "no candidates");
    const top = found.candidates[0];
    assert.equal(top.document_id, env.LECTERN_DOCUMENT_ID);
    assert.equal(top.title, env.LECTERN_DOCUMENT_TITLE);
    assert.match(top.text, /Mitosis/);
    assert.ok(found.candidates.every((c) => c.document_id === env.LECTERN_DOCUMENT_ID));
  });

  test("sessions: create and get", async () => {
    const client = student();
    const created = await client.createSession({ mode: "chat", subject: "biology" });
    assert.equal(created.status, "active");
    assert.equal(created.mode, "chat");
    const got = await client.getSession(created.id);
    assert.equal(got.id, created.id);
    assert.equal(got.subject, "biology");
    assert.ok((await client.listSessions()).some((s) => s.id === created.id));
  });

  test("ask streams an answer with sources, citations and a done event", async () => {
    const client = student();
    const session = await client.createSession({});
    const stream = client.ask(session.id, QUESTION);
    const received = await read(stream);
    assertWhole(received, stream.turnId);
    const [sources] = received.map((r) => r.event).filter((e) => e.type === "sources");
    assert.ok(sources.sources.length > 0);
    assert.equal(sources.sources[0].label, "T1");
    assert.equal(sources.sources[0].document_id, env.LECTERN_DOCUMENT_ID);
    const done = received.at(-1).event;
    assert.equal(done.user_message_id, stream.turnId);
    assert.equal(done.session_id, session.id);
    assert.notEqual(done.band, "gap");
    assert.ok(done.citations.length > 0, "the answer cites its source");
    const text = textOf(received);
    assert.match(text, /mitosis/i);
    assert.match(text, /\[T1\]/);
    assert.equal(stream.resumes, 0);
    // the stored answer is the streamed one
    const messages = await client.getMessages(session.id);
    assert.equal(messages.at(-1).content, text);
  });

  test("collect() gathers the answer", async () => {
    const client = student();
    const session = await client.createSession({});
    const answer = await client.ask(session.id, QUESTION).collect();
    assert.ok(answer.text.length > 0);
    assert.ok(answer.sources.length > 0 && answer.citations.length > 0);
    assert.equal(answer.done.type, "done");
    assert.equal(answer.turnId, answer.done.user_message_id);
    assert.ok(answer.confidence && answer.confidence.band === answer.done.band);
  });

  for (const [resume, midFrame] of [["get", false], ["post", false], ["get", true], ["post", true]]) {
    test(`a dropped stream resumes by itself (${resume}${midFrame ? ", cut inside an event" : ""}): same text, no event twice`, async () => {
      const whole = student();
      const reference = await read(whole.ask((await whole.createSession({})).id, QUESTION));
      const dropping = droppingFetch(3, { midFrame });
      const client = student({ fetch: dropping.fetch });
      const session = await client.createSession({});
      const key = randomUUID();
      const stream = client.ask(session.id, QUESTION, { resume, idempotencyKey: key, resumeDelayMs: 50 });
      const received = await read(stream);
      assert.equal(stream.resumes, 1, "resumed once");
      assertWhole(received, stream.turnId);
      assert.equal(textOf(received), textOf(reference), "the resumed answer is the uninterrupted one");
      const tokens = received.filter((r) => r.event.type === "token").map((r) => r.id);
      assert.equal(new Set(tokens).size, tokens.length, "no token twice");
      // the resuming request
      const asks = dropping.calls.filter((c) => c.url.includes(`/v1/sessions/${session.id}/messages`));
      assert.equal(asks.length, 2);
      const [first, again] = asks;
      assert.equal(first.method, "POST");
      assert.equal(first.headers["Idempotency-Key"], key);
      assert.equal(first.headers["Last-Event-ID"], undefined);
      assert.equal(again.headers["Last-Event-ID"], `${stream.turnId}:3`);
      if (resume === "get") {
        assert.equal(again.method, "GET");
        assert.ok(again.url.endsWith(`/messages/${stream.turnId}/events`));
      } else {
        assert.equal(again.method, "POST");
        assert.equal(again.headers["Idempotency-Key"], key);
      }
      // asked once: one question and one answer stored
      const messages = await client.getMessages(session.id);
      assert.deepEqual(messages.map((m) => m.role), ["user", "assistant"]);
      assert.equal(messages[1].content, textOf(received));
    });
  }

  test("aborting a stream stops it without resuming", async () => {
    const client = student();
    const session = await client.createSession({});
    const controller = new AbortController();
    const stream = client.ask(session.id, QUESTION, { signal: controller.signal });
    const seen = [];
    await assert.rejects(
      (async () => {
        for await (const event of stream) {
          seen.push(event.type);
          if (event.type === "sources") controller.abort();
        }
      })(),
      (error) => error.name === "AbortError",
    );
    assert.deepEqual(seen, ["sources"]);
    assert.equal(stream.resumes, 0);
  });

  test("a 404 is a LecternError with the problem's fields", async () => {
    const missing = randomUUID();
    await assert.rejects(student().getDocument(missing), (error) => {
      assert.ok(error instanceof LecternError);
      assert.equal(error.status, 404);
      assert.equal(error.type, "about:blank");
      assert.equal(error.title, "Not found");
      assert.match(error.detail, new RegExp(missing));
      assert.equal(error.instance, `/v1/documents/${missing}`);
      assert.equal(error.problem.status, 404);
      return true;
    });
    await assert.rejects(student().getSession(randomUUID()), (error) => error instanceof LecternError && error.status === 404);
    // a blank question: 422 with the fields at fault
    const session = await student().createSession({});
    await assert.rejects(student().ask(session.id, " ").collect(), (error) => {
      assert.ok(error instanceof LecternError);
      assert.equal(error.status, 422);
      assert.ok(error.problem.errors, "422 lists the fields at fault");
      return true;
    });
  });

  test("waitUntilIndexed returns an indexed document", async () => {
    const seen = [];
    const document = await student().waitUntilIndexed(env.LECTERN_DOCUMENT_ID, { onStatus: (d) => seen.push(d.status) });
    assert.equal(document.status, "indexed");
    assert.equal(document.title, env.LECTERN_DOCUMENT_TITLE);
    assert.deepEqual(seen, ["indexed"]);
  });

  test("upload: a teacher's file with progress; a student is refused", async () => {
    const teacher = new LecternClient({ baseUrl: env.LECTERN_URL, token: env.LECTERN_TEACHER_TOKEN });
    const text = `# Osmosis ${randomUUID()}\n\n${"Osmosis is the movement of water across a membrane. ".repeat(2000)}\n`;
    const file = new Blob([text], { type: "text/markdown" });
    const progress = [];
    const accepted = await teacher.uploadDocument(file, {
      filename: "osmosis.md",
      metadata: { title: "Osmosis", subject: "biology", topic_tags: ["osmosis", "membranes"] },
      onProgress: (p) => progress.push(p),
    });
    assert.ok(accepted.id);
    assert.ok(["pending", "processing"].includes(accepted.status), accepted.status);
    assert.equal(accepted.document.title, "Osmosis");
    assert.ok(progress.length >= 2, "progress reported as the body streamed");
    const { total } = progress[0];
    assert.ok(total > file.size, "the multipart body is a bit larger than the file");
    assert.deepEqual(progress.at(-1), { sent: total, total });
    for (let i = 1; i < progress.length; i++) assert.ok(progress[i].sent >= progress[i - 1].sent);
    const stored = await teacher.getDocument(accepted.id);
    assert.deepEqual([...stored.topic_tags].sort(), ["membranes", "osmosis"]);
    // no ingest service runs beside this gateway: the wait times out, saying so
    await assert.rejects(
      teacher.waitUntilIndexed(accepted.id, { intervalMs: 100, timeoutMs: 400 }),
      (error) => error instanceof IndexingError && error.reason === "timeout" && error.document.id === accepted.id,
    );
    // buffered: progress at the start and once the gateway answered
    const buffered = [];
    const again = await teacher.uploadDocument(new Blob([`${text}\nAgain.\n`]), {
      filename: "osmosis-2.md",
      progress: "none",
      onProgress: (p) => buffered.push(p),
    });
    assert.notEqual(again.id, accepted.id);
    assert.equal(buffered.length, 2);
    assert.deepEqual(buffered.map((p) => p.sent), [0, buffered[0].total]);
    // identical bytes: the existing document
    const same = await teacher.uploadDocument(file, { filename: "osmosis.md" });
    assert.equal(same.id, accepted.id);
    await assert.rejects(student().uploadDocument(file, { filename: "osmosis.md" }), (error) => {
      assert.ok(error instanceof LecternError);
      assert.equal(error.status, 403);
      return true;
    });
  });
});
