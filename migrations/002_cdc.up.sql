-- CDC: the publication the logical replication slot decodes, and the CDC's
-- progress row (read by `feed status`).
--
-- The publication lives in a migration, not in the CDC code: it is schema,
-- created once under the migration lock, before any slot exists (pgoutput
-- looks it up in the catalog as of each decoded transaction, so it must be
-- older than the slot), and the CDC role then needs no DDL rights.
-- Only inserts: the log is append-only.
CREATE PUBLICATION feed_events FOR TABLE events WITH (publish = 'insert');

-- One row per replication slot, upserted by the running CDC every few
-- seconds: what Kafka has acknowledged and when.
CREATE TABLE cdc_state (
    slot_name         text        PRIMARY KEY,
    confirmed_lsn     pg_lsn      NOT NULL,
    -- Events acknowledged by Kafka since the slot was created (a process
    -- that is killed loses the count of its last few seconds).
    events_published  bigint      NOT NULL DEFAULT 0,
    -- Commit time of the newest transaction whose events are all acknowledged.
    last_commit_at    timestamptz,
    updated_at        timestamptz NOT NULL DEFAULT now()
);
