package events

import "time"

// CreatedAtLayout is how a post's createdAt is spelled everywhere it is a
// string (the API's JSON, the post cache in Redis, the bench's probes):
// RFC 3339 in UTC with exactly three fractional digits. Being fixed-width,
// two such strings compare like the times they spell. Format only UTC
// times with it (t.UTC().Format(CreatedAtLayout)): the zone is the literal
// "Z".
const CreatedAtLayout = "2006-01-02T15:04:05.000Z"

// FeedKey is a post's position in every feed: its created_at in epoch
// milliseconds (the Redis score of the read models), then its id, the
// tie-break inside one millisecond. Feeds show posts newest first, that is
// in descending (Ms, ID) order, and every reader, writer and checker of a
// feed orders by this key so that they agree on ties.
type FeedKey struct {
	Ms int64 // created_at, epoch milliseconds
	ID int64 // post id
}

// KeyOf returns the feed key of a post created at createdAt.
func KeyOf(createdAt time.Time, id int64) FeedKey {
	return FeedKey{Ms: createdAt.UnixMilli(), ID: id}
}

// Newer reports whether a comes before b in a feed: a is newer by
// millisecond, or in the same millisecond with a larger id.
func (a FeedKey) Newer(b FeedKey) bool {
	return a.Ms > b.Ms || a.Ms == b.Ms && a.ID > b.ID
}

// NewestFirst compares two keys in feed order for slices.SortFunc: negative
// when a comes first (is newer), positive when b does, 0 when they are the
// same post.
func NewestFirst(a, b FeedKey) int {
	switch {
	case a.Newer(b):
		return -1
	case b.Newer(a):
		return 1
	}
	return 0
}
