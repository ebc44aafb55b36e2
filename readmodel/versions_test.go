package readmodel

import (
	"context"
	"testing"
	"time"

	"github.com/feedco/feed/internal/testenv"
)

// TestVersionedNamesClassify checks that every builder's name, at versions
// 1, 2 and 12, classifies back to its projection and version, that hash
// tags are kept, and that version 1 names never share a prefix pattern with
// later ones (the cleanup's `feed:{*` must not match `v2:feed:{*`).
func TestVersionedNamesClassify(t *testing.T) {
	for _, prefix := range []string{"", "t9:"} {
		for _, v := range []int{1, 2, 12} {
			k := Keys{Prefix: prefix, Versions: Versions{Inbox: v, Timelines: v, Followers: v, Posts: v}}
			cases := map[string]string{
				k.Inbox(7): ProjectionInbox, k.Timeline(7): ProjectionTimelines, k.Post(7): ProjectionPosts,
				k.Followers(7): ProjectionFollowers, k.Following(7): ProjectionFollowers,
				k.FollowingVersions(7): ProjectionFollowers, k.Celebrities(): ProjectionFollowers,
			}
			for name, want := range cases {
				p, got, ok := Keys{Prefix: prefix}.Classify(name)
				if !ok || p != want || got != v {
					t.Errorf("Classify(%q) = %s, %d, %v; want %s, %d", name, p, got, ok, want, v)
				}
			}
			if v == 2 && k.Inbox(7) != prefix+"v2:feed:{7}" {
				t.Errorf("v2 inbox name %q", k.Inbox(7))
			}
		}
	}
	if got := (Keys{}).Inbox(7); got != "feed:{7}" {
		t.Errorf("version 1 inbox name changed: %q", got)
	}
	for _, k := range []string{"projection:versions", "v2:", "vx:feed:{1}", "v01:feed:{1}", "other"} {
		if p, _, ok := (Keys{}).Classify(k); ok {
			t.Errorf("Classify(%q) = %s, want not a read-model key", k, p)
		}
	}
}

// TestLiveVersionsFollowRegistry switches a version in the registry and
// waits for a LiveVersions to build the new names.
func TestLiveVersionsFollowRegistry(t *testing.T) {
	t.Parallel()
	r := testenv.NewRedis(t)
	ctx := context.Background()
	lv, err := NewLiveVersions(ctx, r.Client, r.Prefix, 50*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	k := Keys{Prefix: r.Prefix, Versions: lv}
	if got := k.Inbox(1); got != r.Prefix+"feed:{1}" {
		t.Fatalf("before the switch: %q", got)
	}
	if err := r.Client.HSet(ctx, k.VersionsKey(), ProjectionInbox, 3).Err(); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 5*time.Second, "the switch is seen", func() bool {
		return k.Inbox(1) == r.Prefix+"v3:feed:{1}"
	})
	if got := k.Post(1); got != r.Prefix+"post:{1}" {
		t.Errorf("another projection moved: %q", got)
	}
	if f := k.Fixed(); f.Version(ProjectionInbox) != 3 {
		t.Errorf("Fixed lost the version: %+v", f)
	}
}
