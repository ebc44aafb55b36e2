-- Mutes and blocks (inline projections of user.muted.v1 / user.unmuted.v1
-- and user.blocked.v1 / user.unblocked.v1).
-- A mute hides the muted account's posts from the muter's home feed and
-- keeps any follow; a block removes the follows between the two (with
-- their Unfollowed events) and forbids new ones while it stands.
CREATE TABLE mutes (
    muter_id    bigint      NOT NULL REFERENCES users (id),
    muted_id    bigint      NOT NULL REFERENCES users (id),
    created_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (muter_id, muted_id),
    CHECK (muter_id <> muted_id)
);
-- The fan-out asks, per author, which followers mute them.
CREATE INDEX mutes_muted_idx ON mutes (muted_id, muter_id);

CREATE TABLE blocks (
    blocker_id  bigint      NOT NULL REFERENCES users (id),
    blocked_id  bigint      NOT NULL REFERENCES users (id),
    created_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (blocker_id, blocked_id),
    CHECK (blocker_id <> blocked_id)
);
CREATE INDEX blocks_blocked_idx ON blocks (blocked_id, blocker_id);
