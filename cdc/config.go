package cdc

import (
	"cmp"
	"fmt"
	"log/slog"
	"regexp"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"
)

// DefaultPublication is the publication migrations/002_cdc.up.sql creates.
const DefaultPublication = "feed_events"

// Config configures one CDC process. Zero fields take the defaults below.
type Config struct {
	// DatabaseURL is the ordinary connection string of the event log's
	// database; CDC adds replication=database for the slot's connection.
	DatabaseURL string
	// Slot is the logical replication slot. Slot names are cluster-wide:
	// two databases on one server need two names.
	// WARNING: a new name is a new slot, which starts at the current WAL
	// position: events committed while no slot existed are never streamed.
	Slot string
	// Publication names the publication on the events table.
	Publication string
	// Topic is the Kafka topic the events go to.
	Topic string
	// Lanes is the number of ordered publishing queues (by audience key
	// hash); lanes publish concurrently, and since each waits for its
	// acknowledgement, their number bounds throughput and queueing. Default 512.
	Lanes int
	// MaxInFlight bounds the events read from the slot and not yet
	// acknowledged by Kafka (memory), split evenly across lanes. Default 32768.
	MaxInFlight int
	// ConfirmInterval is how often acknowledged progress is confirmed to
	// PostgreSQL (and the metrics refreshed). Default 1s.
	ConfirmInterval time.Duration
	// StatusInterval is the longest silence towards PostgreSQL; keep it
	// well inside wal_sender_timeout (60s). Default 10s.
	StatusInterval time.Duration
	// StateInterval is how often the progress row (cdc_state) is written
	// and the slot's lag in bytes measured. Default 1s.
	StateInterval time.Duration
	// LagWarnBytes: a loud warning is logged while the slot holds more WAL
	// than this. Default 256 MiB.
	LagWarnBytes int64
	// ShutdownTimeout bounds the flush of queued events at shutdown.
	// Default 10s.
	ShutdownTimeout time.Duration
	// MinBackoff and MaxBackoff bound the exponential backoff between
	// reconnects and between publish retries. Defaults 100ms and 15s.
	MinBackoff, MaxBackoff time.Duration
	// UnavailableBackoff caps the pause between reconnects while PostgreSQL
	// refuses connections or is starting up or shutting down (a restart
	// usually ends within seconds: CDC should be back as soon as it is).
	// Default 1s.
	UnavailableBackoff time.Duration
	// OnSlotLoss says what CDC does when the slot it streamed from is gone:
	// SlotLossHeal (default) republishes from the event log what Kafka may
	// not have, then streams from a new slot; SlotLossStop stops with an
	// error wrapping ErrSlotLost and creates nothing (docs/cdc.md, "Slot
	// loss").
	OnSlotLoss SlotLossMode
	// Registerer receives the Prometheus metrics. Default: a private
	// registry (nothing exported).
	Registerer prometheus.Registerer
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// TracerProvider, when set, makes the publishing of an event written
	// by a traced request a span of that trace (its traceparent from the
	// event's metadata), and the traceparent header CDC sets that span's.
	// Nil: no spans; the header carries the stored traceparent as it is.
	TracerProvider trace.TracerProvider
	// OnStreaming, when set, is called once, when Run's first replication
	// session streams from the slot (a process's readiness).
	OnStreaming func()
}

var slotName = regexp.MustCompile(`^[a-z0-9_]{1,63}$`)

// withDefaults returns c with every zero field set to its default.
func (c Config) withDefaults() Config {
	c.Publication = cmp.Or(c.Publication, DefaultPublication)
	c.Lanes = cmp.Or(c.Lanes, 512)
	c.MaxInFlight = cmp.Or(c.MaxInFlight, 32768)
	c.ConfirmInterval = cmp.Or(c.ConfirmInterval, time.Second)
	c.StatusInterval = cmp.Or(c.StatusInterval, 10*time.Second)
	c.StateInterval = cmp.Or(c.StateInterval, time.Second)
	c.LagWarnBytes = cmp.Or(c.LagWarnBytes, 256<<20)
	c.ShutdownTimeout = cmp.Or(c.ShutdownTimeout, 10*time.Second)
	c.MinBackoff = cmp.Or(c.MinBackoff, 100*time.Millisecond)
	c.MaxBackoff = cmp.Or(c.MaxBackoff, 15*time.Second)
	c.UnavailableBackoff = cmp.Or(c.UnavailableBackoff, time.Second)
	c.OnSlotLoss = cmp.Or(c.OnSlotLoss, SlotLossHeal)
	if c.Registerer == nil {
		c.Registerer = prometheus.NewRegistry()
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// Validate reports the first setting that cannot work.
func (c Config) Validate() error {
	switch {
	case c.DatabaseURL == "":
		return fmt.Errorf("cdc: DatabaseURL is required")
	case !slotName.MatchString(c.Slot):
		return fmt.Errorf("cdc: slot name %q: want 1-63 of [a-z0-9_]", c.Slot)
	case c.Publication == "":
		return fmt.Errorf("cdc: Publication is required")
	case c.Topic == "":
		return fmt.Errorf("cdc: Topic is required")
	case c.Lanes < 1 || c.Lanes > 4096:
		return fmt.Errorf("cdc: Lanes=%d: want 1..4096", c.Lanes)
	case c.MaxInFlight < c.Lanes:
		return fmt.Errorf("cdc: MaxInFlight=%d must be at least Lanes=%d", c.MaxInFlight, c.Lanes)
	case c.StatusInterval >= 50*time.Second:
		return fmt.Errorf("cdc: StatusInterval=%v: keep it well inside wal_sender_timeout (60s)", c.StatusInterval)
	case c.ConfirmInterval > c.StatusInterval:
		return fmt.Errorf("cdc: ConfirmInterval=%v is longer than StatusInterval=%v", c.ConfirmInterval, c.StatusInterval)
	case c.MinBackoff <= 0 || c.MaxBackoff < c.MinBackoff:
		return fmt.Errorf("cdc: backoff %v..%v", c.MinBackoff, c.MaxBackoff)
	case c.UnavailableBackoff <= 0:
		return fmt.Errorf("cdc: UnavailableBackoff=%v: want a positive duration", c.UnavailableBackoff)
	case c.OnSlotLoss != SlotLossHeal && c.OnSlotLoss != SlotLossStop:
		return fmt.Errorf("cdc: OnSlotLoss=%q: want %q or %q", c.OnSlotLoss, SlotLossHeal, SlotLossStop)
	}
	return nil
}
