-- feed:no-transaction
-- (migrations.Migration.NoTx: CONCURRENTLY builds the index without
-- blocking the log's appends, which a plain CREATE INDEX on events would do
-- for as long as the build takes; an interrupted build is dropped and
-- redone by the next `feed migrate`.)
-- An author's follow events in log order (readmodel.CelebrityBefore): with a
-- band, the state of an author whose count is inside it is the one their
-- newest follow event outside it decided, found by a backward scan of this
-- index from the event in question. A followee's follow events are in
-- position order as in commit order: every follow locks the followee's row
-- before it appends.
CREATE INDEX CONCURRENTLY IF NOT EXISTS events_followee_position_idx ON events (((payload->>'followeeId')::bigint), position)
    WHERE type IN ('user.followed.v1', 'user.unfollowed.v1');
