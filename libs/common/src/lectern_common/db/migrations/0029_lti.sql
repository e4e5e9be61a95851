-- LTI 1.3 (LTI Advantage): a school's LMS (the platform) launches Lectern (the tool). Owned by
-- the gateway (docs/lti.md).

-- A platform registered with a tenant: its issuer, the client id it gave Lectern and its
-- endpoints. One (issuer, client id) may be registered by several tenants (one Canvas
-- developer key installed in many schools): the deployment decides the tenant.
CREATE TABLE lti_registrations (
    id              uuid PRIMARY KEY,
    tenant_id       text NOT NULL,
    issuer          text NOT NULL,
    client_id       text NOT NULL,
    name            text,
    auth_url        text NOT NULL,
    token_url       text NOT NULL,
    jwks_url        text NOT NULL,
    -- the `aud` of our client assertions (some platforms want their issuer; default token_url)
    token_audience  text,
    source          text NOT NULL DEFAULT 'manual' CHECK (source IN ('manual', 'dynamic')),
    -- what Dynamic Registration read of the platform (its openid-configuration)
    platform_config jsonb,
    created_by      text,
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now(),
    UNIQUE (tenant_id, issuer, client_id)
);
CREATE INDEX lti_registrations_issuer ON lti_registrations (issuer, client_id);

-- A deployment of a registration: keyed by (issuer, client id, deployment id) across every
-- tenant, never by issuer alone.
CREATE TABLE lti_deployments (
    issuer          text NOT NULL,
    client_id       text NOT NULL,
    deployment_id   text NOT NULL,
    registration_id uuid NOT NULL REFERENCES lti_registrations (id) ON DELETE CASCADE,
    tenant_id       text NOT NULL,
    created_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (issuer, client_id, deployment_id)
);
CREATE INDEX lti_deployments_registration ON lti_deployments (registration_id);

-- The tool's own RSA keys (signing deep-linking responses and client assertions). The newest
-- key not retired signs; a retired key is still published until `publish_until`, when every
-- token it signed has expired.
CREATE TABLE lti_tool_keys (
    kid           text PRIMARY KEY,
    private_pem   text NOT NULL,
    public_jwk    jsonb NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT now(),
    retired_at    timestamptz,
    publish_until timestamptz
);

-- OIDC login state: one row per login initiation, used once, expiring. `browser_sha256` is
-- the hash of the secret kept in the browser (the state cookie, or the platform's
-- postMessage storage where third-party cookies are blocked).
CREATE TABLE lti_oidc_states (
    state          text PRIMARY KEY,
    nonce          text NOT NULL UNIQUE,
    issuer         text NOT NULL,
    client_id      text NOT NULL,
    deployment_id  text,
    -- the platform's authorization endpoint (its origin receives the postMessage storage)
    auth_url       text NOT NULL,
    browser_sha256 text NOT NULL,
    created_at     timestamptz NOT NULL DEFAULT now(),
    expires_at     timestamptz NOT NULL,
    used_at        timestamptz
);
CREATE INDEX lti_oidc_states_expiry ON lti_oidc_states (expires_at);

-- A platform user (its `sub`) and the Lectern user they are; name and email only as the
-- platform sent them (NULL when it did not).
CREATE TABLE lti_users (
    registration_id uuid NOT NULL REFERENCES lti_registrations (id) ON DELETE CASCADE,
    sub             text NOT NULL,
    tenant_id       text NOT NULL,
    user_id         text NOT NULL UNIQUE,
    name            text,
    given_name      text,
    family_name     text,
    email           text,
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (registration_id, sub)
);

-- An LMS course (context) and the class it is in Lectern; its roster and gradebook services.
CREATE TABLE lti_contexts (
    registration_id  uuid NOT NULL REFERENCES lti_registrations (id) ON DELETE CASCADE,
    context_id       text NOT NULL,
    tenant_id        text NOT NULL,
    class_id         text NOT NULL,
    title            text,
    label            text,
    memberships_url  text,
    lineitems_url    text,
    roster_synced_at timestamptz,
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (registration_id, context_id),
    UNIQUE (tenant_id, class_id)
);

-- The students a roster sync put on a class (so that a later sync removes only those who
-- left the course, never a student a teacher added by hand).
CREATE TABLE lti_roster_members (
    tenant_id  text NOT NULL,
    class_id   text NOT NULL,
    user_id    text NOT NULL,
    synced_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, class_id, user_id)
);

-- A link placed in a course (a resource link): what it opens in Lectern, and its line item.
CREATE TABLE lti_resource_links (
    registration_id  uuid NOT NULL REFERENCES lti_registrations (id) ON DELETE CASCADE,
    resource_link_id text NOT NULL,
    tenant_id        text NOT NULL,
    context_id       text,
    title            text,
    target_kind      text NOT NULL CHECK (target_kind IN ('home', 'quiz', 'document', 'module')),
    target_id        text,
    lineitem_url     text,
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (registration_id, resource_link_id)
);

-- Where a student's quiz scores go: the line item of each link they took the quiz from.
CREATE TABLE lti_grade_links (
    tenant_id       text NOT NULL,
    user_id         text NOT NULL,
    quiz_id         uuid NOT NULL,
    lineitem_url    text NOT NULL,
    registration_id uuid NOT NULL REFERENCES lti_registrations (id) ON DELETE CASCADE,
    sub             text NOT NULL,
    updated_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, user_id, quiz_id, lineitem_url)
);

-- A deep-linking request in progress: the teacher picks content, the signed response goes
-- back to `return_url`. Used once, expiring.
CREATE TABLE lti_deep_links (
    id              text PRIMARY KEY,
    registration_id uuid NOT NULL REFERENCES lti_registrations (id) ON DELETE CASCADE,
    tenant_id       text NOT NULL,
    deployment_id   text NOT NULL,
    user_id         text NOT NULL,
    class_id        text,
    return_url      text NOT NULL,
    data            text,
    accept_types    text[] NOT NULL,
    accept_multiple boolean NOT NULL DEFAULT false,
    created_at      timestamptz NOT NULL DEFAULT now(),
    expires_at      timestamptz NOT NULL,
    used_at         timestamptz
);

-- Scores to post to a platform's line item (Assignment and Grade Services): written in the
-- quiz attempt's transaction, sent by the gateway worker, retried with backoff while the
-- platform is away; nothing is lost.
CREATE TABLE lti_score_outbox (
    id              uuid PRIMARY KEY,
    tenant_id       text NOT NULL,
    registration_id uuid NOT NULL REFERENCES lti_registrations (id) ON DELETE CASCADE,
    attempt_id      uuid NOT NULL,
    lineitem_url    text NOT NULL,
    score           jsonb NOT NULL,
    status          text NOT NULL DEFAULT 'pending'
                    CHECK (status IN ('pending', 'sent', 'failed')),
    attempts        integer NOT NULL DEFAULT 0,
    last_error      text,
    next_attempt_at timestamptz NOT NULL DEFAULT now(),
    created_at      timestamptz NOT NULL DEFAULT now(),
    sent_at         timestamptz,
    UNIQUE (attempt_id, lineitem_url)
);
CREATE INDEX lti_score_outbox_due ON lti_score_outbox (next_attempt_at) WHERE status = 'pending';
