-- Post edits (post.edited.v1). version is the post stream's version its
-- row reflects: 1 as created, one more per edit; the next event of the
-- post (an edit or the deletion) is appended at version + 1. edited_at is
-- the last edit's time, null for a post never edited. A deleted post's
-- row keeps the version of its last content (nothing is appended after a
-- deletion). Adding a column with a constant default rewrites no rows.
ALTER TABLE posts
    ADD COLUMN version   bigint      NOT NULL DEFAULT 1,
    ADD COLUMN edited_at timestamptz;
