-- Snowflake node ids leased by the processes that issue ids
-- (internal/snowflake, Lease): one row per node id ever leased. A live
-- process renews its row before expires_at; another process may take the
-- id only once it has expired (or was released). high_water_ms is the
-- highest millisecond (since snowflake.Epoch) the holder may have issued
-- ids in: the next holder of the node issues none at or below it, so a
-- clock that steps back across a restart cannot reissue an id.
CREATE TABLE node_leases (
    node_id       smallint PRIMARY KEY CHECK (node_id BETWEEN 0 AND 1023),
    holder        text        NOT NULL,
    expires_at    timestamptz NOT NULL,
    high_water_ms bigint      NOT NULL DEFAULT 0
);
