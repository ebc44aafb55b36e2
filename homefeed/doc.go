// Package homefeed owns the home feed: the one place that decides what a
// reader's inbox holds and the one place that writes it. The inbox
// projector (events), the query side (reads, cold rebuilds, activity) and
// `feed rebuild inbox` (the bulk build) call it; it calls none of them.
// To see why a post is (not) in a feed, read this package.
//
// # The rules (Manager, manager.go)
//
//   - Push: a post is pushed iff its author is not a celebrity at the
//     post's event (CelebrityAt: the follower count the event carries,
//     inside the celebrity band the log), to the author's followers who
//     read within InactiveAfter and do not mute the author
//     (EachFollowerPage). A celebrity's posts are pulled at read time.
//   - A follow (and an unmute of a followed account) copies the followee's
//     newest BackfillPosts posts from PostgreSQL (Followed), raising the
//     floor when the followee has more; a downward celebrity crossing
//     (CrossedDown) does the same for every active follower and records
//     it (CrossDown).
//   - An unfollow removes the author's posts unless a newer follow undid
//     it (Unfollowed); a mute removes them (RemoveAuthor); a deletion is
//     reclaimed from every follower's inbox (RemoveDeleted).
//   - A read that finds an inbox not built has it rebuilt from PostgreSQL
//     (RebuildUser: the reader marked active first); a read marks its
//     reader active and moves the inbox's expiry (MarkActive).
//   - `feed rebuild inbox` builds every live inbox from one snapshot
//     (Build, build.go).
//
// # The layout (Inboxes, inbox.go and carry.go)
//
// An inbox is two strings of one hash-tag slot: `pfeed:{u}`, the sealed
// 8-byte post ids oldest first with an 8-byte header (~built, ~floor), and
// `pfeed:{u}+`, the buffer pushes APPEND to, merged into the sealed string
// every MergeAt ids by a script that sorts, deduplicates, drops what lies
// at or below the floor and trims by the policy's bound rule. A page from
// a cursor, or after one (the query side's refresh walks down to it), is
// one read of the sealed string and the buffer (QueueRead). No other
// package spells these keys or knows this layout (testkit/archtest); the
// sorted-set inboxes of earlier releases (`feed:{u}`) are refused at start
// (CheckVersion) until `feed rebuild inbox` moves a deployment, and
// classified as the inbox projection's so the rebuild's cleanup deletes
// them.
package homefeed
