package cdc

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the CDC's Prometheus series.
type metrics struct {
	published     prometheus.Counter
	redelivered   prometheus.Counter
	undecodable   prometheus.Counter
	publishErrors prometheus.Counter
	reconnects    prometheus.Counter
	backpressure  prometheus.Counter
	// The visibility gate's snapshot reads, the time they took, and the
	// transactions a snapshot still showed running (held back).
	visibilityReads       prometheus.Counter
	visibilityReadSeconds prometheus.Counter
	visibilityHeld        prometheus.Counter
	inFlight              prometheus.Gauge
	slotLagBytes          prometheus.Gauge
	lagSeconds            prometheus.Gauge
	confirmedLSN          prometheus.Gauge
	// Slot losses by what CDC did (mode "heal" or "stop"), and the events
	// republished from the event log by heals.
	slotLost    *prometheus.CounterVec
	republished prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) *metrics {
	counter := func(name, help string) prometheus.Counter {
		return register(reg, prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help}))
	}
	gauge := func(name, help string) prometheus.Gauge {
		return register(reg, prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: help}))
	}
	return &metrics{
		published: counter("feed_cdc_events_published_total",
			"Events published to Kafka and acknowledged by the broker."),
		redelivered: counter("feed_cdc_events_redelivered_total",
			"Events published twice because the replication stream broke inside their transaction (at-least-once duplicates CDC knows of)."),
		undecodable: counter("feed_cdc_events_undecodable_total",
			"Events whose payload this binary cannot decode; published with audience key 0."),
		publishErrors: counter("feed_cdc_publish_errors_total",
			"Failed publish attempts (each is retried, in order)."),
		reconnects: counter("feed_cdc_reconnects_total",
			"Replication sessions restarted after an error."),
		backpressure: counter("feed_cdc_backpressure_seconds_total",
			"Time the reader waited for a full lane: Kafka is the bottleneck while this grows at about 1 s/s."),
		visibilityReads: counter("feed_cdc_visibility_snapshots_total",
			"Snapshots read to check that decoded transactions are visible in PostgreSQL before their events are published (one covers every transaction waiting)."),
		visibilityReadSeconds: counter("feed_cdc_visibility_snapshot_seconds_total",
			"Time spent reading those snapshots."),
		visibilityHeld: counter("feed_cdc_visibility_held_total",
			"Decoded transactions PostgreSQL still showed as running (commit record written, commit not finished): their events waited until it did."),
		inFlight: gauge("feed_cdc_events_in_flight",
			"Events read from the slot and not yet acknowledged by Kafka."),
		slotLagBytes: gauge("feed_cdc_slot_lag_bytes",
			"pg_current_wal_lsn() - confirmed_flush_lsn of the slot: WAL the server keeps for CDC."),
		lagSeconds: gauge("feed_cdc_lag_seconds",
			"Age of the oldest committed transaction not yet fully acknowledged by Kafka (0 when caught up)."),
		confirmedLSN: gauge("feed_cdc_confirmed_lsn",
			"The LSN last confirmed to PostgreSQL, as a number."),
		slotLost: register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "feed_cdc_slot_lost_total",
			Help: "Times the replication slot CDC streamed from was found missing, by what CDC did: heal (republished from the event log, new slot) or stop (stopped without creating a slot).",
		}, []string{"mode"})),
		republished: counter("feed_cdc_republished_events_total",
			"Events republished from the event log after the loss of the slot (acknowledged by Kafka)."),
	}
}

// register adds c to reg, or returns the collector already registered under
// its name (a second CDC in one process, as in tests, shares the series).
func register[C prometheus.Collector](reg prometheus.Registerer, c C) C {
	if err := reg.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if existing, ok := are.ExistingCollector.(C); ok {
				return existing
			}
		}
		// Cannot happen with these fixed, valid names; keep the series
		// working, unexported.
	}
	return c
}
