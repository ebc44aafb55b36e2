-- Replies, quotes, media, reposts and likes (post.created.v2,
-- post.reposted.v1 / post.unreposted.v1, post.liked.v1 / post.unliked.v1).
-- A reply names its parent, the parent's author and its thread's root; a
-- quote the quoted post and its author; media is the post's attachments
-- as the event carries them. The counts are kept in the transactions that
-- change them: live replies (a deleted reply no longer counts), reposts
-- and likes. Nullable columns and columns with a constant default rewrite
-- no rows.
ALTER TABLE posts
    ADD COLUMN reply_to        bigint REFERENCES posts (id),
    ADD COLUMN reply_root      bigint,
    ADD COLUMN reply_to_author bigint,
    ADD COLUMN quote_of        bigint REFERENCES posts (id),
    ADD COLUMN quote_author    bigint,
    ADD COLUMN media           jsonb,
    ADD COLUMN reply_count     bigint NOT NULL DEFAULT 0,
    ADD COLUMN repost_count    bigint NOT NULL DEFAULT 0,
    ADD COLUMN like_count      bigint NOT NULL DEFAULT 0;

-- A post's replies, oldest first.
CREATE INDEX posts_reply_to_idx ON posts (reply_to, created_at, id) WHERE reply_to IS NOT NULL;

-- One live repost per (reposter, original); undoing it deletes the row, a
-- new repost gets a new id. id is the repost's Snowflake id (its feed
-- entry's id), created_at its millisecond.
CREATE TABLE reposts (
    id          bigint      PRIMARY KEY,
    user_id     bigint      NOT NULL REFERENCES users (id),
    post_id     bigint      NOT NULL REFERENCES posts (id),
    created_at  timestamptz NOT NULL,
    UNIQUE (user_id, post_id)
);
-- Who reposted a post; a reposter's reposts, newest first.
CREATE INDEX reposts_post_idx ON reposts (post_id, user_id);
CREATE INDEX reposts_user_time_idx ON reposts (user_id, created_at DESC, id DESC);

-- One like per (liker, post); unliking deletes the row.
CREATE TABLE likes (
    user_id     bigint      NOT NULL REFERENCES users (id),
    post_id     bigint      NOT NULL REFERENCES posts (id),
    created_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (user_id, post_id)
);
-- Who liked a post.
CREATE INDEX likes_post_idx ON likes (post_id, user_id);
