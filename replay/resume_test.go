package replay

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/parquet-go/parquet-go"

	"github.com/feedco/feed/events"
)

// segment is one run of a resumed replay: what it printed and the tokens
// it saved, each with the output's length when it was saved.
type segment struct {
	out   bytes.Buffer
	saves []savedToken
}

type savedToken struct {
	tok Token
	at  int
}

// runSegment replays from resume (nil: from the start) with checkpoints
// every 30 ms, until the replay ends by itself (not following, or its
// limit) or, following, until stop is closed. started, when set, is
// closed at the first save (the replay is past its start horizon), and
// reached at the first save at which until(output) holds.
func runSegment(t *testing.T, b *bundle, resume *Token, follow bool, limit int64, stop <-chan struct{}, started, reached chan struct{}, until func(out []byte, saves int) bool) *segment {
	t.Helper()
	src, err := NewPG(b.db.Pool, PGConfig{Follow: follow, Resume: resume, PageSize: 7, PollInterval: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	s := &segment{}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := CopyCheckpointed(ctx, src, NewWriter(&s.out, JSONL, false), limit, Checkpoint{Every: 30 * time.Millisecond,
			Save: func(tk Token) error {
				s.saves = append(s.saves, savedToken{tok: tk, at: s.out.Len()})
				if started != nil && len(s.saves) == 1 {
					close(started)
				}
				if reached != nil && until(s.out.Bytes(), len(s.saves)) {
					close(reached)
					reached = nil
				}
				return nil
			}})
		done <- err
	}()
	if follow {
		select {
		case <-stop:
		case err := <-done:
			t.Errorf("a following segment ended by itself: %v", err)
			return s
		}
		cancel()
	}
	select {
	case err := <-done:
		if err != nil && !errors.Is(err, context.Canceled) {
			t.Fatal(err)
		}
	case <-time.After(90 * time.Second):
		t.Error("segment did not end within 90s")
	}
	return s
}

func (s *segment) final() Token { return s.saves[len(s.saves)-1].tok }

// positions lists the positions of JSON lines, in order.
func positions(t *testing.T, out []byte) []int64 {
	t.Helper()
	var ps []int64
	for _, l := range strings.Split(strings.TrimSuffix(string(out), "\n"), "\n") {
		if l == "" {
			continue
		}
		i := strings.Index(l, `"position":"`)
		if i < 0 {
			t.Fatalf("line without a position: %s", l)
		}
		rest := l[i+len(`"position":"`):]
		p, err := strconv.ParseInt(rest[:strings.IndexByte(rest, '"')], 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		ps = append(ps, p)
	}
	return ps
}

// byPosition sorts JSON lines by their position.
func byPosition(t *testing.T, out []byte) string {
	t.Helper()
	lines := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
	ps := positions(t, out)
	idx := make([]int, len(lines))
	for i := range idx {
		idx[i] = i
	}
	sort.Slice(idx, func(a, b int) bool { return ps[idx[a]] < ps[idx[b]] })
	var sb strings.Builder
	for _, i := range idx {
		sb.WriteString(lines[i] + "\n")
	}
	return sb.String()
}

// Exact resume under four concurrent writers and a transaction that
// commits late: it takes its id and its position before the writers' and
// commits only after the first run ended and saved its token. The runs:
// (1) following from the start, stopped; (2) resumed, stopped by a limit
// of one event right after the late commit, so its token is taken inside
// the late scan (LateTo set); (3) resumed and following, then "crashed":
// its output is cut back to what it had flushed at an interval
// checkpoint in its middle and that token is used, not the final one; (4) resumed to
// the end once the writers are done. The concatenated output has every
// event exactly once, and in position order it is byte for byte what one
// `feed events` over the same log prints.
func TestPGResumeExactWithLateCommits(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	q := `INSERT INTO events (event_id, stream_id, stream_version, type, payload, recorded_at)
		VALUES ($1, $2, 1, $3, $4, $5) RETURNING position`

	// (1) Following from the start, begun before the late transaction
	// (a start waits for every transaction older than it), stopped a
	// while after the writers began (the late event cannot be printed
	// then: its transaction is open).
	stop1, started1, reached1 := make(chan struct{}), make(chan struct{}), make(chan struct{})
	seg1 := make(chan *segment, 1)
	// Until the writers' first transactions (one event each, committed
	// while the late one is open) are printed.
	until := func(out []byte, _ int) bool { return bytes.Count(out, []byte("\n")) >= len(b.envs)+4 }
	go func() { seg1 <- runSegment(t, b, nil, true, 0, stop1, started1, reached1, until) }()
	select {
	case <-started1:
	case <-time.After(90 * time.Second):
		t.Fatal("run 1 did not start within 90s")
	}

	// Four writers, one to three events a transaction, until told.
	stopWriters := make(chan struct{})
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	var written [4]int
	// Each writer's first transaction takes its id, then waits for the
	// late one to insert: the late transaction has a newer id but a lower
	// position than their events, and stays open after they commit.
	ready, lateIn := make(chan struct{}, 4), make(chan struct{})
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stopWriters:
					return
				default:
				}
				err := pgx.BeginFunc(ctx, b.db.Pool, func(tx pgx.Tx) error {
					if i == 0 {
						if _, err := tx.Exec(ctx, `SELECT pg_current_xact_id()`); err != nil {
							return err
						}
						ready <- struct{}{}
						<-lateIn
					}
					for j := range 1 + i%3 {
						e := b.newEvent(t, 100+w*10000+i*3+j)
						var p int64
						if err := tx.QueryRow(ctx, q, e.EventID, e.StreamID, e.Type, string(e.Payload), e.RecordedAt).Scan(&p); err != nil {
							return err
						}
						written[w]++
					}
					time.Sleep(time.Duration(i%4) * time.Millisecond) // overlap the others
					return nil
				})
				if err != nil {
					errs <- fmt.Errorf("writer %d: %w", w, err)
					return
				}
			}
		}()
	}

	for range 4 {
		<-ready
	}
	late, err := b.db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer late.Rollback(ctx)
	eL := b.newEvent(t, 1)
	var posL int64
	if err := late.QueryRow(ctx, q, eL.EventID, eL.StreamID, eL.Type, string(eL.Payload), eL.RecordedAt).Scan(&posL); err != nil {
		t.Fatal(err)
	}
	close(lateIn)
	select {
	case <-reached1:
	case <-time.After(90 * time.Second):
		t.Fatal("run 1 did not print the writers' first events within 90s")
	}
	close(stop1)
	s1 := <-seg1
	if len(s1.saves) == 0 {
		t.Fatal("run 1 saved no token")
	}
	if slices.Contains(positions(t, s1.out.Bytes()), posL) {
		t.Fatal("the late event was printed before its commit")
	}
	if len(s1.saves) < 2 {
		t.Fatalf("run 1 saved %d tokens, want interval checkpoints too", len(s1.saves))
	}
	if err := late.Commit(ctx); err != nil {
		t.Fatal(err)
	}

	// (2) One event, from the late scan.
	t1 := s1.final()
	s2 := runSegment(t, b, &t1, false, 1, nil, nil, nil, nil)
	t2 := s2.final()
	if t2.LateTo == 0 {
		t.Fatalf("run 2 stopped by its limit outside a late scan: token %v", t2)
	}

	// (3) Following, then a crash: keep what was flushed at an interval
	// checkpoint in the middle of the run, with its token.
	stop3, reached3 := make(chan struct{}), make(chan struct{})
	seg3 := make(chan *segment, 1)
	go func() {
		seg3 <- runSegment(t, b, &t2, true, 0, stop3, nil, reached3, func(out []byte, saves int) bool {
			return saves >= 3 && bytes.Count(out, []byte("\n")) >= 20
		})
	}()
	select {
	case <-reached3:
	case <-time.After(90 * time.Second):
		t.Fatal("run 3 did not print 20 events and save 3 tokens within 90s")
	}
	close(stop3)
	s3 := <-seg3
	if len(s3.saves) < 2 {
		t.Fatalf("run 3 saved %d tokens, want an interval checkpoint before the last", len(s3.saves))
	}
	crash := s3.saves[len(s3.saves)/2]
	out3 := s3.out.Bytes()[:crash.at]

	close(stopWriters)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	// (4) To the end.
	s4 := runSegment(t, b, &crash.tok, false, 0, nil, nil, nil, nil)

	var all bytes.Buffer
	all.Write(s1.out.Bytes())
	all.Write(s2.out.Bytes())
	all.Write(out3)
	all.Write(s4.out.Bytes())

	var whole bytes.Buffer
	src, err := NewPG(b.db.Pool, PGConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Copy(ctx, src, NewWriter(&whole, JSONL, false), 0); err != nil {
		t.Fatal(err)
	}
	total := len(b.envs) + 1 + written[0] + written[1] + written[2] + written[3]
	ps := positions(t, all.Bytes())
	seen := map[int64]bool{}
	for _, p := range ps {
		if seen[p] {
			t.Fatalf("position %d printed twice", p)
		}
		seen[p] = true
	}
	if len(ps) != total || bytes.Count(whole.Bytes(), []byte("\n")) != total {
		t.Fatalf("printed %d events over the runs, one replay %d, written %d", len(ps), bytes.Count(whole.Bytes(), []byte("\n")), total)
	}
	if got := byPosition(t, all.Bytes()); got != whole.String() {
		t.Fatal("the runs, in position order, differ from one replay of the log")
	}
	// The late event came after higher positions: the case position
	// paging alone would lose.
	if slices.Index(ps, posL) < slices.Index(ps, slices.Max(positions(t, s1.out.Bytes()))) {
		t.Fatal("the late event was not printed after the first run's events")
	}
	t.Logf("%d events over four runs (%d, %d, %d of %d kept, %d); tokens %v %v %v", total,
		len(positions(t, s1.out.Bytes())), len(positions(t, s2.out.Bytes())), len(positions(t, out3)),
		len(positions(t, s3.out.Bytes())), len(positions(t, s4.out.Bytes())), t1, t2, crash.tok)
}

