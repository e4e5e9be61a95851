"""The one back-off for retries that are scheduled rather than looped.

A retry that loops in place is a tenacity loop (``hedged.py``, ``broker.publish_stored``, the
embedders). Where the next attempt is scheduled elsewhere, the delay is this function's:
JetStream redelivers a nacked message after it (ingest, memory, webhooks), the supervisor
restarts a crashed service after it, and the outbox relay tries a row, or its whole loop,
again after it. Deterministic: each caller's delays are what they were when each had its own
formula.
"""

from __future__ import annotations


def backoff_delay(attempt: int, *, first_s: float, max_s: float) -> float:
    """Seconds to wait after the ``attempt``-th failure (1 for the first): ``first_s``,
    doubled after each further failure, at most ``max_s``."""
    try:
        return float(min(max_s, first_s * 2 ** max(0, attempt - 1)))
    except OverflowError:  # thousands of failures: the doubling passed any float long ago
        return float(max_s)
