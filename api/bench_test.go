package api_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/procfs"

	"github.com/feedco/feed/api"
	"github.com/feedco/feed/commands"
	"github.com/feedco/feed/internal/auth"
	"github.com/feedco/feed/internal/snowflake"
	"github.com/feedco/feed/testkit/testenv"
)

// benchClients is the number of concurrent clients of both measurements.
const benchClients = 16

// BenchmarkWrite measures command throughput: posts/s through the whole
// HTTP API (16 concurrent clients, each its own author, keep-alive
// connections), and right after it, in the same run and database, the raw
// single-row insert rate of the same PostgreSQL (16 clients, one row per
// autocommitted statement, into a scratch table shaped like events).
// Between them, direct-posts/s is CreatePost called in-process by 16
// goroutines (the write path without HTTP). Each phase does b.N operations; posts/insert is their ratio, i.e. how much of the
// database's bare insert rate the write path keeps. ns/op is suppressed (it
// would mix the two phases). cpu-µs/post is the CPU of the direct phase
// per post: this process's (go-cpu-µs/post, getrusage) plus the database's
// PostgreSQL backends' (pg-cpu-µs/post, /proc, 10 ms ticks). On a shared machine compare the ratio, not the
// absolute numbers, across runs:
//
//	go test -run '^$' -bench Write -benchtime 3s -count 5 ./api/
func BenchmarkWrite(b *testing.B) {
	ctx := context.Background()
	db := testenv.NewDB(b)
	if _, err := db.Pool.Exec(ctx, `CREATE TABLE bench_events (LIKE events INCLUDING DEFAULTS INCLUDING CONSTRAINTS INCLUDING INDEXES)`); err != nil {
		b.Fatal(err)
	}
	ids, _ := snowflake.New(5)
	cmds, err := commands.New(db.Pool, ids, commands.Config{})
	if err != nil {
		b.Fatal(err)
	}
	signer, _ := auth.NewSigner(secret)
	users, _ := auth.NewUsers(db.Pool, 0)
	srv, err := api.New(api.Config{}, api.Deps{Commands: cmds, Tokens: signer, Users: users})
	if err != nil {
		b.Fatal(err)
	}
	url := newHTTPServer(b, srv.Handler())
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: benchClients * 2, MaxConnsPerHost: benchClients * 2}}
	tokens := make([]string, benchClients)
	for i := range tokens {
		u, err := cmds.RegisterUser.Handle(ctx, commands.RegisterUser{Name: fmt.Sprintf("author%d", i)})
		if err != nil {
			b.Fatal(err)
		}
		tokens[i] = "Bearer " + signer.Sign(u.ID, time.Hour)
	}
	content := strings.Repeat("x", 100)
	body, _ := json.Marshal(map[string]string{"content": content})
	payload, _ := json.Marshal(map[string]any{"postId": "1", "authorId": "1", "content": content, "createdAt": "2026-11-30T09:41:12.345Z", "authorFollowers": 0})

	b.ResetTimer()
	posts := runClients(b, func(c int) error {
		req, _ := http.NewRequest("POST", url+"/api/posts", strings.NewReader(string(body)))
		req.Header.Set("Authorization", tokens[c])
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusCreated {
			return fmt.Errorf("status %d", resp.StatusCode)
		}
		return nil
	})
	authors := make([]int64, benchClients)
	for i, tok := range tokens {
		authors[i], _ = signer.Verify(strings.TrimPrefix(tok, "Bearer "))
	}
	cpu0 := writeCPU(b, db.Pool, nil)
	direct := runClients(b, func(c int) error {
		_, err := cmds.CreatePost.Handle(ctx, commands.CreatePost{AuthorID: authors[c], Content: content})
		return err
	})
	cpu1 := writeCPU(b, db.Pool, cpu0.backends)
	cpuPerPost := func(d time.Duration) float64 { return float64(d.Microseconds()) / float64(b.N) }
	pgCPU := cpu1.pg - cpu0.pg
	var seq atomic.Int64
	inserts := runClients(b, func(int) error {
		_, err := db.Pool.Exec(ctx, `INSERT INTO bench_events (event_id, stream_id, stream_version, type, payload, metadata) VALUES ($1, $2, 1, 'post.created.v1', $3, '{}')`,
			uuid.New(), "post-"+strconv.FormatInt(seq.Add(1), 10), payload)
		return err
	})
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(posts, "posts/s")
	b.ReportMetric(direct, "direct-posts/s")
	b.ReportMetric(inserts, "inserts/s")
	b.ReportMetric(posts/inserts, "posts/insert")
	b.ReportMetric(cpuPerPost(cpu1.self-cpu0.self), "go-cpu-µs/post")
	b.ReportMetric(cpuPerPost(pgCPU), "pg-cpu-µs/post")
	b.ReportMetric(cpuPerPost(cpu1.self-cpu0.self+pgCPU), "cpu-µs/post")
}

