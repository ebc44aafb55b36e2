-- Packed inboxes became the default layout of a fresh deployment
-- (readmodel.Policy.InboxLayout). A deployment that has already run, with
-- its inbox version's layout not recorded yet, was built in the sorted
-- set, the default of its time: record that, so it stays on it until a
-- rebuild moves it (`feed rebuild inbox --inbox-layout packed`). A fresh
-- database (no event, no recorded policy, version 1) keeps NULL, and its
-- first process records its own layout.
UPDATE projection_versions SET inbox_layout = 'zset'
WHERE projection = 'inbox' AND inbox_layout IS NULL
  AND (celebrity_threshold IS NOT NULL OR version > 1 OR EXISTS (SELECT 1 FROM events));
