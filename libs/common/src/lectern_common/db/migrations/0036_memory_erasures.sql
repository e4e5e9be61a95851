-- The memory service's own record of the users it erased (issue 61: each service owns its
-- data). `erased_users` stays the gateway's (it answers a repeated DELETE with the same
-- erasure); memory had written and read it too, to drop an event about a user that occurred
-- before the erasure and arrives later. Memory now keeps that record here, written when it
-- handles `users.erased`; the rows it relied on so far are copied.
CREATE TABLE memory_erasures (
    tenant_id  text NOT NULL,
    user_key   text NOT NULL,
    erased_at  timestamptz NOT NULL,
    event_id   uuid NOT NULL,
    PRIMARY KEY (tenant_id, user_key)
);

INSERT INTO memory_erasures (tenant_id, user_key, erased_at, event_id)
SELECT tenant_id, user_key, erased_at, event_id FROM erased_users;
