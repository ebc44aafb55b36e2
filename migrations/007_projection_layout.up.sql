-- The inbox layout a projection version was built in (readmodel.Policy's
-- InboxLayout: zset or packed), beside its fan-out policy: a projector
-- started with another layout refuses to run (readmodel.CheckPolicy).
-- NULL: not recorded yet (the first projector to start records its own).
ALTER TABLE projection_versions ADD COLUMN inbox_layout text;
