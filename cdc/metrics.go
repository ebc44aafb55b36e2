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
	m := &metrics{
		published: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "cdc_events_published_total",
			Help: "Events published to Kafka and acknowledged by the broker.",
		}),
		redelivered: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "cdc_events_redelivered_total",
			Help: "Events published twice because the replication stream broke inside their transaction (at-least-once duplicates CDC knows of).",
		}),
		undecodable: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "cdc_events_undecodable_total",
			Help: "Events whose payload this binary cannot decode; published with audience key 0.",
		}),
		publishErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "cdc_publish_errors_total",
			Help: "Failed publish attempts (each is retried, in order).",
		}),
		reconnects: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "cdc_reconnects_total",
			Help: "Replication sessions restarted after an error.",
		}),
		backpressure: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "cdc_backpressure_seconds_total",
			Help: "Time the reader waited for a full lane: Kafka is the bottleneck while this grows at about 1 s/s.",
		}),
		visibilityReads: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "cdc_visibility_snapshots_total",
			Help: "Snapshots read to check that decoded transactions are visible in PostgreSQL before their events are published (one covers every transaction waiting).",
		}),
		visibilityReadSeconds: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "cdc_visibility_snapshot_seconds_total",
			Help: "Time spent reading those snapshots.",
		}),
		visibilityHeld: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "cdc_visibility_held_total",
			Help: "Decoded transactions PostgreSQL still showed as running (commit record written, commit not finished): their events waited until it did.",
		}),
		inFlight: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "cdc_events_in_flight",
			Help: "Events read from the slot and not yet acknowledged by Kafka.",
		}),
		slotLagBytes: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "cdc_slot_lag_bytes",
			Help: "pg_current_wal_lsn() - confirmed_flush_lsn of the slot: WAL the server keeps for CDC.",
		}),
		lagSeconds: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "cdc_lag_seconds",
			Help: "Age of the oldest committed transaction not yet fully acknowledged by Kafka (0 when caught up).",
		}),
		confirmedLSN: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "cdc_confirmed_lsn",
			Help: "The LSN last confirmed to PostgreSQL, as a number.",
		}),
		slotLost: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cdc_slot_lost_total",
			Help: "Times the replication slot CDC streamed from was found missing, by what CDC did: heal (republished from the event log, new slot) or stop (stopped without creating a slot).",
		}, []string{"mode"}),
		republished: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "cdc_republished_events_total",
			Help: "Events republished from the event log after the loss of the slot (acknowledged by Kafka).",
		}),
	}
	m.published = register(reg, m.published)
	m.redelivered = register(reg, m.redelivered)
	m.undecodable = register(reg, m.undecodable)
	m.publishErrors = register(reg, m.publishErrors)
	m.reconnects = register(reg, m.reconnects)
	m.backpressure = register(reg, m.backpressure)
	m.visibilityReads = register(reg, m.visibilityReads)
	m.visibilityReadSeconds = register(reg, m.visibilityReadSeconds)
	m.visibilityHeld = register(reg, m.visibilityHeld)
	m.inFlight = register(reg, m.inFlight)
	m.slotLagBytes = register(reg, m.slotLagBytes)
	m.lagSeconds = register(reg, m.lagSeconds)
	m.confirmedLSN = register(reg, m.confirmedLSN)
	m.slotLost = register(reg, m.slotLost)
	m.republished = register(reg, m.republished)
	return m
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
