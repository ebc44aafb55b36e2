package readmodel

import "strconv"

// Keys builds key names under a namespace prefix ("" in production by
// default; a random one in tests) and, per projection, an active version:
// version 1 keys keep their historical names (`feed:{u}`), version n > 1
// keys put `v{n}:` in front (`v2:feed:{u}`), so a rebuild writes a new
// namespace beside the live one (docs/rebuild.md). Hash tags are unchanged:
// the prefix and the version come before a key's `{...}`, so they never
// move its Redis Cluster slot, and Prefix must not hold `{` (Redis would
// hash the prefix instead).
type Keys struct {
	Prefix string
	// Versions gives each projection's version when a key is built; nil
	// means version 1 everywhere. A Versions value fixes them; a
	// *LiveVersions follows the registry (the query side).
	Versions VersionSource
}

// Pattern is the SCAN MATCH pattern of every key under k.Prefix (its glob
// characters quoted).
func (k Keys) Pattern() string { return escapeGlob(k.Prefix) + "*" }

// Version returns the version k builds the keys of projection with.
func (k Keys) Version(projection string) int {
	if k.Versions == nil {
		return 1
	}
	return max(k.Versions.Version(projection), 1)
}

// ns is the namespace of one projection's keys: the prefix, plus `v{n}:`
// from version 2 on.
func (k Keys) ns(projection string) string {
	v := k.Version(projection)
	if v == 1 {
		return k.Prefix
	}
	return k.Prefix + "v" + strconv.Itoa(v) + ":"
}

// appendNS appends projection's namespace (ns) to b.
func (k Keys) appendNS(b []byte, projection string) []byte {
	b = append(b, k.Prefix...)
	if v := k.Version(projection); v != 1 {
		b = append(b, 'v')
		b = strconv.AppendInt(b, int64(v), 10)
		b = append(b, ':')
	}
	return b
}

// tagged is ns(projection) + name + "{" + v + "}" + suffix, built in one
// allocation: the read path builds several keys per request.
func (k Keys) tagged(projection, name string, v int64, suffix string) string {
	var a [96]byte
	return string(k.appendTagged(a[:0], projection, name, v, suffix))
}

// Tagged is the key of family name (its prefix, e.g. "timeline:") for v
// in projection's namespace, with v as its hash tag: ns + name + "{" + v +
// "}" + suffix. It is how the owner of a read model outside this package
// (the home feed's, homefeed) names its keys; a family so named is
// registered with RegisterFamily for Classify.
func (k Keys) Tagged(projection, name string, v int64, suffix string) string {
	return k.tagged(projection, name, v, suffix)
}

// AppendTagged appends Tagged(projection, name, v, suffix) to b.
func (k Keys) AppendTagged(b []byte, projection, name string, v int64, suffix string) []byte {
	return k.appendTagged(b, projection, name, v, suffix)
}

// appendTagged appends tagged(projection, name, v, suffix) to b.
func (k Keys) appendTagged(b []byte, projection, name string, v int64, suffix string) []byte {
	b = k.appendNS(b, projection)
	b = append(b, name...)
	b = append(b, '{')
	b = strconv.AppendInt(b, v, 10)
	b = append(b, '}')
	return append(b, suffix...)
}

// Timeline is an author's recent posts: member post id, score created_at ms.
func (k Keys) Timeline(authorID int64) string {
	return k.tagged(ProjectionTimelines, "timeline:", authorID, "")
}

// Newest is an author's newest-post marker (Timelines.MarkNewest): the id
// of the post the API committed last, for read-your-writes until the
// timelines projector has written it. Same hash tag as the timeline.
func (k Keys) Newest(authorID int64) string {
	return k.tagged(ProjectionTimelines, "newest:", authorID, "")
}

// Post is the cached post body (JSON) used to hydrate feed pages.
func (k Keys) Post(postID int64) string { return k.tagged(ProjectionPosts, "post:", postID, "") }

// Counts is a post's counts hash: likes, reposts and replies (fields l,
// r, p) of original p, each beside its guard (lv, rv, pv), the log
// position of the event that set it (Engagement).
func (k Keys) Counts(postID int64) string { return k.tagged(ProjectionPosts, "counts:", postID, "") }

// Liked is the day bucket day (DayOf: the liked POST's creation day) of
// the set of original post ids (decimal) user likes: liked:{u}:<day>,
// the user's hash tag.
func (k Keys) Liked(userID, day int64) string {
	return k.tagged(ProjectionPosts, "liked:", userID, ":"+strconv.FormatInt(day, 10))
}

// Reposted is the day bucket day (the original's creation day) of the set
// of original post ids (decimal) user has a live repost of:
// reposted:{u}:<day>.
func (k Keys) Reposted(userID, day int64) string {
	return k.tagged(ProjectionPosts, "reposted:", userID, ":"+strconv.FormatInt(day, 10))
}

// Reposts is the sorted set of an original's live reposts: every score 0,
// member the repost id then the reposter id, each a big-endian uint64
// (RepostMember), so BYLEX order is repost-id order.
func (k Keys) Reposts(originalID int64) string {
	return k.tagged(ProjectionPosts, "reposts:", originalID, "")
}

// Name is a user's display name (a string, written once: names never
// change).
func (k Keys) Name(userID int64) string { return k.tagged(ProjectionPosts, "name:", userID, "") }

// Followers holds an account's follower count and its idempotency state.
func (k Keys) Followers(userID int64) string {
	return k.tagged(ProjectionFollowers, "followers:", userID, "")
}

// Following is the set of accounts a user follows.
func (k Keys) Following(userID int64) string {
	return k.tagged(ProjectionFollowers, "following:", userID, "")
}

// FollowingVersions is the followers projector's idempotency state for
// Following: per followee, the last applied stream version of the pair. It
// shares the user's hash tag so one script updates both atomically.
func (k Keys) FollowingVersions(userID int64) string {
	return k.tagged(ProjectionFollowers, "following_v:", userID, "")
}

// Celebrities is the set of authors at or over the celebrity threshold.
func (k Keys) Celebrities() string { return k.ns(ProjectionFollowers) + "celebrities" }

// CelebritiesOrder is the followers projector's ordering state for
// Celebrities: per author, the log place (Order) of the follow event that
// last decided its membership. Its hash tag is the whole name of the
// celebrity set (which has no tag, so Redis Cluster hashes all of it), so
// both are in one slot and one script moves them; it starts with the
// namespace like every key, so sweeps and cleanups by prefix find it.
func (k Keys) CelebritiesOrder() string {
	c := k.Celebrities()
	return c + ":order{" + c + "}"
}

// CelebritiesLeaving is the followers projector's record of downward
// celebrity crossings: per author it removed from Celebrities, the Order
// of the event that removed it (Celebrities.Leaving). Same slot as the
// set, for the same script.
func (k Keys) CelebritiesLeaving() string {
	c := k.Celebrities()
	return c + ":leaving{" + c + "}"
}

// InboxBackfilled is the inbox projector's record of the downward
// crossings it has backfilled: per author, the Order of the crossing
// whose backfill of every active follower finished (Backfilled).
func (k Keys) InboxBackfilled() string { return k.ns(ProjectionInbox) + "inbox:backfilled" }
