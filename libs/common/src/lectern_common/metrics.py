"""The services' own OpenTelemetry metrics, in one place.

Instruments come from the global meter, which is a proxy until ``setup_telemetry`` installs
the process' ``MeterProvider``; recording before that is a no-op. The provider exports over
OTLP (``LECTERN_OTLP_ENDPOINT``) and to the Prometheus registry each service serves at
``GET /metrics``. OpenTelemetry names map to Prometheus ones by replacing dots with
underscores and adding the unit (``lectern.chat.time_to_first_token`` in seconds is
``lectern_chat_time_to_first_token_seconds``) and ``_total`` to counters.

Gauges whose value needs I/O (consumer lag, outbox backlog) are observed from a cache that
a service's background task refreshes (:class:`GaugeCache`), since OpenTelemetry calls the
callbacks synchronously from the exporter's thread.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable

from opentelemetry import metrics
from opentelemetry.metrics import CallbackOptions, Observation

meter = metrics.get_meter("lectern")

#: request latency buckets in seconds: 5 ms .. 2 min (answers take seconds on 2 cores)
LATENCY_BUCKETS_S = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30, 60, 120)

# --- chat gateway ---------------------------------------------------------------------
TIME_TO_FIRST_TOKEN = meter.create_histogram(
    "lectern.chat.time_to_first_token",
    unit="s",
    description="From the question's arrival to the first answer token sent",
    explicit_bucket_boundaries_advisory=LATENCY_BUCKETS_S,
)
ANSWER_DURATION = meter.create_histogram(
    "lectern.chat.answer_duration",
    unit="s",
    description="From the question's arrival to the done event (whole answer)",
    explicit_bucket_boundaries_advisory=LATENCY_BUCKETS_S,
)
ANSWERS = meter.create_counter(
    "lectern.chat.answers",
    description="Answers completed, by confidence band and by who answered",
)
TURN_FAILURES = meter.create_counter(
    "lectern.chat.turn_failures", description="Turns that ended in an error event, by reason"
)
KNOWLEDGE_GAPS = meter.create_counter(
    "lectern.chat.knowledge_gaps", description="Questions the course material does not cover"
)
RATE_LIMITED = meter.create_counter(
    "lectern.chat.rate_limited", description="Questions refused by the daily limit, by plan"
)
RERANK_FALLBACKS = meter.create_counter(
    "lectern.chat.rerank_fallbacks",
    description="Turns whose sources are the retriever's order because the re-ranker did not "
    "answer in time, by reason (upstream: no reply, or no replica)",
)
CHAT_SHED = meter.create_counter(
    "lectern.chat.shed",
    description="Questions refused with 503 (reason overloaded) because the replica's turns "
    "waiting for their first token were at its admission limit",
)
STREAMS_IN_FLIGHT = meter.create_up_down_counter(
    "lectern.chat.streams_in_flight",
    description="Server-Sent Event answer streams open now (the gateway's HPA scales on it)",
)
LLM_FALLBACKS = meter.create_counter(
    "lectern.llm.fallbacks",
    description="A model provider failed before answering and the next in line took over "
    "(alert on any rate above zero)",
)

# --- retriever and re-ranker ----------------------------------------------------------
STAGE_DURATION = meter.create_histogram(
    "lectern.retrieval.stage_duration",
    unit="s",
    description="Latency of a retrieval or re-rank stage (embed, dense, lexical, rerank ...)",
    explicit_bucket_boundaries_advisory=LATENCY_BUCKETS_S,
)


def record_stages(service: str, timings_ms: dict[str, float]) -> None:
    """Record a request's per-stage timings (milliseconds, as replies report them)."""
    for stage, elapsed_ms in timings_ms.items():
        STAGE_DURATION.record(elapsed_ms / 1000.0, {"service": service, "stage": stage})


REQUESTS_EXPIRED = meter.create_counter(
    "lectern.requests.expired",
    description="Requests a responder took past their deadline and answered `expired` without "
    "doing their work (its caller had stopped waiting), by request type: a sign of overload",
)


# --- the reader (re-ranker and offline answerer) ---------------------------------------
READER_CPU = meter.create_counter(
    "lectern.reader.cpu_time",
    unit="s",
    description="CPU seconds of the threads that ran the reader's graph, by kind of text: "
    "what reading costs the service (a turn's share is this over the turns)",
)
READER_PIECES = meter.create_counter(
    "lectern.reader.pieces",
    description="Word pieces of the (question, text) pairs the reader read, by kind of text",
)


# --- ingest ---------------------------------------------------------------------------
DOCUMENTS_INGESTED = meter.create_counter(
    "lectern.documents.ingested",
    description="Documents ingested, by outcome (indexed, duplicate) and file type",
)
DOCUMENTS_FAILED = meter.create_counter(
    "lectern.documents.failed", description="Documents that failed, by stage and reason"
)


class GaugeCache:
    """Last values of a gauge, set by async code and read by OpenTelemetry's callback."""

    def __init__(self, name: str, *, description: str, unit: str = "1") -> None:
        self._values: dict[tuple[tuple[str, str], ...], float] = {}
        self._lock = threading.Lock()
        meter.create_observable_gauge(
            name, callbacks=[self._observe], description=description, unit=unit
        )

    def set(self, value: float, **attributes: str) -> None:
        """Record the current value for these attributes."""
        with self._lock:
            self._values[tuple(sorted(attributes.items()))] = value

    def _observe(self, options: CallbackOptions) -> Iterable[Observation]:
        with self._lock:
            items = list(self._values.items())
        return [Observation(value, dict(key)) for key, value in items]


CHAT_ADMISSION = GaugeCache(
    "lectern.chat.admission",
    description="A gateway replica's admission of turns: its limit on turns waiting for their "
    "first token (figure=limit), and how many wait (figure=waiting)",
)
CONSUMER_PENDING = GaugeCache(
    "lectern.consumer.pending",
    description="Messages a JetStream durable consumer has not delivered yet (consumer lag)",
)
CONSUMER_ACK_PENDING = GaugeCache(
    "lectern.consumer.ack_pending",
    description="Messages delivered to a durable consumer and not yet acknowledged",
)
OUTBOX_BACKLOG = GaugeCache(
    "lectern.outbox.backlog", description="Events written to the outbox and not yet published"
)

# --- reads a streaming replica may serve (lectern_common.db.reads) ---------------------
DB_READS = meter.create_counter(
    "lectern.db.reads",
    description="Reads of the retriever and memory recall, by the Postgres that "
    "served them (target: replica or primary)",
)
REPLICA_LAG = GaugeCache(
    "lectern.db.replica_lag",
    unit="s",
    description="How far the read replica's replay was behind the primary at the last check",
)
