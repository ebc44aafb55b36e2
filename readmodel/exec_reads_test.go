package readmodel

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/feedco/feed/testkit/testenv"
)

// ExecReadsVia answers a pipeline's reads as ExecReads does (values,
// missing keys and members as answers, a command's error as the error),
// from many goroutines at once through one autopipeliner, on one Redis
// and on the cluster (where a reader's keys share a hash tag).
func TestExecReadsVia(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		rd   func(testing.TB) *testenv.Redis
	}{{"single", testenv.NewRedis}, {"cluster", testenv.NewRedisCluster}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			rd := tc.rd(t)
			ctx := context.Background()
			ap, err := rd.Client.(interface {
				AsyncAutoPipeline() (*redis.AutoPipeliner, error)
			}).AsyncAutoPipeline()
			if err != nil {
				t.Fatal(err)
			}
			key := func(u int, name string) string { return fmt.Sprintf("%s{u%d}:%s", rd.Prefix, u, name) }
			const readers, reads = 48, 40
			for u := range readers {
				if err := rd.Client.Set(ctx, key(u, "s"), "value of "+strconv.Itoa(u), 0).Err(); err != nil {
					t.Fatal(err)
				}
				if err := rd.Client.ZAdd(ctx, key(u, "z"), redis.Z{Score: float64(u), Member: "m"}).Err(); err != nil {
					t.Fatal(err)
				}
			}
			type answer struct {
				s, missing, part string
				score            float64
				noMember         bool
			}
			read := func(u int, exec func(redis.Pipeliner) error) (answer, error) {
				pipe := rd.Client.Pipeline()
				s := pipe.Get(ctx, key(u, "s"))
				missing := pipe.Get(ctx, key(u, "missing"))
				part := pipe.GetRange(ctx, key(u, "s"), -3, -1)
				score := pipe.ZScore(ctx, key(u, "z"), "m")
				none := pipe.ZScore(ctx, key(u, "z"), "none")
				if err := exec(pipe); err != nil {
					return answer{}, err
				}
				a := answer{s: s.Val(), missing: missing.Val(), part: part.Val(), score: score.Val()}
				a.noMember = errors.Is(none.Err(), redis.Nil)
				if !errors.Is(missing.Err(), redis.Nil) {
					return a, fmt.Errorf("missing key: %v, not redis.Nil", missing.Err())
				}
				return a, nil
			}
			var wg sync.WaitGroup
			errs := make(chan error, readers)
			for u := range readers {
				wg.Go(func() {
					want, err := read(u, func(p redis.Pipeliner) error { return ExecReads(ctx, p) })
					if err != nil {
						errs <- fmt.Errorf("reader %d, ExecReads: %w", u, err)
						return
					}
					if want.s != "value of "+strconv.Itoa(u) || !want.noMember || want.score != float64(u) {
						errs <- fmt.Errorf("reader %d, ExecReads: %+v", u, want)
						return
					}
					for range reads {
						got, err := read(u, func(p redis.Pipeliner) error { return ExecReadsVia(ctx, ap, p) })
						if err != nil {
							errs <- fmt.Errorf("reader %d, ExecReadsVia: %w", u, err)
							return
						}
						if got != want {
							errs <- fmt.Errorf("reader %d: ExecReadsVia %+v, ExecReads %+v", u, got, want)
							return
						}
					}
				})
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Error(err)
			}

			// A command's error is the pipeline's, as with ExecReads.
			for _, exec := range []func(redis.Pipeliner) error{
				func(p redis.Pipeliner) error { return ExecReads(ctx, p) },
				func(p redis.Pipeliner) error { return ExecReadsVia(ctx, ap, p) },
			} {
				pipe := rd.Client.Pipeline()
				pipe.Get(ctx, key(0, "s"))
				pipe.ZScore(ctx, key(0, "s"), "m") // a string, not a sorted set
				if err := exec(pipe); err == nil || !strings.HasPrefix(err.Error(), "WRONGTYPE") {
					t.Errorf("a ZSCORE of a string: %v, want WRONGTYPE", err)
				}
			}
		})
	}
}
