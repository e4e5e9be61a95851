"""The client's shared, I/O-free parts: Retry-After, the retry policy, the SSE frame parser,
and the answer stream's resume state (no event yielded twice)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

import httpx

from lectern_client import NotFound, RateLimited, TokenEvent, Unavailable, ValidationError
from lectern_client._core import (
    AnswerState,
    FrameParser,
    Options,
    problem_error,
    retry_delay,
)
from lectern_client._headers import retry_after_seconds


def test_retry_after_is_read_as_seconds_or_a_date() -> None:
    now = datetime(2026, 11, 27, 12, 0, tzinfo=UTC)
    assert retry_after_seconds("7") == 7.0
    assert retry_after_seconds(format_datetime(now + timedelta(seconds=30)), now=now) == 30.0
    assert retry_after_seconds(format_datetime(now - timedelta(seconds=30)), now=now) == 0.0
    assert retry_after_seconds(None) is None and retry_after_seconds("soon") is None


def test_only_429_and_503_are_retried_within_bounds() -> None:
    options = Options(max_retries=2, max_retry_wait=10.0, backoff=0.5)
    busy = httpx.Response(503, headers={"Retry-After": "3"})
    assert retry_delay(options, 0, busy) == 3.0
    assert retry_delay(options, 2, busy) is None  # attempts used up
    assert retry_delay(options, 0, httpx.Response(429, headers={"Retry-After": "3600"})) is None
    assert retry_delay(options, 1, httpx.Response(429)) == 1.0  # no Retry-After: backoff
    assert retry_delay(options, 0, httpx.Response(500)) is None


def test_problems_become_typed_errors() -> None:
    body = {"type": "about:blank", "title": "Not found", "status": 404, "detail": "no such",
            "instance": "/v1/documents/x", "reason": "missing"}  # fmt: skip
    error = problem_error(httpx.Response(404, json=body))
    assert isinstance(error, NotFound) and error.reason == "missing"
    assert (error.status, error.title, error.detail, error.instance) == (
        404, "Not found", "no such", "/v1/documents/x",
    )  # fmt: skip
    invalid = problem_error(httpx.Response(422, json={"title": "Bad", "errors": [{"loc": ["x"]}]}))
    assert isinstance(invalid, ValidationError) and invalid.errors == [{"loc": ["x"]}]
    limited = problem_error(
        httpx.Response(429, json={"title": "Slow"}, headers={"Retry-After": "9"})
    )
    assert isinstance(limited, RateLimited) and limited.retry_after == 9.0
    plain = problem_error(httpx.Response(503, text="upstream away"))
    assert isinstance(plain, Unavailable) and plain.detail == "upstream away"


def test_frames_are_parsed_line_by_line() -> None:
    parser = FrameParser()
    lines = [": ping", "", "event: progress", 'data: {"done": 1}', "id: 4", "", ""]
    frames = [f for f in map(parser.feed, lines) if f is not None]
    assert [(f.event, f.data, f.id) for f in frames] == [("progress", '{"done": 1}', "4")]


def test_a_replayed_event_is_not_yielded_twice() -> None:
    state = AnswerState("s", "q", Options())
    token = '{"type": "token", "text": "Hi"}'
    first = state.accept("token", token, "turn:1")
    assert isinstance(first, TokenEvent) and state.last_event_id == "turn:1"
    assert state.accept("token", token, "turn:1") is None  # the replay overlaps
    assert state.accept("token", '{"type": "token", "text": "!"}', "turn:2") is not None
    assert state.request().headers["Last-Event-ID"] == "turn:2"
    assert state.request().headers["Idempotency-Key"] == state.idempotency_key
    done = state.accept("mystery", '{"type": "mystery", "x": 1}', "turn:3")
    assert done is not None and done.type == "mystery" and not state.finished


def test_a_restart_discards_the_text_collected_before_it() -> None:
    """A turn taken over by another gateway replica whose re-run may differ sends ``restart``
    (numbered after what the client has): the collected answer starts again from it."""
    from lectern_client import RestartEvent
    from lectern_client._core import Collector
    from lectern_client.events import parse_answer_event

    collector = Collector()
    for name, data in [
        ("token", '{"type": "token", "text": "Mitosis makes "}'),
        ("restart", '{"type": "restart", "reason": "takeover", "message": "answered again"}'),
        ("token", '{"type": "token", "text": "Mitosis produces two cells."}'),
    ]:
        event = parse_answer_event(name, data)
        if name == "restart":
            assert isinstance(event, RestartEvent)
        collector.add(event)
    assert collector.result().text == "Mitosis produces two cells."
