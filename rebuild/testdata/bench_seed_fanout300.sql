-- The inline tables of a larger graph for the inbox build's memory and
-- rate (docs/benchmarks.md, Rebuild): 50,000 users, each following 300
-- others (15,000,000 follows), 1,000,000 posts (20 per author), every user
-- active. Only the tables the inbox build reads (no events: the build does
-- not read the log). Post ids are Snowflake ids (node 1) of their
-- created_at millisecond.
BEGIN;
INSERT INTO users (id, name, follower_count, following_count, created_at)
SELECT u, 'user ' || u, 300, 300, now() - interval '2 hours' FROM generate_series(1, 50000) u;
-- Offsets 163 * k (k = 1..300) are distinct and non-zero modulo 50,000.
INSERT INTO follows (follower_id, followee_id, created_at)
SELECT u, ((u - 1 + k * 163) % 50000) + 1, now() - interval '90 minutes'
FROM generate_series(1, 50000) u, generate_series(1, 300) k;
CREATE TEMP TABLE gen AS
SELECT g, (g % 50000) + 1 AS author,
  date_trunc('milliseconds', now() - interval '1 hour') + g * interval '1 ms' AS at
FROM generate_series(1, 1000000) g;
INSERT INTO posts (id, author_id, content, created_at)
SELECT ((extract(epoch FROM at - timestamptz '2020-01-01 00:00:00+00') * 1000)::bigint << 22) | (1 << 12),
  author, 'post number ' || g || ' with some ordinary text in it', at FROM gen;
INSERT INTO user_activity (user_id, last_seen_at) SELECT u, now() FROM generate_series(1, 50000) u;
COMMIT;
VACUUM ANALYZE;
