-- Webhooks: a tenant's admins register an HTTPS endpoint for some event types; the gateway
-- consumes the events from JetStream and POSTs each to the endpoints that asked for it,
-- signed the Standard Webhooks way (webhook-id, webhook-timestamp, webhook-signature).

-- A registered endpoint. `secret` (whsec_ + base64) signs every delivery, so it is kept;
-- it is shown once, at creation. A webhook whose deliveries failed
-- `consecutive_failures` times running is disabled (`disabled_at`, `disabled_reason`).
CREATE TABLE webhooks (
    id                   uuid PRIMARY KEY,
    tenant_id            text NOT NULL,
    url                  text NOT NULL,
    event_types          text[] NOT NULL,
    description          text,
    secret               text NOT NULL,
    created_by           text,
    created_at           timestamptz NOT NULL DEFAULT now(),
    updated_at           timestamptz NOT NULL DEFAULT now(),
    consecutive_failures integer NOT NULL DEFAULT 0,
    disabled_at          timestamptz,
    disabled_reason      text
);
CREATE INDEX webhooks_tenant ON webhooks (tenant_id, created_at DESC);

-- One event for one webhook (idempotent per webhook and event: a redelivered NATS message
-- writes nothing new). Workers claim due rows FOR UPDATE SKIP LOCKED and lease them by moving
-- `next_attempt_at` past the request's timeout, so two replicas never send one at once.
CREATE TABLE webhook_deliveries (
    id              uuid PRIMARY KEY,
    webhook_id      uuid NOT NULL REFERENCES webhooks (id) ON DELETE CASCADE,
    tenant_id       text NOT NULL,
    event_id        uuid NOT NULL,
    event_type      text NOT NULL,
    payload         text NOT NULL,
    headers         jsonb NOT NULL DEFAULT '{}',
    status          text NOT NULL DEFAULT 'pending'
                    CHECK (status IN ('pending', 'succeeded', 'failed')),
    attempts        integer NOT NULL DEFAULT 0,
    next_attempt_at timestamptz NOT NULL DEFAULT now(),
    created_at      timestamptz NOT NULL DEFAULT now(),
    finished_at     timestamptz,
    UNIQUE (webhook_id, event_id)
);
CREATE INDEX webhook_deliveries_due ON webhook_deliveries (next_attempt_at)
    WHERE status = 'pending';
CREATE INDEX webhook_deliveries_listing ON webhook_deliveries (webhook_id, created_at DESC);
-- finished deliveries are pruned after LECTERN_GATEWAY_WEBHOOK_RETENTION_DAYS
CREATE INDEX webhook_deliveries_finished ON webhook_deliveries (finished_at)
    WHERE finished_at IS NOT NULL;

-- Every attempt, successful or not: the HTTP status (NULL when none came), the error, how
-- long it took.
CREATE TABLE webhook_attempts (
    id           bigserial PRIMARY KEY,
    delivery_id  uuid NOT NULL REFERENCES webhook_deliveries (id) ON DELETE CASCADE,
    attempted_at timestamptz NOT NULL DEFAULT now(),
    status_code  integer,
    error        text,
    duration_ms  integer NOT NULL
);
CREATE INDEX webhook_attempts_delivery ON webhook_attempts (delivery_id, attempted_at);