// writeCPUSample is the CPU used so far by this process (getrusage) and by
// the PostgreSQL backends of the benchmark's database (/proc, in 10 ms
// ticks): backends are those connected now plus those of an earlier
// sample, so that a backend that connects in between counts from zero.
type writeCPUSample struct {
	self, pg time.Duration
	backends []int
}

func writeCPU(b *testing.B, pool *pgxpool.Pool, earlier []int) writeCPUSample {
	b.Helper()
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	s := writeCPUSample{self: time.Duration(ru.Utime.Nano() + ru.Stime.Nano())}
	rows, err := pool.Query(context.Background(), `SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()`)
	if err != nil {
		b.Fatal(err)
	}
	pids, err := pgx.CollectRows(rows, pgx.RowTo[int])
	if err != nil {
		b.Fatal(err)
	}
	s.backends = append(pids, earlier...)
	if s.pg, err = processesCPU(s.backends); err != nil {
		b.Fatal(err)
	}
	return s
}

// processesCPU is the CPU time (user + system) the processes pids have
// used so far, from /proc/<pid>/stat; a pid that is gone is left out.
func processesCPU(pids []int) (time.Duration, error) {
	var total time.Duration
	for _, pid := range pids {
		p, err := procfs.NewProc(pid)
		if err != nil {
			continue
		}
		stat, err := p.Stat()
		var pe *fs.PathError
		if errors.As(err, &pe) {
			continue
		}
		if err != nil {
			return 0, fmt.Errorf("read /proc/%d/stat: %w", pid, err)
		}
		total += time.Duration(stat.CPUTime() * float64(time.Second))
	}
	return total, nil
}

// runClients runs op b.N times in total from benchClients goroutines and
// returns the operations per second.
func runClients(b *testing.B, op func(client int) error) float64 {
	b.Helper()
	var next atomic.Int64
	var wg sync.WaitGroup
	var failed atomic.Value
	start := time.Now()
	for c := range benchClients {
		wg.Go(func() {
			for next.Add(1) <= int64(b.N) {
				if err := op(c); err != nil {
					failed.CompareAndSwap(nil, err)
					return
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	if err, _ := failed.Load().(error); err != nil {
		b.Fatal(err)
	}
	return float64(b.N) / elapsed.Seconds()
}

func newHTTPServer(b *testing.B, h http.Handler) string {
	b.Helper()
	hs := httptest.NewServer(h)
	b.Cleanup(hs.Close)
	return hs.URL
}

// BenchmarkFollow measures the follow commands called in process by 16
// goroutines, each alternating Follow and Unfollow of its own pair (every
// call changes something: a row, two counts, one event), and their CPU per
// command: this process's (go-cpu-µs/op) and the database's backends'
// (pg-cpu-µs/op), as BenchmarkWrite's direct phase:
//
//	go test -run '^$' -bench Follow -benchtime 2000x -count 3 ./api/
func BenchmarkFollow(b *testing.B) {
	ctx := context.Background()
	db := testenv.NewDB(b)
	ids, _ := snowflake.New(5)
	cmds, err := commands.New(db.Pool, ids, commands.Config{})
	if err != nil {
		b.Fatal(err)
	}
	pairs := make([][2]int64, benchClients)
	for i := range pairs {
		for j := range 2 {
			u, err := cmds.RegisterUser.Handle(ctx, commands.RegisterUser{Name: fmt.Sprintf("u%d-%d", i, j)})
			if err != nil {
				b.Fatal(err)
			}
			pairs[i][j] = u.ID
		}
	}
	var following [benchClients]bool
	b.ResetTimer()
	cpu0 := writeCPU(b, db.Pool, nil)
	rate := runClients(b, func(c int) error {
		p := pairs[c]
		var changed bool
		var err error
		if following[c] {
			changed, err = cmds.Unfollow.Handle(ctx, commands.Unfollow{FollowerID: p[0], FolloweeID: p[1]})
		} else {
			changed, err = cmds.Follow.Handle(ctx, commands.Follow{FollowerID: p[0], FolloweeID: p[1]})
		}
		if err == nil && !changed {
			err = fmt.Errorf("pair %d: nothing changed", c)
		}
		following[c] = !following[c]
		return err
	})
	cpu1 := writeCPU(b, db.Pool, cpu0.backends)
	perOp := func(d time.Duration) float64 { return float64(d.Microseconds()) / float64(b.N) }
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(rate, "commands/s")
	b.ReportMetric(perOp(cpu1.self-cpu0.self), "go-cpu-µs/op")
	b.ReportMetric(perOp(cpu1.pg-cpu0.pg), "pg-cpu-µs/op")
	b.ReportMetric(perOp(cpu1.self-cpu0.self+cpu1.pg-cpu0.pg), "cpu-µs/op")
}
