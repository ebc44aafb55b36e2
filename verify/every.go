package verify

import (
	"context"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
)

// Metrics are the periodic verification's (FEED_VERIFY_EVERY).
type Metrics struct {
	// Runs counts runs by result: ok, differences, error.
	Runs *prometheus.CounterVec
	// Differences is the last completed run's number of differences.
	Differences prometheus.Gauge
	// Users counts the users compared, Cold those of them whose read
	// models were not built.
	Users, Cold prometheus.Counter
	// LastRun is when the last run ended (Unix seconds), Duration how long
	// it took.
	LastRun, Duration prometheus.Gauge
}

// NewMetrics registers the feed_verify_* metrics on reg (nil: none).
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		Runs: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "feed_verify_runs_total",
			Help: "Runs of the periodic verification, by result (ok, differences, error)."}, []string{"result"}),
		Differences: prometheus.NewGauge(prometheus.GaugeOpts{Name: "feed_verify_differences",
			Help: "Differences from the truth found by the last completed verification."}),
		Users: prometheus.NewCounter(prometheus.CounterOpts{Name: "feed_verify_users_checked_total",
			Help: "Users whose feeds the periodic verification compared with the truth."}),
		Cold: prometheus.NewCounter(prometheus.CounterOpts{Name: "feed_verify_users_cold_total",
			Help: "Compared users whose read models were not built (their feed came from PostgreSQL)."}),
		LastRun: prometheus.NewGauge(prometheus.GaugeOpts{Name: "feed_verify_last_run_timestamp_seconds",
			Help: "When the last verification ended, Unix seconds."}),
		Duration: prometheus.NewGauge(prometheus.GaugeOpts{Name: "feed_verify_duration_seconds",
			Help: "How long the last verification took, barriers included."}),
	}
	for _, r := range []string{"ok", "differences", "error"} {
		m.Runs.WithLabelValues(r)
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{m.Runs, m.Differences, m.Users, m.Cold, m.LastRun, m.Duration} {
			if err := reg.Register(c); err != nil {
				return nil, err
			}
		}
	}
	return m, nil
}

// Every runs Run every interval until ctx ends, recording each result in m
// and in PostgreSQL (SaveResult, source SourcePeriodic, for `feed status`),
// and logging the differences (at most maxLogged of them per run) as
// warnings. A failed run is logged and counted; the next one runs on time.
func Every(ctx context.Context, interval time.Duration, cfg Config, pool *pgxpool.Pool, rdb redis.UniversalClient, m *Metrics, log *slog.Logger) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		start := time.Now()
		rep, err := Run(ctx, cfg, pool, rdb)
		if ctx.Err() != nil {
			return nil
		}
		took := time.Since(start)
		m.LastRun.SetToCurrentTime()
		m.Duration.Set(took.Seconds())
		if serr := SaveResult(ctx, pool, NewResult(SourcePeriodic, rep, err, time.Now(), took)); serr != nil && ctx.Err() == nil {
			log.Warn("verify: could not record the result for `feed status`", "err", serr)
		}
		switch {
		case err != nil:
			m.Runs.WithLabelValues("error").Inc()
			log.Warn("verify: run failed", "err", err)
			continue
		case rep.OK():
			m.Runs.WithLabelValues("ok").Inc()
			log.Info("verify: no difference", "report", rep.Summary())
		default:
			m.Runs.WithLabelValues("differences").Inc()
			log.Error("verify: the read models differ from the truth", "report", rep.Summary())
			for i, d := range rep.Differences {
				if i == maxLogged {
					log.Error("verify: more differences not logged", "count", len(rep.Differences)-maxLogged)
					break
				}
				log.Error("verify: difference", "user", d.User, "kind", d.Kind, "post", d.Post, "author", d.Author, "what", d.Text, "where", d.Where)
			}
		}
		m.Differences.Set(float64(len(rep.Differences)))
		m.Users.Add(float64(rep.Users))
		m.Cold.Add(float64(rep.Cold))
	}
}

// maxLogged bounds the differences one periodic run logs.
const maxLogged = 20
