package readmodel

import (
	"strconv"
	"testing"
)

// TestKeyNames pins the names the key builders make, under a prefix and at
// version 1 (historical names) and a later version (`v{n}:` in front).
func TestKeyNames(t *testing.T) {
	for _, ver := range []int{1, 3} {
		k := Keys{Prefix: "t123:", Versions: Versions{}.With(ProjectionInbox, ver).With(ProjectionFollowers, ver).With(ProjectionTimelines, ver).With(ProjectionPosts, ver)}
		ns := "t123:"
		if ver != 1 {
			ns += "v" + strconv.Itoa(ver) + ":"
		}
		for _, c := range []struct{ got, want string }{
			{k.Tagged(ProjectionInbox, "x:", 1234567890123, "+"), ns + "x:{1234567890123}+"},
			{k.Timeline(7), ns + "timeline:{7}"},
			{k.Post(99), ns + "post:{99}"},
			{k.Followers(5), ns + "followers:{5}"},
			{k.Following(5), ns + "following:{5}"},
			{k.FollowingVersions(5), ns + "following_v:{5}"},
			{k.Counts(99), ns + "counts:{99}"},
			{string(Engagement{keys: k}.AppendCountsKey([]byte("x"), 99)), "x" + ns + "counts:{99}"},
			{k.Liked(5, 20430), ns + "liked:{5}:20430"},
			{k.Reposted(5, 20430), ns + "reposted:{5}:20430"},
			{k.Reposts(99), ns + "reposts:{99}"},
			{k.Name(5), ns + "name:{5}"},
		} {
			if c.got != c.want {
				t.Errorf("version %d: key %q, want %q", ver, c.got, c.want)
			}
		}
	}
}

func BenchmarkKeys(b *testing.B) {
	k := Keys{Prefix: "bench:"}
	b.ReportAllocs()
	for b.Loop() {
		_ = k.Following(1234567890123456789)
	}
}

func TestAppendKeys(t *testing.T) {
	k := Keys{Prefix: "p:", Versions: Versions{}.With(ProjectionInbox, 2).With(ProjectionFollowers, 3).With(ProjectionTimelines, 4)}
	b := NewTimelines(k, 10).AppendKey([]byte("x"), 7)
	t0 := len(b)
	b, n := NewFollows(k).AppendFollowingKeys(b, 7)
	m := len(b)
	b = k.AppendTagged(b, ProjectionInbox, "x:", 7, "+")
	s := string(b)
	set, vers := NewFollows(k).FollowingKeys(7)
	buf := k.Tagged(ProjectionInbox, "x:", 7, "+")
	for _, c := range []struct{ got, want string }{
		{s[:t0], "xp:v4:timeline:{7}"}, {s[t0:n], set}, {s[n:m], vers}, {s[m:], buf},
	} {
		if c.got != c.want {
			t.Errorf("appended %q, want %q", c.got, c.want)
		}
	}
}
