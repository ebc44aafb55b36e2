-- feed:no-transaction
-- (migrations.Migration.NoTx: CONCURRENTLY builds the index without
-- blocking the posts' writes; an interrupted build is dropped and redone
-- by the next `feed migrate`.)
-- The quotes of a post: the notifications' rebuild of one user
-- (readmodel.Notifications, the query side's cold path) and `feed verify`
-- find the quotes of the user's posts through it, as replies through
-- posts_reply_to_idx.
CREATE INDEX CONCURRENTLY IF NOT EXISTS posts_quote_of_idx ON posts (quote_of, created_at) WHERE quote_of IS NOT NULL;
