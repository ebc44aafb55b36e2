-- The notifications projection (docs/projections.md, "Notifications")
-- starts at version 1 like the others (006), not seeded: no registry of
-- before PostgreSQL held the versions can know it; and read markers
-- (docs/api.md, "Markers"): per user the last item read in the home feed
-- and in the notifications, each kept with its order key so that a marker
-- only moves forward (GREATEST on the key). A home marker is a feed cursor
-- (its millisecond and post id); a notifications marker is a notification
-- id (its millisecond and member bytes).
INSERT INTO projection_versions (projection, version, seeded) VALUES ('notifications', 1, false)
    ON CONFLICT (projection) DO NOTHING;

CREATE TABLE markers (
    user_id       bigint PRIMARY KEY REFERENCES users (id),
    home_ms       bigint,
    home_id       bigint,
    home          text,
    notif_ms      bigint,
    notif_key     bytea,
    notifications text,
    updated_at    timestamptz NOT NULL DEFAULT now()
);
