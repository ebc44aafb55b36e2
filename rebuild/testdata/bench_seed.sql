-- A consistent 1,000,000-event log for the rebuild benchmark
-- (docs/benchmarks.md, Rebuild): 20,000 users (user.registered), each
-- following 10 others (200,000 user.followed), 780,000 posts
-- (post.created, 39 per author), and the inline tables the write side keeps
-- in the same transactions (users, follows, posts), every user active.
-- Post ids are Snowflake ids (node 1) of their created_at millisecond.
BEGIN;
INSERT INTO users (id, name, follower_count, following_count, created_at)
SELECT u, 'user ' || u, 10, 10, now() - interval '2 hours' FROM generate_series(1, 20000) u;
INSERT INTO events (event_id, stream_id, stream_version, type, payload, metadata, recorded_at)
SELECT gen_random_uuid(), 'user-' || u, 1, 'user.registered.v1',
  jsonb_build_object('userId', u::text, 'name', 'user ' || u),
  jsonb_build_object('actor', u::text), now() - interval '2 hours'
FROM generate_series(1, 20000) u;

INSERT INTO follows (follower_id, followee_id, created_at)
SELECT u, ((u - 1 + k * 1999) % 20000) + 1, now() - interval '90 minutes'
FROM generate_series(1, 20000) u, generate_series(1, 10) k;
INSERT INTO events (event_id, stream_id, stream_version, type, payload, metadata, recorded_at)
SELECT gen_random_uuid(), 'follow-' || u || '-' || (((u - 1 + k * 1999) % 20000) + 1), 1, 'user.followed.v1',
  jsonb_build_object('followerId', u::text, 'followeeId', ((((u - 1 + k * 1999) % 20000) + 1))::text, 'followeeFollowers', 10),
  jsonb_build_object('actor', u::text), now() - interval '90 minutes'
FROM generate_series(1, 20000) u, generate_series(1, 10) k;

CREATE TEMP TABLE gen AS
SELECT g, (g % 20000) + 1 AS author,
  date_trunc('milliseconds', now() - interval '1 hour') + g * interval '1 ms' AS at
FROM generate_series(1, 780000) g;
INSERT INTO posts (id, author_id, content, created_at)
SELECT ((extract(epoch FROM at - timestamptz '2020-01-01 00:00:00+00') * 1000)::bigint << 22) | (1 << 12),
  author, 'post number ' || g || ' with some ordinary text in it', at FROM gen;
INSERT INTO events (event_id, stream_id, stream_version, type, payload, metadata, recorded_at)
SELECT gen_random_uuid(), 'post-' || id, 1, 'post.created.v1',
  jsonb_build_object('postId', id::text, 'authorId', author_id::text, 'content', content,
    'createdAt', to_char(created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'), 'authorFollowers', 10),
  jsonb_build_object('actor', author_id::text), created_at
FROM posts;
INSERT INTO user_activity (user_id, last_seen_at) SELECT u, now() FROM generate_series(1, 20000) u;
COMMIT;
VACUUM ANALYZE;
