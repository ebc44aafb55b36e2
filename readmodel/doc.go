// Package readmodel owns the Redis read models but the inboxes: every key
// name, Lua script, sentinel, TTL, trim and bound rule of the author
// timelines, the follower sets and counts, the celebrity set, the post
// cache, the projection version registry and the rebuild status key, and
// the feed policy, the namespaces and versions every read model's keys
// live in. The projectors that write them, the query side that reads them
// and `feed rebuild` call its operations, so they agree, and a change of a
// read model's Redis layout touches this package only. The home feed's
// inboxes are owned by package homefeed, which names its keys through
// Keys.Tagged and registers them for Classify (RegisterFamily).
//
// Operations that share a round trip with others are queued on the
// caller's pipeline (QueueX methods taking a redis.Pipeliner); pipelines
// that may hold a script by SHA run with Exec, which loads the scripts on
// NOSCRIPT. The feed Policy (policy.go) is the one set of rules (celebrity
// threshold, inbox bound and trim band, inactivity window, inbox TTL) the writers and readers share; cmd/feed builds it once and
// resolves it against the active versions' record (ResolvePolicy).
//
// # Keys
//
// Every key starts with a namespace prefix (Keys.Prefix: "" in production,
// a random one in tests) and, from projection version 2 on, `v{n}:` (a
// blue/green rebuild writes a new version beside the live one; Keys,
// Versions, Classify in keys.go and versions.go; the active versions are
// PostgreSQL's, version_store.go, followed by LiveVersions in
// live_versions.go). `{...}` is
// a Redis Cluster hash tag: the keys of one account share a slot, and
// every script touches one slot. Members of timeline sorted sets are
// decimal post ids scored by created_at in epoch milliseconds; inboxes
// hold 8-byte post ids.
//
//	key pattern         | type   | hash tag | file           | writers                                                                                                 | readers                                                                                      | markers and TTL
//	--------------------+--------+----------+----------------+---------------------------------------------------------------------------------------------------------+----------------------------------------------------------------------------------------------+-------------------------------------------------------------
//	pfeed:{u}           | string | {u}      | homefeed       | homefeed.Manager only, called by projections.Inbox (Push, Followed, CrossDown, Unfollowed,              | queries (home read: homefeed.Inboxes.QueueRead); homefeed.Manager.RemoveAuthor               | sealed ids + 8-byte header (~built, ~floor); pfeed:{u}+ the
//	and pfeed:{u}+      |        |          | (owner)        | RemoveAuthor, RemoveDeleted), `feed rebuild inbox` (Build) and queries (RebuildUser, MarkActive)        |                                                                                              | push buffer, merged every homefeed.MergeAt. TTL Policy.InboxTTL
//	timeline:{a}        | zset   | {a}      | timeline.go,   | projections.Timelines (Add, Remove); projections BuildTimelines (QueueBuilt);                         | queries (home read of the caller's own timeline: QueueRead; celebrity timelines and author  | ~built: only from a build (BuildTimelines, WriteRebuilt), else
//	                    |        |          | build.go       | queries (rebuild: WriteRebuilt)                                                                         | pages: QueueRange)                                                                           | not known; ~floor when cut at TimelineMax. No TTL
//	newest:{a}          | string | {a}      | timeline.go    | queries.PostCreated (MarkNewest: the API's mark of a post it committed); projections.Timelines (Add)    | queries (home read of the caller's own: QueueNewest)                                        | the author's newest post id, read-your-writes. TTL NewestTTL
//	post:{p}            | string | {p}      | posts.go       | projections.Posts (Create: SET NX; Edit: newer version only; Set: tombstone); BuildPosts (QueueSet);   | queries (hydration: QueueGet, MGET on one node, GETs on a cluster)                           | JSON Post; a tombstone (deleted, no content) is final. PXAT ms + H
//	                    |        |          |                | queries.PostEdited (QueueEdit)                                                                          |                                                                                              |
//	counts:{p}          | hash   | {p}      | engagement.go  | projections.Posts (QueueSetCount: countsScript, a count only above its guard); BuildPosts (QueueBuildCounts) | queries (hydration: QueueCounts, one HMGET an item)                                          | fields l, r, p and their guards lv, rv, pv (log positions);
//	                    |        |          |                |                                                                                                          |                                                                                              | absent is zero. PEXPIREAT ms + H (Horizon)
//	liked:{u}:<day>     | set    | {u}      | engagement.go  | projections.Posts (QueueLiked, QueueReposted: SADD, SREM); BuildPosts (QueueBuildViewerState)            | queries (QueueViewerState: two SMISMEMBER a day of the page's items)                         | original post ids of one creation day (DayOf). Expires at
//	and reposted:{u}:<d>|        |          |                |                                                                                                          |                                                                                              | the day's end + H
//	reposts:{O}         | zset   | {O}      | engagement.go  | projections.Posts (QueueAddRepost: addRepostScript, QueueRemoveRepost); BuildPosts (QueueBuildRepost)   | queries (QueueRepostsPage, EarlierReposts: ZRANGE BYLEX paged)                               | scores 0, members RepostMember (16 bytes); Repost{0,0} marks a
//	                    |        |          |                |                                                                                                          |                                                                                              | set maybe incomplete. Expires at its newest repost's ms + H
//	name:{u}            | string | {u}      | engagement.go  | projections.Posts (Names.QueueSet: SET NX on user.registered); BuildPosts                               | queries (QueueNames)                                                                         | immutable. No TTL
//	followers:{a}       | hash   | {a}      | followers.go   | projections.Followers.ApplyBatch (QueueApply: followerCountScript); BuildFollowers                     | none on the read path (counts come with the events); CountOf                                 | fields count (the newest applied event's) and pos (its log
//	                    |        |          |                | (QueueBuildFollowers)                                                                                    |                                                                                              | position); ~built from the bulk build only. No TTL
//	following:{u}       | set    | {u}      | followers.go   | projections.Followers.ApplyBatch (QueueApply: followingScript); BuildFollowers (QueueBuildFollowing)    | queries (home read: QueueFollows; hydration: QueueFollows,                                  | complete only when following_v:{u} has ~built. No TTL
//	                    |        |          |                |                                                                                                          | FollowsEach)                                                                                 |
//	following_v:{u}     | hash   | {u}      | followers.go   | as following:{u}, in the same script; queries (rebuild: WriteRebuiltFollowing)                          | queries (QueueFollowingBuilt: it outlives an emptied following set)                         | per followee the last applied pair version unless the set implies
//	                    |        |          |                |                                                                                                          |                                                                                              | it (ImpliedFollowVersion); ~built from a build
//	                    |        |          |                |                                                                                                          |                                                                                              | (BuildFollowers, WriteRebuiltFollowing), else not known. No TTL
//	celebrities         | set    | none     | celebrities.go | projections.Followers.ApplyBatch (QueueSet, by Policy.Decided); BuildFollowers (QueueAdd,              | queries (celebrity cache: Members)                                                           | member ~built from a build, else not known (rebuilt from
//	                    |        |          |                | QueueBuilt); queries (rebuild: WriteRebuilt)                                                             |                                                                                              | LoadCelebrities). No TTL
//	notif:{u}           | zset   | {u}      | notifications  | projections.Notifications (Add, Remove: notifScript, with notifv:{u}); BuildNotifications                | queries (GET /api/notifications: QueueRange; cold: Complete); verify (All)                   | member type+actor+post (Member), score the act's ms; the floor
//	and notifv:{u}      | hash   |          | .go            | (WriteRebuilt)                                                                                           |                                                                                              | sentinel "\x00"; bound NotificationsMax; notifv: pair versions
//	                    |        |          |                |                                                                                                          |                                                                                              | of undone pairs, TTL one day from its last write
//	                    |        |          |                |                                                                                                          |                                                                                              | notif: only the horizon (WithHorizon), PEXPIREAT its newest
//	                    |        |          |                |                                                                                                          |                                                                                              | entry's ms + H; below the floor: PostgreSQL
//	notifx:{u}          | stream | {u}      | notification_  | projections.Notifications (Remove: notifScript appends what an undo removed, in the same step)          | live notifications streams (RemovalsAfter, LastRemoval)                                      | fields m (member), s (score); trimmed to RemovalsKept (15 min),
//	                    |        |          | removals.go    |                                                                                                          |                                                                                              | the key expires RemovalsKept after its last removal
//	projection:versions | hash   | none     | registry.go,   | rebuild (Registry.MarkDirty, Activate, ClearDirty); LiveVersions (restore from PostgreSQL)               | projections.Supervisor, queries and rebuild (LiveVersions); rebuild (Registry.Dirty,        | field {projection}: active version, a cache of PostgreSQL's
//	                    |        |          | live_versions  |                                                                                                          | DirtyAll); `feed status` (Registry.Cached)                                                   | projection_versions (version_store.go), restored from it,
//	                    |        |          | .go            |                                                                                                          |                                                                                              | never read as 1; {projection}.dirty while other versions'
//	                    |        |          |                |                                                                                                          |                                                                                              | keys may exist. Not versioned. No TTL
//	projection:rebuild  | hash   | none     | registry.go    | rebuild (Registry.SetRebuildInfo, ClearRebuildInfo)                                                      | rebuild (Registry.RebuildInfo: `feed status`, a busy rebuild's error)                        | projection, version, phase, started, updated; the build's stage, unit, done and total (every second), the catch-up's lag. Not versioned
//
// following:{u} holds the accounts u follows and does not mute;
// following_v:{u} keeps, beside the follow pairs' versions the set does
// not imply, each mute pair's under the field "m:{a}" (MuteField), and
// followingScript (QueueApply, QueueApplyMute) sets a member from both
// (followers.go). Beside them, each block pair's version under "b:{a}"
// (u blocks a) and "x:{a}" (a blocks u), which the query side reads with
// the mutes in one HMGET (QueueRelations, relations.go).
//
// # Redis Cluster
//
// The hash tag of each family is chosen on purpose (docs/architecture.md,
// "Redis Cluster: hash tags per key family"): the reader for inboxes
// (pfeed:{u} and its buffer pfeed:{u}+, which homefeed's merge script
// names together), the author for timelines, the followee for
// followers:{a}, the follower for following:{u} and following_v:{u}
// (followingScript and rebuiltFollowingScript name both), the post for
// post:{p} (bodies spread evenly; read with one GET each on a cluster), none
// for the single keys celebrities, projection:versions and
// projection:rebuild. Every script and MULTI names keys of one slot; a
// follow event is two scripts (QueueApply), one per account, each guarded
// (the count by the followee's newest applied position, the set by the
// pair's version). The namespace prefix and `v{n}:` precede the tag,
// so they never move a key's slot. Pipelines may span slots (the cluster
// client splits them per node); SCANs go to every master (eachNode in
// cluster.go: Registry.Sweep, CountKeys). TestScriptKeysShareASlot checks
// the groups on a cluster.
//
// # Complete or recognisably not
//
// Every read model here is a cache of the log, and Redis may lose any key
// (a restart without persistence, a FLUSHDB, an eviction). So each one is
// either complete or recognisably not: inboxes, timelines, following
// states, follower hashes and the celebrity set are complete only with
// ~built, and only a build from the log writes it (the bulk builds of
// `feed rebuild`, or the query side's rebuild of one key from PostgreSQL).
// The projectors apply their events to a key with or without it, so a key
// recreated after a loss by the next event holds that event alone and
// reads as not known; the query side then serves the read from PostgreSQL
// and rebuilds the key. Each rebuild only adds, guarded like the events
// (versions for the follow graph), so it is right whatever the projectors
// apply meanwhile. Post bodies are a plain cache (a miss reads
// PostgreSQL), and the version registry is a cache of PostgreSQL's table.
//
// # Sentinels
//
// Members starting with `~` are sentinels (SentinelBuilt, SentinelFloor;
// IsSentinel), skipped by every reader; the scripts spell them from the
// Go constants. `~floor` only grows: trims raise it to the highest score
// they cut, a follow backfill that copies only the followee's newest posts
// raises it to the oldest one copied. Entries at or below it may be
// present for a while (late plain pushes) and are ignored by readers;
// removals (unfollow, deletions) leave it alone.
//
// # The inboxes
//
// Package homefeed owns them (`pfeed:{u}`, a string of 8-byte post ids
// with an 8-byte header for ~built and ~floor, and `pfeed:{u}+`, the
// append buffer of pushes): their keys, scripts and every rule of what an
// inbox holds. It uses this package's Keys (Tagged), Policy, sentinels
// and versions; this package does not import it.
//
// # The policy of a version
//
// InboxMax and the celebrity threshold belong to the active
// inbox version (the threshold to the followers version too): they are
// recorded in projection_versions (ActivateVersion at a switch,
// ResolvePolicy at a fresh deployment's first start) and every writer
// and reader uses the record (VersionRecord.Apply): the projectors'
// supervisor per version it runs, the query side per read
// (LiveVersions.Active gives a version and its record together), and a
// process's start by ResolvePolicy, the one rule that adopts the record
// for an unset variable and refuses a different explicit one.
package readmodel
