-- The celebrity band a projection version was built with (readmodel.Policy's
-- CelebrityBand), beside its threshold: an author becomes a celebrity at
-- celebrity_threshold followers and stops being one only below
-- celebrity_threshold - celebrity_band. NULL: not recorded yet (the first
-- process to start records its own). A deployment whose threshold is
-- recorded ran without a band: record 0, so it keeps its behaviour until a
-- rebuild changes it (`feed rebuild all --celebrity-band N`).
ALTER TABLE projection_versions ADD COLUMN celebrity_band bigint CHECK (celebrity_band >= 0);
UPDATE projection_versions SET celebrity_band = 0 WHERE celebrity_threshold IS NOT NULL;

-- An author's follow events in log order (readmodel.CelebrityBefore): with a
-- band, the state of an author whose count is inside it is the one their
-- newest follow event outside it decided, found by a backward scan of this
-- index from the event in question. A followee's follow events are in
-- position order as in commit order: every follow locks the followee's row
-- before it appends.
CREATE INDEX events_followee_position_idx ON events (((payload->>'followeeId')::bigint), position)
    WHERE type IN ('user.followed.v1', 'user.unfollowed.v1');
