package readmodel

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/feedco/feed/testkit/testenv"
)

// BenchmarkEngagementMemory reports the Redis memory of the engagement
// read models, by MEMORY USAGE (SAMPLES 0: exact) over a few thousand
// units: bytes a like (a member of liked:{u}) in sets of 300 (an intset)
// and 2,000 (a hash table), bytes a counts:{p} key with its three counts
// and guards, and bytes a reposts:{O} member in sets of 100 (a listpack)
// and 2,000 (a skiplist past zset-max-listpack-entries, 1,024 here).
// Run: go test -run '^$' -bench BenchmarkEngagementMemory -benchtime=1x ./readmodel/
func BenchmarkEngagementMemory(b *testing.B) {
	rd := testenv.NewRedis(b)
	ctx := context.Background()
	e := NewEngagement(Keys{Prefix: rd.Prefix})
	const post0 = int64(917297691300466688) // Snowflake ids of this year
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
						e.QueueLiked(ctx, p, user, post0+int64(i)<<22+int64(u), true)
					}
				})
				keys = append(keys, e.keys.Liked(user))
			}
			return usage(keys...) / float64(users*per)
		}
		b.ReportMetric(likes(10, 300), "B/like(intset)")
		b.ReportMetric(likes(2, 2000), "B/like(hashtable)")

		var counts []string
		fill(func(p redis.Pipeliner) {
			for i := range 3000 {
				post := post0 + int64(i)<<22
				e.QueueBuildCounts(ctx, p, post, Counts{Likes: 12, Reposts: 3, Replies: 5}, 4_000_000+int64(i))
				counts = append(counts, e.keys.Counts(post))
			}
		})
		b.ReportMetric(usage(counts...)/3000, "B/counts-key")

		reposts := func(originals, per int) float64 {
			var keys []string
			for o := range originals {
				orig := post0 + int64(per*1000+o)
				fill(func(p redis.Pipeliner) {
					for i := range per {
						e.QueueAddRepost(ctx, p, orig, Repost{ID: post0 + int64(i+1)<<22, Reposter: int64(100_000 + i)})
					}
				})
				keys = append(keys, e.keys.Reposts(orig))
			}
			return usage(keys...) / float64(originals*per)
		}
		b.ReportMetric(reposts(30, 100), "B/repost(listpack)")
		b.ReportMetric(reposts(2, 2000), "B/repost(skiplist)")
	}
}
