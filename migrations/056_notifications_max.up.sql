-- The notifications bound a projection version was built with
-- (readmodel.Policy's NotificationsMax, FEED_NOTIFICATIONS_MAX), kept on
-- the notifications row. NULL: not recorded yet (the first process to
-- start records its own; before this column every deployment ran with
-- 120, the default).
ALTER TABLE projection_versions ADD COLUMN notifications_max integer CHECK (notifications_max >= 1);
