package projections

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/feedco/feed/internal/kafka"
)

// Metrics are the projectors' Prometheus metrics. A nil *Metrics is valid
// and records nothing.
type Metrics struct {
	messages   *prometheus.CounterVec
	duration   *prometheus.HistogramVec
	entriesVec *prometheus.CounterVec
	retries    *prometheus.CounterVec
	lag        *prometheus.GaugeVec
	poison     *prometheus.GaugeVec
	crossings  *prometheus.CounterVec
	bandReads  *prometheus.CounterVec
	lists      *prometheus.CounterVec
	written    atomic.Int64
	downs      atomic.Int64
}

// NewMetrics creates the metrics and registers them on reg (nil: not
// registered, still usable).
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		messages: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "feed_projection_messages_total",
			Help: "Messages handled per projector, event type and outcome (ok, poisoned, retry_later).",
		}, []string{"projector", "type", "outcome"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "feed_projection_handle_seconds",
			Help:    "Time to apply one message, retries included.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
		}, []string{"projector"}),
		entriesVec: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "feed_projection_entries_written_total",
			Help: "Inbox entries added by fan-out and backfill.",
		}, []string{"projector"}),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "feed_projection_retries_total",
			Help: "Handler retries after an error.",
		}, []string{"projector"}),
		lag: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "feed_projection_consumer_lag",
			Help: "Messages not yet committed by the projector's consumer group (end offset minus committed offset, summed over partitions), by projection: one series per projection whatever version its group serves.",
		}, []string{"projection"}),
		poison: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "feed_poison_messages",
			Help: "Records of the poison topic per consumer group and state (pending, replayed, discarded), refreshed with the lag.",
		}, []string{"group", "state"}),
		crossings: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "feed_projection_celebrity_crossdowns_total",
			Help: "Authors the inbox projector found out of the celebrities (below the threshold, less the band), each a backfill of their recent posts into every active follower's inbox; redeliveries included.",
		}, []string{"projector"}),
		bandReads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "feed_projection_celebrity_band_reads_total",
			Help: "Events whose author's follower count lay inside the celebrity band, so the state was read from the log (one indexed PostgreSQL read each).",
		}, []string{"projector"}),
		lists: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "feed_projection_follower_lists_total",
			Help: "Follower lists the inbox projector used for a push, by source: cache (the follower cache held it), database (read from PostgreSQL and cached), uncached (read from PostgreSQL page by page: no delivery offset, the cache off, or more followers than it keeps).",
		}, []string{"source"}),
	}
	// Exported from zero on, so that a scrape right after a start (a
	// benchmark's first, dividing CPU by entries delivered) finds it.
	m.entriesVec.WithLabelValues(NameInbox)
	for _, n := range Names() {
		m.retries.WithLabelValues(n)
	}
	for _, s := range []string{"cache", "database", "uncached"} {
		m.lists.WithLabelValues(s)
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{m.messages, m.duration, m.entriesVec, m.retries, m.lag, m.poison, m.crossings, m.bandReads, m.lists} {
			if err := reg.Register(c); err != nil {
				return nil, fmt.Errorf("register projection metrics: %w", err)
			}
		}
	}
	return m, nil
}

func (m *Metrics) outcome(projector, typ, outcome string) {
	if m != nil {
		m.messages.WithLabelValues(projector, typ, outcome).Inc()
	}
}

func (m *Metrics) observe(projector string, d time.Duration) {
	if m != nil {
		m.duration.WithLabelValues(projector).Observe(d.Seconds())
	}
}

func (m *Metrics) entries(projector string, n int) {
	if m != nil && n > 0 {
		m.entriesVec.WithLabelValues(projector).Add(float64(n))
		m.written.Add(int64(n))
	}
}

// EntriesWritten returns how many entries fan-out and backfill have added
// since the metrics were created (benchmarks and tests read it).
func (m *Metrics) EntriesWritten() int64 {
	if m == nil {
		return 0
	}
	return m.written.Load()
}

func (m *Metrics) crossedDown(projector string) {
	if m != nil {
		m.crossings.WithLabelValues(projector).Inc()
		m.downs.Add(1)
	}
}

// CrossDowns returns how many downward celebrity crossings (each a
// backfill of every active follower) the inbox projector has handled since
// the metrics were created, redeliveries included (tests read it).
func (m *Metrics) CrossDowns() int64 {
	if m == nil {
		return 0
	}
	return m.downs.Load()
}

func (m *Metrics) bandRead(projector string) {
	if m != nil {
		m.bandReads.WithLabelValues(projector).Inc()
	}
}

// followerList counts a push's follower list by where it came from.
func (m *Metrics) followerList(source string) {
	if m != nil {
		m.lists.WithLabelValues(source).Inc()
	}
}

func (m *Metrics) retried(projector string) {
	if m != nil {
		m.retries.WithLabelValues(projector).Inc()
	}
}

// setLag sets the consumer lag of projection. The series is keyed by the
// projection's name, not by its consumer group (which carries the version),
// so a rebuild's switch to a new version keeps the same series.
func (m *Metrics) setLag(projection string, lag int64) {
	if m != nil {
		m.lag.WithLabelValues(projection).Set(float64(lag))
	}
}

func (m *Metrics) setPoison(counts map[string]PoisonCounts) {
	if m == nil {
		return
	}
	for g, c := range counts {
		m.poison.WithLabelValues(g, PoisonPending).Set(float64(c.Pending))
		m.poison.WithLabelValues(g, PoisonReplayed).Set(float64(c.Replayed))
		m.poison.WithLabelValues(g, PoisonDiscarded).Set(float64(c.Discarded))
	}
}

// ConsumerLag returns, per consumer group, how many messages of topic it
// has not committed yet: the sum over partitions of the end offset minus the
// committed offset (minus the start offset when the group never committed,
// since a new group starts at the oldest offset).
func ConsumerLag(ctx context.Context, conn kafka.Conn, topic string, groups []string) (map[string]int64, error) {
	cl, err := conn.NewClient()
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	ends, err := adm.ListEndOffsets(ctx, topic)
	if err != nil {
		return nil, fmt.Errorf("list end offsets of %s: %w", topic, err)
	}
	if err := ends.Error(); err != nil {
		return nil, fmt.Errorf("list end offsets of %s: %w", topic, err)
	}
	starts, err := adm.ListStartOffsets(ctx, topic)
	if err != nil {
		return nil, fmt.Errorf("list start offsets of %s: %w", topic, err)
	}
	out := make(map[string]int64, len(groups))
	for _, g := range groups {
		committed, err := adm.FetchOffsets(ctx, g)
		if errors.Is(err, kerr.GroupIDNotFound) {
			// A group that has not committed yet (kfake says so; Kafka
			// answers with no offsets): everything retained is its lag.
			committed, err = kadm.OffsetResponses{}, nil
		}
		if err != nil {
			return nil, fmt.Errorf("fetch offsets of group %s: %w", g, err)
		}
		var lag int64
		ends.Each(func(o kadm.ListedOffset) {
			if o.Topic != topic {
				return
			}
			from := int64(0)
			if s, ok := starts.Lookup(o.Topic, o.Partition); ok {
				from = s.Offset
			}
			if c, ok := committed.Lookup(o.Topic, o.Partition); ok && c.Err == nil && c.At >= 0 {
				from = c.At
			}
			if d := o.Offset - from; d > 0 {
				lag += d
			}
		})
		out[g] = lag
	}
	return out, nil
}
