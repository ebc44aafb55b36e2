-- Replay (`feed events`, replay/): the top-level transaction that wrote each
-- event, so the PostgreSQL source can read only events whose transaction, and
-- every older one, has finished:
--   tx_id < pg_snapshot_xmin(pg_current_snapshot())
-- Such rows can no longer be joined by an older, still running transaction,
-- which is what lets a live reader (`--follow`) page by position without
-- losing an event committed late (see docs/replay.md, "Ordering").
--
-- Safe on a table that already has rows: old rows get the constant '0'
-- (no table rewrite; "already finished"), then new rows default to the
-- writing transaction's id. The index serves the follow mode's look-up of
-- events whose transaction finished since the previous poll.
-- WARNING: CREATE INDEX here (inside the migration's transaction) blocks
-- writes to events while it builds; on a large production log build it
-- beforehand with CREATE INDEX CONCURRENTLY events_tx_id_idx ... and this
-- statement becomes a no-op.
ALTER TABLE events ADD COLUMN tx_id xid8 NOT NULL DEFAULT '0'::xid8;
ALTER TABLE events ALTER COLUMN tx_id SET DEFAULT pg_current_xact_id();
CREATE INDEX IF NOT EXISTS events_tx_id_idx ON events (tx_id);
