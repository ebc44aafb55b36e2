-- The inbox projector loads a post's followers with an index-only scan of
-- follows (followee_id, follower_id): it reads the heap only for the
-- followers on pages whose all-visible bit is clear, and every follow and
-- unfollow clears its page's bit until a vacuum sets it again. At the
-- default thresholds (20% of the table changed) autovacuum would come
-- once in hundreds of thousands of changes, and by then most pages of a
-- table of random edges are clear: a 345-follower list took 282 heap
-- fetches and 5-6x the time (docs/bench.md, Vacuum). Vacuum it
-- after 0.1% of its rows changed (about 16% of its pages at 160 edges a
-- page); each such vacuum visits only the pages changed since the last,
-- and skips the index pass while few pages hold dead rows. ALTER TABLE
-- SET takes a SHARE UPDATE EXCLUSIVE lock: reads and writes go on.
ALTER TABLE follows SET (
  autovacuum_vacuum_scale_factor = 0.001,
  autovacuum_vacuum_threshold = 1000,
  autovacuum_vacuum_insert_scale_factor = 0.001,
  autovacuum_vacuum_insert_threshold = 1000
);
