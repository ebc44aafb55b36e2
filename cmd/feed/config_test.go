package main

import (
	"testing"

	"github.com/feedco/feed/projections"
)

// FEED_FOLLOWER_CACHE_ROWS reaches the inbox projector's follower cache:
// unset is the default bound, 0 or less turns the cache off, a bad
// number is refused.
func TestFollowerCacheRowsEnv(t *testing.T) {
	for _, tc := range []struct {
		env  string
		want int
	}{
		{"", projections.DefaultConfig().FollowerCacheRows},
		{"16000000", 16_000_000},
		{"0", -1},
		{"-5", -1},
	} {
		t.Setenv("FEED_FOLLOWER_CACHE_ROWS", tc.env)
		c, err := LoadConfig()
		if err != nil {
			t.Fatalf("FEED_FOLLOWER_CACHE_ROWS=%q: %v", tc.env, err)
		}
		if got := projectionConfig(c).FollowerCacheRows; got != tc.want {
			t.Fatalf("FEED_FOLLOWER_CACHE_ROWS=%q: FollowerCacheRows %d, want %d", tc.env, got, tc.want)
		}
	}
	t.Setenv("FEED_FOLLOWER_CACHE_ROWS", "many")
	if _, err := LoadConfig(); err == nil {
		t.Fatal("FEED_FOLLOWER_CACHE_ROWS=many accepted")
	}
}
