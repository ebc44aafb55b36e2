package readmodel

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// The inbox layouts (Policy.InboxLayout): the packed strings `pfeed:{u}`
// and `pfeed:{u}+` (PackedInboxes, packed.go; the default) and the sorted
// set `feed:{u}` (Inboxes).
const (
	InboxLayoutZset   = "zset"
	InboxLayoutPacked = "packed"
)

// InboxStore is what both inbox layouts offer alike: the operations of the
// projectors' unfollow path, the query side's cold rebuild and activity
// write, and the bulk build. The hot paths (push, backfill, removal of a
// deleted post, the page read) differ in their replies and are reached
// through the concrete types (Inboxes, PackedInboxes); NewInboxStore picks
// the layout.
type InboxStore interface {
	// Layout is InboxLayoutZset or InboxLayoutPacked.
	Layout() string
	// Posts returns every post id in user's inbox, whatever the floor.
	Posts(ctx context.Context, rdb redis.Cmdable, user int64) ([]int64, error)
	// Remove removes posts from user's inbox; the floor is left alone.
	Remove(ctx context.Context, rdb redis.UniversalClient, user int64, posts []int64) error
	// Touch moves the inbox's expiry to Policy.InboxTTL from now.
	Touch(ctx context.Context, rdb redis.Cmdable, user int64) error
	// WriteRebuilt writes a cold rebuild (only adds, sets ~built, the
	// floor when cut at the bound, and the TTL).
	WriteRebuilt(ctx context.Context, rdb redis.UniversalClient, user int64, posts []Entry) error
	// InboxBuildWriter is the bulk build's writer; restore asks for the
	// fastest one the layout has (the sorted set's RESTORE of a
	// serialized listpack; the packed layout has one writer).
	InboxBuildWriter(restore bool) InboxBuildWriter
}

var (
	_ InboxStore = Inboxes{}
	_ InboxStore = PackedInboxes{}
)

// NewInboxStore returns the inbox operations of pol's layout under keys.
func NewInboxStore(keys Keys, pol Policy) InboxStore {
	pol = pol.WithDefaults()
	if pol.InboxLayout == InboxLayoutPacked {
		return NewPackedInboxes(keys, pol)
	}
	return NewInboxes(keys, pol)
}

// Layout implements InboxStore.
func (Inboxes) Layout() string { return InboxLayoutZset }

// Layout implements InboxStore.
func (PackedInboxes) Layout() string { return InboxLayoutPacked }

// InboxBuildWriter implements InboxStore.
func (m Inboxes) InboxBuildWriter(restore bool) InboxBuildWriter {
	if restore {
		return m.RestoreBuildWriter()
	}
	return m.ZaddBuildWriter()
}

// InboxBuildWriter implements InboxStore.
func (m PackedInboxes) InboxBuildWriter(bool) InboxBuildWriter { return m.BuildWriter() }

func validLayout(l string) error {
	switch l {
	case InboxLayoutZset, InboxLayoutPacked:
		return nil
	}
	return fmt.Errorf("inbox layout %q: want %q or %q", l, InboxLayoutZset, InboxLayoutPacked)
}
