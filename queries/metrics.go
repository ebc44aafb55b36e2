package queries

import (
	"fmt"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics counts what the read path did, so a dashboard shows how often a
// page needed PostgreSQL and whether the in-process caches work. Per-route
// latency histograms belong to the api.
type Metrics struct {
	// CacheLookups counts in-process cache lookups by cache
	// ("celebrities", "timeline") and result ("hit", "miss").
	CacheLookups *prometheus.CounterVec
	// Sources counts, per query ("home", "author", and their refreshes
	// "home_after", "author_after"), the pages that used each
	// source: "redis" (read models), "pg" (continued from PostgreSQL below a
	// ~floor; on a refresh: more posts above the cursor than it walks in
	// Redis, the page read upwards from PostgreSQL), "cold" (inbox without
	// ~built: served from PostgreSQL),
	// "degraded" (Redis unavailable: the whole page from PostgreSQL) and
	// "refused" (Redis unavailable and the fallback at capacity: 503).
	Sources *prometheus.CounterVec
	// Hydrations counts posts hydrated from the in-process body cache
	// ("process"), the Redis post cache ("redis", including confirmations
	// of cached bodies) and the PostgreSQL fallback ("pg").
	Hydrations *prometheus.CounterVec
	// Rebuilds counts background rebuilds of read models from PostgreSQL,
	// by model ("inbox", "following", "timeline", "celebrities") and
	// result ("ok", "error", "deferred": no slot free or Run not running,
	// asked again by the next read).
	Rebuilds *prometheus.CounterVec
	// WriteThroughs counts the Redis writes of PostCreated (the author's
	// newest-post marker) and PostEdited (the edited body) by result
	// ("ok", "error", "skipped": the write circuit is open).
	WriteThroughs *prometheus.CounterVec
	// Circuits is the state of each Redis circuit ("reads", "writes"):
	// 0 closed, 1 half-open, 2 open.
	Circuits *prometheus.GaugeVec
	// CrossingsPending is, at the last read of the celebrity set, the
	// number of authors pulled because their downward celebrity crossing
	// is not yet backfilled into every inbox (readmodel.Celebrities).
	CrossingsPending prometheus.Gauge
	// StreamReads counts the live streams' home reads by pipeline: "own"
	// (alone, or Config.StreamPlainReads) or "shared" (through the
	// autopipeliner, while other streams' reads were under way).
	StreamReads *prometheus.CounterVec

	// The per-page counters, resolved once (WithLabelValues hashes its
	// labels on every call).
	hydProcess, hydRedis, hydPG prometheus.Counter
	homeSources                 [3]prometheus.Counter // redis, pg, cold
	streamOwn, streamShared     prometheus.Counter
	celebHit, celebMiss         prometheus.Counter
	timelineHit, timelineMiss   prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		CacheLookups: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "feed_query_cache_lookups_total",
			Help: "In-process cache lookups of the read side, by cache and result.",
		}, []string{"cache", "result"}),
		Sources: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "feed_query_pages_by_source_total",
			Help: "Feed pages served, by query and by source used (redis, pg, cold).",
		}, []string{"query", "source"}),
		Hydrations: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "feed_query_hydrations_total",
			Help: "Posts hydrated for pages, by where the body came from.",
		}, []string{"from"}),
		Rebuilds: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "feed_query_rebuilds_total",
			Help: "Rebuilds of incomplete read models from PostgreSQL, by model and result.",
		}, []string{"model", "result"}),
		WriteThroughs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "feed_query_write_throughs_total",
			Help: "Redis writes on the API's post commands (a new post's author marker, an edit's body), by result.",
		}, []string{"result"}),
		Circuits: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "feed_query_redis_circuit_state",
			Help: "State of the read side's Redis circuits (0 closed, 1 half-open, 2 open), by calls (reads, writes).",
		}, []string{"calls"}),
		CrossingsPending: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "feed_query_celebrity_crossings_pending",
			Help: "Authors pulled as celebrities because their downward crossing is not yet backfilled into the inboxes, at the last read of the celebrity set.",
		}),
		StreamReads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "feed_query_stream_reads_total",
			Help: "Live streams' home reads, by pipeline: own (alone) or shared (through the autopipeliner with other streams' reads).",
		}, []string{"pipeline"}),
	}
	m.streamOwn = m.StreamReads.WithLabelValues("own")
	m.streamShared = m.StreamReads.WithLabelValues("shared")
	m.hydProcess = m.Hydrations.WithLabelValues("process")
	m.hydRedis = m.Hydrations.WithLabelValues("redis")
	m.hydPG = m.Hydrations.WithLabelValues("pg")
	m.celebHit = m.CacheLookups.WithLabelValues("celebrities", "hit")
	m.celebMiss = m.CacheLookups.WithLabelValues("celebrities", "miss")
	m.timelineHit = m.CacheLookups.WithLabelValues("timeline", "hit")
	m.timelineMiss = m.CacheLookups.WithLabelValues("timeline", "miss")
	for i, s := range [3]string{"redis", "pg", "cold"} {
		m.homeSources[i] = m.Sources.WithLabelValues("home", s)
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.CacheLookups, m.Sources, m.Hydrations, m.Rebuilds, m.WriteThroughs, m.Circuits, m.CrossingsPending, m.StreamReads} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("register query metrics (one Feed per registry): %w", err)
		}
	}
	return m, nil
}

// registerReadCache exports the read cache's counters
// (feed_query_read_cache_total{event}): hit, miss, stored, dropped (a
// reply raced an invalidation or a reconnect and was not cached),
// invalidated (keys), flush and generation (invalidation connections),
// roundtrip (home reads through the cache that still needed Redis) and
// uncached (home reads while the cache was off: no generation).
func (m *Metrics) registerReadCache(reg prometheus.Registerer, c *readCache) error {
	if reg == nil || c == nil {
		return nil
	}
	for _, e := range []struct {
		name string
		v    *atomic.Int64
	}{{"hit", &c.stats.hits}, {"miss", &c.stats.misses}, {"stored", &c.stats.stored}, {"dropped", &c.stats.dropped},
		{"invalidated", &c.stats.invalidated}, {"flush", &c.stats.flushes}, {"generation", &c.stats.generations},
		{"roundtrip", &c.stats.trips}, {"uncached", &c.stats.direct}} {
		v := e.v
		cf := prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name:        "feed_query_read_cache_total",
			Help:        "Read cache (Redis CLIENT TRACKING) events of the read side.",
			ConstLabels: prometheus.Labels{"event": e.name},
		}, func() float64 { return float64(v.Load()) })
		if err := reg.Register(cf); err != nil {
			return fmt.Errorf("register read cache metrics: %w", err)
		}
	}
	return nil
}
