-- The active version of each Redis projection (readmodel/version_store.go;
-- docs/rebuild.md, "Versions"): which key namespace and consumer group it
-- uses after `feed rebuild` switched it blue/green. This table is the truth;
-- the Redis hash projection:versions is a cache of it that readers restore
-- from here when Redis lost or disagrees with it.
CREATE TABLE projection_versions (
    projection          text PRIMARY KEY,
    version             int NOT NULL CHECK (version >= 1),
    -- The fan-out policy the version was built with (`feed rebuild`
    -- records it at the switch). NULL: not recorded (version 1 below).
    celebrity_threshold bigint,
    inbox_max           int,
    activated_at        timestamptz NOT NULL DEFAULT now()
);

-- Every deployment starts at version 1 of every projection. A database
-- whose Redis already holds later versions (a rebuild ran before this
-- table existed) must have its rows raised by hand to the hash's values
-- before any projector or query process starts on the new binary: see
-- docs/rebuild.md, "Upgrading".
INSERT INTO projection_versions (projection, version) VALUES
    ('posts', 1), ('followers', 1), ('timelines', 1), ('inbox', 1);
