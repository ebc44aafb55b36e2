package readmodel

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/feedco/feed/internal/snowflake"
	"github.com/feedco/feed/testkit/testenv"
)

// BenchmarkEngagementMemory reports the Redis memory of the engagement
// read models, by MEMORY USAGE (SAMPLES 0: exact) over a few thousand
// units: bytes a like (a member of a liked:{u}:<day> bucket) in buckets
// of 300 (an intset) and 2,000 (a hash table), and in the small buckets a
// user's likes of one day's posts make (3, 10 and 30 likes, 1,000 users
// each: the key's own overhead is most of it), bytes a counts:{p} key with its three counts
// and guards, and bytes a reposts:{O} member in sets of 100 (a listpack)
// and 2,000 (a skiplist past zset-max-listpack-entries, 1,024 here),
// bytes a key's expiry adds (which MEMORY USAGE leaves out) and bytes a
// name.
// Run: go test -run '^$' -bench BenchmarkEngagementMemory -benchtime=1x ./readmodel/
func BenchmarkEngagementMemory(b *testing.B) {
	rd := testenv.NewRedis(b)
	ctx := context.Background()
	// With the horizon, as the projector writes: every key has an expiry.
	e := NewEngagement(Keys{Prefix: rd.Prefix}).WithHorizon(Horizon{H: 4 * 24 * time.Hour})
	post0 := time.Now().Add(-time.Hour).Sub(snowflake.Epoch).Milliseconds() << 22 // an hour old: inside the horizon
	usage := func(keys ...string) float64 {
		var n int64
		for _, k := range keys {
			v, err := rd.Client.MemoryUsage(ctx, k, 0).Result()
			if err != nil {
				b.Fatal(err)
			}
			n += v
		}
		return float64(n)
	}
	fill := func(fn func(redis.Pipeliner)) {
		if err := Exec(ctx, rd.Client, fn); err != nil {
			b.Fatal(err)
		}
	}
	for b.Loop() {
		likes := func(users, per int) float64 {
			var keys []string
			for u := range users {
				user := int64(1000*per + u)
				fill(func(p redis.Pipeliner) {
					for i := range per {
						e.QueueLiked(ctx, p, user, post0+int64(i)<<12+int64(u), true)
					}
				})
				keys = append(keys, e.keys.Liked(user, DayOf(post0)))
			}
			return usage(keys...) / float64(users*per)
		}
		b.ReportMetric(likes(10, 300), "B/like(intset)")
		b.ReportMetric(likes(2, 2000), "B/like(hashtable)")
		b.ReportMetric(likes(1000, 3), "B/like(bucket-of-3)")
		b.ReportMetric(likes(1000, 10), "B/like(bucket-of-10)")
		b.ReportMetric(likes(1000, 30), "B/like(bucket-of-30)")

		var counts []string
		fill(func(p redis.Pipeliner) {
			for i := range 3000 {
				post := post0 + int64(i)<<12
				e.QueueBuildCounts(ctx, p, post, Counts{Likes: 12, Reposts: 3, Replies: 5}, 4_000_000+int64(i))
				counts = append(counts, e.keys.Counts(post))
			}
		})
		b.ReportMetric(usage(counts...)/3000, "B/counts-key")
		// MEMORY USAGE leaves out a key's entry in the expires table: read
		// it off INFO's used_memory around PERSIST and PEXPIREAT of these
		// keys (the server may be shared: the median of 5 rounds).
		var per []float64
		for range 5 {
			before := usedMemory(ctx, b, rd.Client)
			fill(func(p redis.Pipeliner) {
				for _, k := range counts {
					p.Persist(ctx, k)
				}
			})
			after := usedMemory(ctx, b, rd.Client)
			fill(func(p redis.Pipeliner) {
				for _, k := range counts {
					p.PExpireAt(ctx, k, time.Now().Add(time.Hour))
				}
			})
			per = append(per, float64(before-after)/float64(len(counts)))
		}
		slices.Sort(per)
		b.ReportMetric(per[2], "B/expiry-entry")

		reposts := func(originals, per int) float64 {
			var keys []string
			for o := range originals {
				orig := post0 + int64(per*1000+o)
				fill(func(p redis.Pipeliner) {
					for i := range per {
						e.QueueAddRepost(ctx, p, orig, Repost{ID: post0 + int64(i+1)<<12, Reposter: int64(100_000 + i)})
					}
				})
				keys = append(keys, e.keys.Reposts(orig))
			}
			return usage(keys...) / float64(originals*per)
		}
		b.ReportMetric(reposts(30, 100), "B/repost(listpack)")
		b.ReportMetric(reposts(2, 2000), "B/repost(skiplist)")

		// A name: name:{u} of a 12-character name, user ids of a 300M-user
		// deployment (no expiry: names never change).
		names := NewNames(Keys{Prefix: rd.Prefix})
		var nk []string
		fill(func(p redis.Pipeliner) {
			for i := range 3000 {
				u := int64(300_000_000 + i)
				names.QueueSet(ctx, p, u, "user-"+strconv.Itoa(1_000_000+i))
				nk = append(nk, names.keys.Name(u))
			}
		})
		b.ReportMetric(usage(nk...)/3000, "B/name")
	}
}

// usedMemory is INFO memory's used_memory.
func usedMemory(ctx context.Context, b *testing.B, rdb redis.UniversalClient) int64 {
	s, err := rdb.Info(ctx, "memory").Result()
	if err != nil {
		b.Fatal(err)
	}
	for _, l := range strings.Split(s, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(l), "used_memory:"); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				b.Fatal(err)
			}
			return n
		}
	}
	b.Fatal("no used_memory in INFO memory")
	return 0
}
