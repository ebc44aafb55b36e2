-- CDC: what the progress row must hold for CDC to survive the loss of its
-- replication slot (dropped by hand, invalidated by max_slot_wal_keep_size)
-- without a gap in Kafka (cdc/heal.go; docs/cdc.md, "Slot loss").
--
-- A row in cdc_state says CDC streamed from the slot: a slot that is missing
-- while its row exists was lost, and CDC republishes from the event log
-- (or stops, FEED_CDC_ON_SLOT_LOSS=stop) instead of silently creating a new
-- slot that starts after the lost events.
ALTER TABLE cdc_state
    -- The frontier: every event with tx_id below it, committed since CDC
    -- first created the slot, is acknowledged by Kafka. CDC raises it only
    -- after the slot's confirmed position passed the WAL position read just
    -- after the snapshot whose xmin it is. NULL: not known yet.
    ADD COLUMN frontier_xid       xid8,
    ADD COLUMN frontier_at        timestamptz,
    -- Set while a heal runs: the events with tx_id at or above it are being
    -- republished. A CDC that starts and finds it set republishes again
    -- before streaming, even if the new slot already exists.
    ADD COLUMN heal_from          xid8,
    -- Slot losses healed, and what CDC did about the most recent one (also
    -- when it stopped instead), for `feed status`.
    ADD COLUMN slot_losses        bigint NOT NULL DEFAULT 0,
    ADD COLUMN last_slot_loss     text,
    ADD COLUMN last_slot_loss_at  timestamptz;
