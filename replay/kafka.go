package replay

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/feedco/feed/events"
	"github.com/feedco/feed/internal/kafka"
)

// KafkaConfig configures the Kafka source. Zero fields take defaults.
type KafkaConfig struct {
	// Brokers are the seed brokers; required.
	Brokers []string
	// Security is how to authenticate to them (TLS, SASL).
	Security kafka.Security
	// Topic is the events topic CDC publishes to; required.
	Topic string
	// Filter selects the events.
	Filter Filter
	// Follow keeps reading new records until ctx ends; otherwise the replay
	// stops at the end offsets captured when it started.
	Follow bool
	// DedupeWindow is how many recent events are remembered to drop the
	// duplicates at-least-once delivery leaves in the topic. Default 262144.
	DedupeWindow int
	// MaxBuffered bounds the records held per partition while merging
	// partitions into commit order (memory); a full partition is paused.
	// Default 20000.
	MaxBuffered int
}

func (c KafkaConfig) withDefaults() KafkaConfig {
	c.DedupeWindow = cmp.Or(c.DedupeWindow, 1<<18)
	c.MaxBuffered = cmp.Or(c.MaxBuffered, 20000)
	return c
}

func (s *Kafka) conn() kafka.Conn {
	return kafka.Conn{Brokers: s.cfg.Brokers, Security: s.cfg.Security}
}

// Validate reports a configuration the Kafka source cannot serve.
func (c KafkaConfig) Validate() error {
	if err := c.Filter.Validate(); err != nil {
		return err
	}
	switch {
	case len(c.Brokers) == 0:
		return invalidf("no Kafka brokers")
	case c.Topic == "":
		return invalidf("no Kafka topic")
	case c.Follow && c.Filter.To.Kind != BoundNone:
		return invalidf("--to cannot be combined with --follow")
	case c.DedupeWindow < 1 || c.MaxBuffered < 1:
		return invalidf("dedupe window and buffer must be positive")
	}
	return nil
}

// Kafka replays the events topic from the beginning with a throwaway
// consumer: it reads the partitions directly (no consumer group, so nothing
// is committed and nothing is left behind on the brokers). Partitions are
// merged into commit order by (commit LSN, position); duplicates are dropped
// by position within a sliding window.
type Kafka struct {
	cfg KafkaConfig
}

// NewKafka returns the Kafka source, or an error wrapping ErrInvalid.
func NewKafka(cfg KafkaConfig) (*Kafka, error) {
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Kafka{cfg: cfg}, nil
}

// ErrNoTopic means the topic does not exist on the brokers.
var ErrNoTopic = errors.New("topic not found")

// kitem is a decoded record waiting in a partition's queue.
type kitem struct {
	env events.Envelope
	lsn uint64
}

func (a *kitem) less(b *kitem) bool {
	if a.lsn != b.lsn {
		return a.lsn < b.lsn
	}
	return a.env.Position < b.env.Position
}

// kpart is one partition's replay state.
type kpart struct {
	end    int64   // end offset captured at start
	next   int64   // next offset expected
	queue  []kitem // caught-up records (offset < end), in offset order
	live   []kitem // records at or past end, held until the merge is done
	paused bool
}

func (p *kpart) caughtUp() bool { return p.next >= p.end }

// Stream implements Source.
func (s *Kafka) Stream(ctx context.Context, emit func(*events.Envelope) error) error {
	parts, err := s.endOffsets(ctx)
	if err != nil {
		return err
	}
	offsets := map[int32]kgo.Offset{}
	for p := range parts {
		offsets[p] = kgo.NewOffset().AtStart()
	}
	cl, err := s.conn().NewClient(
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{s.cfg.Topic: offsets}),
		kgo.FetchMaxWait(200*time.Millisecond),
		kgo.FetchMaxPartitionBytes(1<<20),
	)
	if err != nil {
		return err
	}
	defer cl.Close()

	dd := newDeduper(s.cfg.DedupeWindow)
	out := func(it *kitem) error {
		if dd.seen(it.env.Position) || !s.cfg.Filter.Match(&it.env) {
			return nil
		}
		return emit(&it.env)
	}
	merging := true
	for {
		if merging {
			if err := s.merge(parts, out); err != nil {
				return err
			}
			done := true
			for _, p := range parts {
				if !p.caughtUp() || len(p.queue) > 0 {
					done = false
				}
			}
			if done {
				if !s.cfg.Follow {
					return nil
				}
				merging = false
				// What arrived past the captured ends during the merge.
				live := map[int32]*kpart{}
				var all []int32
				for id, p := range parts {
					live[id] = &kpart{queue: p.live, end: -1, next: 0}
					p.live = nil
					all = append(all, id)
				}
				cl.ResumeFetchPartitions(map[string][]int32{s.cfg.Topic: all}) // paused when full
				if err := s.merge(live, out); err != nil {
					return err
				}
				if err := emit(nil); err != nil {
					return err
				}
			}
			s.pauseFull(cl, parts)
		}
		fetches := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return err
		}
		var ferr error
		fetches.EachError(func(t string, p int32, err error) {
			if ferr == nil {
				ferr = fmt.Errorf("fetch %s[%d]: %w", t, p, err)
			}
		})
		if ferr != nil {
			return ferr
		}
		var derr error
		n := 0
		fetches.EachRecord(func(r *kgo.Record) {
			if derr != nil {
				return
			}
			it := kitem{}
			if err := json.Unmarshal(r.Value, &it.env); err != nil {
				derr = fmt.Errorf("decode record %s[%d]@%d: %w", r.Topic, r.Partition, r.Offset, err)
				return
			}
			it.lsn, _ = ParseLSN(it.env.CommitLSN)
			if !merging {
				n++
				derr = out(&it)
				return
			}
			p := parts[r.Partition]
			if p == nil {
				return
			}
			if r.Offset < p.next {
				return // fetched again after a pause
			}
			p.next = r.Offset + 1
			switch {
			case r.Offset < p.end:
				p.queue = append(p.queue, it)
			case s.cfg.Follow:
				p.live = append(p.live, it)
			}
		})
		if derr != nil {
			return derr
		}
		if !merging && n > 0 {
			if err := emit(nil); err != nil {
				return err
			}
		}
	}
}

