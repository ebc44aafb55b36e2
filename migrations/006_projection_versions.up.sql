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
    activated_at        timestamptz NOT NULL DEFAULT now(),
    -- true for the rows below, until a switch: such a row takes, once, a
    -- later version that the Redis hash already holds (a deployment whose
    -- rebuilds ran while the hash was the only registry).
    seeded              boolean NOT NULL DEFAULT false
);

-- Every deployment starts at version 1 of every projection, seeded. The
-- first reader of the new binary (readmodel.NewLiveVersions) raises a
-- seeded row to the version the Redis hash holds when that is higher, so
-- an upgrade keeps the versions earlier rebuilds switched to (see
-- docs/rebuild.md, "Upgrading").
INSERT INTO projection_versions (projection, version, seeded) VALUES
    ('posts', 1, true), ('followers', 1, true), ('timelines', 1, true), ('inbox', 1, true);
