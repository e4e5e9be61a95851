"""The one back-off of scheduled retries: each caller's delays as its own formula gave them."""

from __future__ import annotations

from lectern_common.backoff import backoff_delay


def test_the_delay_doubles_from_the_first_up_to_the_cap() -> None:
    # the supervisor's restarts (1 s, at most 30 s) and ingest's redeliveries (2 s, at most 60 s)
    assert [backoff_delay(n, first_s=1.0, max_s=30.0) for n in range(1, 8)] == [
        1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0,
    ]  # fmt: skip
    assert [backoff_delay(n, first_s=2.0, max_s=60.0) for n in range(1, 8)] == [
        2.0, 4.0, 8.0, 16.0, 32.0, 60.0, 60.0,
    ]  # fmt: skip


def test_no_failure_yet_waits_the_first_delay_and_many_wait_the_cap() -> None:
    assert backoff_delay(0, first_s=1.0, max_s=30.0) == 1.0
    assert backoff_delay(5000, first_s=2.0, max_s=30.0) == 30.0


def test_the_memory_handlers_redeliver_as_before() -> None:
    from lectern_memory.handlers import backoff

    # their own formula was min(2.0 ** deliveries, 30.0), deliveries counted from 1
    assert [backoff(n) for n in range(1, 12)] == [min(2.0**n, 30.0) for n in range(1, 12)]