// endOffsets captures each partition's end offset now: a replay that does
// not follow stops there. Empty partitions are caught up from the start.
func (s *Kafka) endOffsets(ctx context.Context) (map[int32]*kpart, error) {
	cl, err := s.conn().NewClient()
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	lctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	ends, err := adm.ListEndOffsets(lctx, s.cfg.Topic)
	if errors.Is(err, kerr.UnknownTopicOrPartition) {
		return nil, fmt.Errorf("kafka topic %q: %w", s.cfg.Topic, ErrNoTopic)
	}
	if err != nil {
		return nil, fmt.Errorf("list end offsets of %s: %w", s.cfg.Topic, err)
	}
	starts, err := adm.ListStartOffsets(lctx, s.cfg.Topic)
	if err != nil {
		return nil, fmt.Errorf("list start offsets of %s: %w", s.cfg.Topic, err)
	}
	parts := map[int32]*kpart{}
	var lerr error
	ends.Each(func(o kadm.ListedOffset) {
		if o.Err != nil {
			lerr = o.Err
			return
		}
		p := &kpart{end: o.Offset}
		if so, ok := starts.Lookup(o.Topic, o.Partition); ok && so.Err == nil {
			p.next = so.Offset
		}
		parts[o.Partition] = p
	})
	if errors.Is(lerr, kerr.UnknownTopicOrPartition) {
		return nil, fmt.Errorf("kafka topic %q: %w", s.cfg.Topic, ErrNoTopic)
	}
	if lerr != nil {
		return nil, fmt.Errorf("list offsets of %s: %w", s.cfg.Topic, lerr)
	}
	if len(parts) == 0 {
		return nil, fmt.Errorf("kafka topic %q: %w", s.cfg.Topic, ErrNoTopic)
	}
	return parts, nil
}

// merge emits queued records in (commit LSN, position) order for as long as
// every partition that is not caught up has a record queued: only then is
// the smallest head the smallest of all that remain.
func (s *Kafka) merge(parts map[int32]*kpart, out func(*kitem) error) error {
	for {
		var min *kpart
		for _, p := range parts {
			if len(p.queue) == 0 {
				if !p.caughtUp() {
					return nil
				}
				continue
			}
			if min == nil || p.queue[0].less(&min.queue[0]) {
				min = p
			}
		}
		if min == nil {
			return nil
		}
		if err := out(&min.queue[0]); err != nil {
			return err
		}
		min.queue[0] = kitem{}
		min.queue = min.queue[1:]
		if len(min.queue) == 0 {
			min.queue = nil // let the backing array go
		}
	}
}

// pauseFull pauses fetching of partitions that are caught up or hold
// MaxBuffered records or more, and resumes those that drained below half
// of it.
func (s *Kafka) pauseFull(cl *kgo.Client, parts map[int32]*kpart) {
	var pause, resume []int32
	for id, p := range parts {
		switch {
		case !p.paused && p.caughtUp() && !s.cfg.Follow:
			// Nothing more to read from it.
			p.paused = true
			pause = append(pause, id)
		case p.caughtUp():
			// A follower keeps fetching it: records past the end wait in
			// p.live until the merge is done.
		case !p.paused && len(p.queue) >= s.cfg.MaxBuffered:
			p.paused = true
			pause = append(pause, id)
		case p.paused && len(p.queue) <= s.cfg.MaxBuffered/2:
			p.paused = false
			resume = append(resume, id)
		}
	}
	if len(pause) > 0 {
		cl.PauseFetchPartitions(map[string][]int32{s.cfg.Topic: pause})
	}
	if len(resume) > 0 {
		cl.ResumeFetchPartitions(map[string][]int32{s.cfg.Topic: resume})
	}
}

// deduper remembers the last n positions seen (FIFO): at-least-once
// delivery repeats an event within CDC's unconfirmed window, far smaller
// than the default window.
type deduper struct {
	set  map[int64]struct{}
	ring []int64
	i    int
	full bool
}

func newDeduper(n int) *deduper {
	return &deduper{set: make(map[int64]struct{}, n), ring: make([]int64, n)}
}

// seen reports whether pos was seen within the window, and remembers it.
func (d *deduper) seen(pos int64) bool {
	if _, ok := d.set[pos]; ok {
		return true
	}
	if d.full {
		delete(d.set, d.ring[d.i])
	}
	d.ring[d.i] = pos
	d.set[pos] = struct{}{}
	d.i++
	if d.i == len(d.ring) {
		d.i, d.full = 0, true
	}
	return false
}