func TestToken(t *testing.T) {
	for _, tk := range []Token{{Covered: 12, Horizon: 900}, {Floor: 3, Covered: 12, Horizon: 900, LateTo: 950, LateAt: 7}} {
		got, err := ParseToken(tk.String() + "\n")
		if err != nil || got != tk {
			t.Errorf("ParseToken(%q) = %v, %v", tk.String(), got, err)
		}
	}
	for _, s := range []string{"", "pg1.", "pg1.1.2", "pg2.0.1.2", "pg1.0.1.x", "pg1.5.1.2", "pg1.0.5.10.9.3", "pg1.0.5.10.11.6", "pg1.-1.5.10"} {
		if _, err := ParseToken(s); !errors.Is(err, ErrInvalid) {
			t.Errorf("ParseToken(%q): %v, want ErrInvalid", s, err)
		}
	}
	if _, err := NewPG(nopQuerier{}, PGConfig{Resume: &Token{}, Filter: Filter{From: Bound{Kind: BoundPosition, Position: 3}}}); !errors.Is(err, ErrInvalid) {
		t.Errorf("--resume with --from: %v", err)
	}
}

type nopQuerier struct{ Querier }

// --format parquet writes a file the library reads back with the same
// values JSON lines print: every column, the payload's JSON text, the
// microsecond timestamps, commit_lsn null; an empty replay is a valid
// file with no rows.
func TestParquetReadsBack(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	for _, f := range []Filter{{}, {Stream: "post-0"}} {
		var pq, jl bytes.Buffer
		for _, out := range []struct {
			w *bytes.Buffer
			f Format
		}{{&pq, Parquet}, {&jl, JSONL}} {
			src, err := NewPG(b.db.Pool, PGConfig{Filter: f})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := Copy(ctx, src, NewWriter(out.w, out.f, false), 0); err != nil {
				t.Fatal(err)
			}
		}
		path := t.TempDir() + "/events.parquet"
		if err := os.WriteFile(path, pq.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		file, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		rows, err := parquet.Read[ParquetRow](file, int64(pq.Len()))
		file.Close()
		if err != nil {
			t.Fatal(err)
		}
		var back bytes.Buffer
		w := NewWriter(&back, JSONL, false)
		for _, r := range rows {
			if r.CommitLSN != nil {
				t.Fatalf("commit_lsn %q without --with-lsn", *r.CommitLSN)
			}
			e := events.Envelope{Position: r.Position, EventID: r.EventID, StreamID: r.StreamID, StreamVersion: r.StreamVersion,
				Type: r.Type, RecordedAt: time.UnixMicro(r.RecordedAt).UTC(), AudienceKey: r.AudienceKey, Payload: []byte(r.Payload),
				Metadata: events.Metadata{CorrelationID: r.CorrelationID, CausationID: r.CausationID, Actor: r.Actor}}
			if err := w.Write(&e); err != nil {
				t.Fatal(err)
			}
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		if want := map[bool]int{true: len(b.envs), false: 0}[f.Stream == ""]; len(rows) != want {
			t.Fatalf("%d rows, want %d", len(rows), want)
		}
		if back.String() != jl.String() {
			t.Fatalf("filter %+v: the Parquet rows as JSON lines differ:\n%s\nwant\n%s", f, back.String(), jl.String())
		}
		if pq.Len() == 0 {
			t.Fatalf("filter %+v: no Parquet file", f)
		}
	}
}
