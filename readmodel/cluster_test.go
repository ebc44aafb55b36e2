package readmodel

import (
	"context"
	"strconv"
	"testing"

	"github.com/feedco/feed/testkit/testenv"
)

// TestScriptKeysShareASlot asks the cluster (CLUSTER KEYSLOT) for the slot
// of every key group that one script, MULTI or multi-key command names
// together, under a prefix and at versions 1 and 3: each group is one
// slot, the slot of its account's tag, so the scripts run on Redis
// Cluster and a rebuild's `v{n}:` keys of an account stay on its node.
func TestScriptKeysShareASlot(t *testing.T) {
	t.Parallel()
	r := testenv.NewRedisCluster(t)
	ctx := context.Background()
	slot := func(k string) int64 {
		t.Helper()
		n, err := r.Client.ClusterKeySlot(ctx, k).Result()
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	for _, v := range []int{1, 3} {
		keys := Keys{Prefix: "t9:", Versions: Versions{}.With(ProjectionInbox, v).With(ProjectionFollowers, v).With(ProjectionTimelines, v)}
		if got, want := slot(keys.CelebritiesOrder()), slot(keys.Celebrities()); got != want {
			t.Errorf("v%d celebrityScript: %s is in slot %d, %s in %d", v, keys.CelebritiesOrder(), got, keys.Celebrities(), want)
		}
		for _, u := range []int64{1, 42, 7_000_000_000_000_000_123} {
			tag := slot("{" + strconv.FormatInt(u, 10) + "}")
			groups := map[string][]string{
				"followingScript, rebuiltFollowingScript": {keys.Following(u), keys.FollowingVersions(u)},
				"followerCountScript":                     {keys.Followers(u)},
				"boundedAddScript on a timeline":          {keys.Timeline(u)},
			}
			for what, ks := range groups {
				for _, k := range ks {
					if got := slot(k); got != tag {
						t.Errorf("v%d %s: %s is in slot %d, the tag {%d} in %d", v, what, k, got, u, tag)
					}
				}
			}
		}
	}
}
