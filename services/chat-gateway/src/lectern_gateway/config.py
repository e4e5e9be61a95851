"""Settings of the gateway service (env prefix LECTERN_GATEWAY_, shared values from LECTERN_*)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field
from pydantic_settings import SettingsConfigDict

from lectern_answerer import READ_AT_MOST, READ_FIRST
from lectern_common.reading import PACKAGED_L3_NAME, PACKAGED_NAME
from lectern_common.settings import ServiceHttpSettings, shared
from lectern_gateway.chat.decision import ANSWER_MARGIN


class Settings(ServiceHttpSettings):
    """Chat gateway settings."""

    model_config = SettingsConfigDict(env_prefix="LECTERN_GATEWAY_")

    service_name: str = shared("service_name", "lectern-gateway", "name in logs and traces")
    http_port: int = 8000

    # auth
    jwks_url: str | None = Field(
        default=None, description="RS256 bearer tokens are verified with this JWKS (IdP)"
    )
    jwt_audience: str | None = Field(default=None, description="required `aud` when set")
    jwt_issuer: str | None = Field(default=None, description="required `iss` when set")
    jwks_cache_s: int = Field(default=300, description="how long fetched signing keys live")

    # rate limits, per user per UTC day
    free_soft_limit: int = Field(default=2, description="free plan: later answers are delayed")
    free_soft_delay_s: float = Field(default=5.0, description="delay past the soft limit")
    free_hard_limit: int = Field(default=4, description="free plan: later messages get 429")
    pro_daily_limit: int | None = Field(default=None, description="pro plan; unset: unlimited")

    # the chat pipeline
    context_token_budget: int = Field(default=8000, description="whole prompt, in tokens")
    history_messages: int = Field(default=10, description="short-term memory (messages)")
    memory_k: int = Field(default=3, description="long-term memories recalled per question")
    memory_timeout_s: float = Field(default=0.3, description="recall is skipped past this")
    retrieve_k: int = Field(default=20, description="candidates asked of the retriever")
    retrieve_max_per_document: int | None = Field(
        default=None,
        ge=1,
        description="chunks of one document ahead of other documents' in the candidates; unset: "
        "the fused order, so a course book's 4th-best chunk is not put behind every other "
        "document's top 3 (answer benchmark: 3 -> unset raised citation precision "
        "0.840 -> 0.867)",
    )
    rerank_top_k: int = Field(
        default=12,
        description="sources kept by the re-ranker (answer benchmark: 12 over 8 raised "
        "gold-page recall 0.962 -> 0.981, citation precision 0.885 -> 0.894)",
    )
    retrieve_timeout_s: float = Field(default=10.0)
    rerank_timeout_s: float = Field(default=10.0)
    rerank_fallback: bool = Field(
        default=True,
        description="when the re-ranker does not answer within rerank_timeout_s, answer from "
        "the retriever's order with a verdict from its scores (at most low; a weak match is a "
        "knowledge gap); false: the turn ends with an error event",
    )
    admit_first_token_s: float = Field(
        default=5.0,
        ge=0,
        description="overload: the wait for a first token each replica holds its turns to; a "
        "question past the replica's adaptive limit on turns still waiting gets 503 "
        "(reason overloaded) with Retry-After at once; 0: every question is admitted",
    )
    admit_patience_s: float = Field(
        default=10.0,
        ge=0,
        description="overload: how long a question waits in line (first come, first served) "
        "for a place among the waiting turns before its 503",
    )
    admit_initial_turns: int = Field(
        default=8, ge=1, description="overload: the limit on waiting turns a replica starts at"
    )
    admit_min_turns: int = Field(
        default=2, ge=1, description="overload: the limit on waiting turns never falls below this"
    )
    support_threshold: float = Field(
        default=0.35, description="a cited sentence below this support is flagged unsupported"
    )
    web_search: bool = Field(
        default=True,
        description="let Gemini search the web and cite it as [W#], on every kind of turn "
        "(the default of tenants that have not chosen: PUT /v1/tenant/settings)",
    )
    offline_answerer_embeddings: bool = Field(
        default=True,
        description="the offline answerer scores sentences with the local embedding model "
        "too (loaded at start, ~90 MB); false: term overlap only",
    )
    offline_answerer_reader: bool = Field(
        default=True,
        description="the offline answerer reads each source sentence against the question "
        "with the packaged reader (int8 ONNX, ~23 MB, loaded at start): its scoring and "
        "refusal models were fitted with it; false: the models fitted without it",
    )
    offline_answerer_reader_model: str = Field(
        default=PACKAGED_NAME,
        description=f"the reader the offline answerer reads with: {PACKAGED_NAME!r} (6 layers, "
        f"the one its shipped model was fitted with), {PACKAGED_L3_NAME!r} (3 layers, half the "
        "cost, picks answering sentences worse) or a reader folder",
    )  # fmt: skip
    offline_answerer_from_spans: bool = Field(
        default=False,
        description="the offline answerer scores a turn's sources from the answer spans the "
        "re-ranker's reader marked (answerer_model_spans.json) and reads nothing again: ~34 "
        "core-ms a turn less, but dev key-fact out of sample 0.802 -> 0.788 (docs/benchmarks.md)",
    )
    offline_answerer_read_at_most: int = Field(
        default=READ_AT_MOST, ge=0,
        description="the units of a turn's sources the offline answerer's reader reads at most "
        "(those its model without the reader ranks highest; 0: all): what a turn's reading "
        "costs (docs/benchmarks.md, 'Under load')",
    )  # fmt: skip
    offline_answerer_read_first: int = Field(
        default=READ_FIRST or 0, ge=0,
        description="of those, the units read first; the others only when none of these reads "
        "as an answer (the reader's logit 0 or more): 6.1 units read a question instead of 8 on "
        "the answer set, key-fact recall kept (docs/benchmarks.md); 0: all at once",
    )  # fmt: skip
    grounding_weight: float = Field(
        default=0.3, description="weight of grounding in the final confidence score"
    )
    answer_margin: float | None = Field(
        default=ANSWER_MARGIN,
        description="a turn is refused (a knowledge gap, reason no_answer_span) when no "
        "source's answer span, as the re-ranker's reader marked it, beats its 'no answer "
        "here' score by this much (unset: never; bench/fit_margin.py fitted -7.493, "
        "chat.decision.FITTED_ANSWER_MARGIN, which refuses too many answerable questions for "
        "too few off-topic ones to be the default)",
    )

    resume_grace_s: float = Field(
        default=30.0,
        description="an answer nobody reads is stopped after this long (a dropped stream "
        "may reconnect with Last-Event-ID meanwhile)",
    )
    turn_flush_s: float = Field(
        default=0.5, description="a streaming turn's events are written to Postgres this often"
    )
    turn_takeover_s: float = Field(
        default=3.0,
        gt=0,
        description="a streaming turn whose replica has not written its row for this long "
        "(6 missed writes at the default flush) is taken over by the replica a client "
        "resumes on: answered again from the same inputs, the stream continuing",
    )
    turn_retention_s: float = Field(
        default=86400.0,
        description="a turn's kept events (replay, Idempotency-Key) are forgotten after this",
    )

    # sessions
    idle_timeout_s: float = Field(default=1800.0, description="sessions idle this long end")
    freshness_horizon_days: int = Field(
        default=1095, ge=1,
        description="days after its freshness date (else upload) a document enters the stale "
        "review queue, unless its subject has its own horizon",
    )  # fmt: skip
    idle_sweep_interval_s: float = Field(default=60.0, description="0 disables the sweep")
    gc_interval_s: float = Field(
        default=3600.0, ge=0,
        description="seconds between the worker's collections of stored files no document "
        "needs any more (0: none; `lectern gc` runs one by hand)",
    )  # fmt: skip
    gc_grace_s: float = Field(
        default=3600.0, ge=0,
        description="stored files younger than this are never collected (uploads in flight)",
    )  # fmt: skip
    retention_sweep_interval_s: float = Field(
        default=3600.0, ge=0,
        description="how often sessions past their tenant's session_retention_days are "
        "deleted (PUT /v1/tenant/settings; 0: never)",
    )  # fmt: skip
    gap_closure_interval_s: float = Field(
        default=15.0, ge=0,
        description="how often gap topics closed by a document are re-tried once it is indexed "
        "(0: never)",
    )  # fmt: skip

    # documents
    url_fetch_allowed_networks: list[str] = Field(
        default_factory=list,
        description="networks (CIDR) a document URL may resolve to besides public addresses "
        "(default none: never loopback, private or link-local)",
    )
    url_fetch_timeout_s: float = Field(default=30.0, gt=0, description="fetching a URL")
    max_upload_bytes: int = Field(
        default=100 * 1024 * 1024, gt=0, description="uploads past this size get 413"
    )

    # webhooks (Standard Webhooks: POST /v1/webhooks)
    webhook_dispatch: bool = Field(
        default=True,
        description="the worker (lectern-gateway worker) consumes the tenant events from "
        "JetStream and delivers them to the registered webhooks (false: it neither records nor "
        "sends deliveries)",
    )
    webhook_timeout_s: float = Field(
        default=10.0, gt=0, description="one delivery attempt (connect, send, read the status)"
    )
    webhook_retry_schedule_s: list[float] = Field(
        # Standard Webhooks' reference schedule (Svix): 5 s, 5 min, 30 min, 2 h, 5 h, 10 h, 10 h
        default_factory=lambda: [5.0, 300.0, 1800.0, 7200.0, 18000.0, 36000.0, 36000.0],
        description="waits before each retry of a failed attempt; a delivery fails once the "
        "schedule is used up (1 + its length attempts)",
    )
    webhook_disable_after_failures: int = Field(
        default=10,
        ge=1,
        description="a webhook whose deliveries failed this many times running is disabled",
    )
    webhook_lease_margin_s: float = Field(
        default=60.0, gt=0,
        description="a claimed delivery is its worker's for the attempt's timeout and this "
        "margin (recording it); a worker killed mid-delivery: sent again once it runs out",
    )  # fmt: skip
    webhook_poll_interval_s: float = Field(
        default=1.0, gt=0, description="how often due deliveries are looked for"
    )
    webhook_concurrency: int = Field(
        default=8, ge=1, description="deliveries one replica sends at once"
    )
    webhook_retention_days: float = Field(
        default=30.0, gt=0, description="finished deliveries and their attempts are kept this long"
    )

    # LTI 1.3 (docs/lti.md)
    lti_public_url: str | None = Field(
        default=None,
        description="the gateway's public base URL as LMSs reach it (https://...): the launch, "
        "login and JWKS URLs given to platforms; unset: taken from each request",
    )
    lti_frame_ancestors: list[str] = Field(
        default_factory=list,
        description="origins of the LMSs that may show the web UI in a frame (CSP "
        "frame-ancestors, e.g. https://moodle.school.edu); none: a framed launch opens the UI in "
        "a new window",
    )
    lti_state_ttl_s: float = Field(
        default=600.0, gt=0, description="an OIDC login must end in a launch within this long"
    )
    lti_leeway_s: float = Field(
        default=30.0, ge=0, description="clock skew allowed on a platform's exp and iat"
    )
    lti_token_lifetime_s: int = Field(
        default=300, gt=0,
        description="lifetime of the JWTs Lectern signs for platforms (deep-linking responses, "
        "client assertions); a rotated key stays published this long and a margin",
    )  # fmt: skip
    lti_session_ttl_s: int = Field(
        default=8 * 3600, gt=0, description="the Lectern sign-in a launch gives lasts this long"
    )
    lti_plan: Literal["free", "pro"] = Field(
        default="pro", description="the plan (message limits) of users who come by a launch"
    )
    lti_jwks_cache_s: float = Field(
        default=300.0, gt=0, description="how long a platform's fetched keys are trusted"
    )
    lti_http_timeout_s: float = Field(
        default=10.0, gt=0, description="one request to a platform (keys, tokens, roster, scores)"
    )
    lti_roster_refresh_s: float = Field(
        default=3600.0, ge=0,
        description="a launch re-syncs its course's roster when the last sync is older "
        "(in the background; 0: every launch)",
    )  # fmt: skip
    lti_score_retry_schedule_s: list[float] = Field(
        default_factory=lambda: [5.0, 30.0, 120.0, 600.0, 1800.0, 3600.0],
        description="waits before each retry of a score the platform did not take; the last "
        "repeats until lti_score_give_up_s",
    )
    lti_score_give_up_s: float = Field(
        default=7 * 86400.0, gt=0,
        description="a score still not taken this long after the attempt is marked failed",
    )  # fmt: skip
    lti_score_poll_interval_s: float = Field(
        default=1.0, gt=0, description="how often the worker looks for scores to post"
    )
