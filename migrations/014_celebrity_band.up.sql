-- The celebrity band a projection version was built with (readmodel.Policy's
-- CelebrityBand), beside its threshold: an author becomes a celebrity at
-- celebrity_threshold followers and stops being one only below
-- celebrity_threshold - celebrity_band. NULL: not recorded yet (the first
-- process to start records its own). A deployment whose threshold is
-- recorded ran without a band: record 0, so it keeps its behaviour until a
-- rebuild changes it (`feed rebuild all --celebrity-band N`).
ALTER TABLE projection_versions ADD COLUMN celebrity_band bigint CHECK (celebrity_band >= 0);
UPDATE projection_versions SET celebrity_band = 0 WHERE celebrity_threshold IS NOT NULL;

-- The index of an author's follow events that came with the band is built
-- by migration 015, concurrently (deployments that applied this migration
-- before have it already).
