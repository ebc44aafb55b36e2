package readmodel

import (
	"strconv"
	"strings"
	"sync"
)

// Projection names, as the version registry and `feed rebuild` spell them.
const (
	ProjectionInbox     = "inbox"
	ProjectionTimelines = "timelines"
	ProjectionFollowers = "followers"
	ProjectionPosts     = "posts"
	// ProjectionNotifications is in notifications.go.
)

// Projections lists every projection that owns keys.
func Projections() []string {
	return []string{ProjectionPosts, ProjectionFollowers, ProjectionTimelines, ProjectionInbox, ProjectionNotifications}
}

// VersionSource gives the version whose keys a projection's names are built
// with. Implementations must be safe for concurrent use.
type VersionSource interface {
	Version(projection string) int
}

// Versions is a fixed version per projection (0 means 1). Projectors use a
// fixed value: their keys and consumer group never change under them.
type Versions struct {
	Inbox, Timelines, Followers, Posts, Notifications int
}

// DefaultVersions is every projection at version 1, where a deployment
// starts (migration 006).
func DefaultVersions() Versions {
	return Versions{Inbox: 1, Timelines: 1, Followers: 1, Posts: 1, Notifications: 1}
}

// Version implements VersionSource.
func (v Versions) Version(projection string) int { return max(v.Get(projection), 1) }

// Get returns projection's field as it is set, 0 when unset (Version
// reads that as 1): in the Registry's Cached versions, 0 is a projection
// the Redis registry has no field for.
func (v Versions) Get(projection string) int {
	var n int
	switch projection {
	case ProjectionInbox:
		n = v.Inbox
	case ProjectionTimelines:
		n = v.Timelines
	case ProjectionFollowers:
		n = v.Followers
	case ProjectionPosts:
		n = v.Posts
	case ProjectionNotifications:
		n = v.Notifications
	}
	return n
}

// With returns v with projection set to version n.
func (v Versions) With(projection string, n int) Versions {
	switch projection {
	case ProjectionInbox:
		v.Inbox = n
	case ProjectionTimelines:
		v.Timelines = n
	case ProjectionFollowers:
		v.Followers = n
	case ProjectionPosts:
		v.Posts = n
	case ProjectionNotifications:
		v.Notifications = n
	}
	return v
}

// Fixed returns k with its versions resolved now: the same names until the
// returned value is dropped, whatever the registry does later.
func (k Keys) Fixed() Keys {
	if k.Versions == nil {
		return k
	}
	var v Versions
	for _, p := range Projections() {
		v = v.With(p, k.Version(p))
	}
	return Keys{Prefix: k.Prefix, Versions: v}
}

// VersionsKey is the registry hash: field = projection name, value = its
// active version, a cache of projection_versions in PostgreSQL (a missing
// field is restored from there, never read as 1). Not versioned itself.
func (k Keys) VersionsKey() string { return k.Prefix + "projection:versions" }

// RebuildKey is the hash a running rebuild describes itself in (for `feed
// status`); the lock itself is elsewhere (see docs/rebuild.md).
func (k Keys) RebuildKey() string { return k.Prefix + "projection:rebuild" }

// DirtyField is the registry field that says keys of projection other than
// its active version may exist (a rebuild started and has not cleaned up).
func DirtyField(projection string) string { return projection + ".dirty" }

// Classify tells which projection and version a key under k.Prefix belongs
// to; ok is false for a key that is no read model's (the registry, other
// tools' keys). It is the inverse of the builders above, so a cleanup that
// deletes by Classify never touches another version's keys: `feed:{*` and
// `v2:timeline:{*` are told apart by the leading `v{n}:`. The families of
// owners outside this package are classified by their registration
// (RegisterFamily).
func (k Keys) Classify(key string) (projection string, version int, ok bool) {
	rest, found := strings.CutPrefix(key, k.Prefix)
	if !found {
		return "", 0, false
	}
	version = 1
	if len(rest) > 2 && rest[0] == 'v' {
		if i := strings.IndexByte(rest, ':'); i > 1 {
			if n, err := strconv.Atoi(rest[1:i]); err == nil && n >= 2 && rest[1] != '0' {
				version, rest = n, rest[i+1:]
			}
		}
	}
	for _, f := range families() {
		if strings.HasPrefix(rest, f.name) && strings.HasPrefix(rest[len(f.name):], "{") {
			return f.projection, version, true
		}
	}
	switch {
	case rest == "inbox:backfilled":
		return ProjectionInbox, version, true
	case strings.HasPrefix(rest, "timeline:{"), strings.HasPrefix(rest, "newest:{"):
		return ProjectionTimelines, version, true
	case strings.HasPrefix(rest, "post:{"), strings.HasPrefix(rest, "counts:{"),
		strings.HasPrefix(rest, "liked:{"), strings.HasPrefix(rest, "reposted:{"),
		strings.HasPrefix(rest, "reposts:{"), strings.HasPrefix(rest, "name:{"):
		return ProjectionPosts, version, true
	case strings.HasPrefix(rest, "notif:{"), strings.HasPrefix(rest, "notifv:{"),
		strings.HasPrefix(rest, "notifx:{"):
		return ProjectionNotifications, version, true
	case strings.HasPrefix(rest, "followers:{"), strings.HasPrefix(rest, "following:{"),
		strings.HasPrefix(rest, "following_v:{"), rest == "celebrities",
		strings.HasPrefix(rest, "celebrities:"): // its order and leaving hashes
		return ProjectionFollowers, version, true
	}
	return "", 0, false
}

// family is a key family registered by an owner outside this package.
type family struct{ projection, name string }

var (
	familiesMu sync.Mutex
	registered []family
)

// RegisterFamily tells Classify that keys named name + "{...}" (Tagged)
// belong to projection: a read model whose owner lives outside this
// package (the home feed's inboxes, homefeed) registers its families when
// its package is initialised, so a rebuild's cleanup deletes them.
func RegisterFamily(projection, name string) {
	familiesMu.Lock()
	defer familiesMu.Unlock()
	registered = append(registered, family{projection, name})
}

func families() []family {
	familiesMu.Lock()
	defer familiesMu.Unlock()
	return registered
}
