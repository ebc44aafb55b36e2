package queries

import (
	"fmt"
	"testing"
)

func TestAuthorPostsTimelineThenPostgres(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{})
	a, other := b.user(), b.user()
	for i := range 30 {
		k := b.post(a, base+int64(i/3))
		b.post(other, base+int64(i))
		if i%7 == 0 {
			b.exec(`UPDATE posts SET deleted = true WHERE id = $1`, k.id)
		}
	}
	read := func(limit int) []key {
		return b.readAll(func(c string) (Page, error) { return b.feed.AuthorPosts(b.ctx, a, a, c, limit) }, limit)
	}
	// No timeline at all yet (a new author the projector has not reached):
	// PostgreSQL answers.
	sameFeed(t, "no timeline", read(7), b.authorTruth(a))
	for _, bound := range []int{500, 10, 4} {
		b.projectAll(nil, nil, 0, bound)
		for _, limit := range []int{1, 4, 50} {
			sameFeed(t, fmt.Sprintf("timeline bound %d limit %d", bound, limit), read(limit), b.authorTruth(a))
		}
	}
}

func TestNewRefusesNilDepsAndBadConfig(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{})
	if _, err := New(Config{}, nil, b.rdb); err == nil {
		t.Error("nil PostgreSQL accepted")
	}
	if _, err := New(Config{}, b.db.Pool, nil); err == nil {
		t.Error("nil Redis accepted")
	}
	for _, cfg := range []Config{
		{InboxMax: -1},
		{CelebrityCacheTTL: 6e9},
		{TimelineCacheSize: 10},
	} {
		if _, err := New(cfg, b.db.Pool, b.rdb); err == nil {
			t.Errorf("config %+v accepted", cfg)
		}
	}
}
