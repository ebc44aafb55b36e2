package readmodel

import (
	"testing"
	"time"
)

// The policy defaults once: WithDefaults is idempotent (a component given
// a resolved policy resolves it to the same), and the inbox TTL that the
// projectors, the activity write and the cold rebuild use is InactiveAfter
// minus the margin, whose default covers two activity writes.
func TestPolicyDefaultsOnce(t *testing.T) {
	t.Parallel()
	for _, p := range []Policy{{}, {InboxMax: 3}, {InboxMax: 20, InboxTrimEvery: 1}, {ActivityWriteInterval: time.Hour}, {InboxTrimBand: 10}} {
		once := p.WithDefaults()
		if twice := once.WithDefaults(); twice != once {
			t.Errorf("%+v: defaults %+v, again %+v", p, once, twice)
		}
		if err := once.Validate(); err != nil {
			t.Errorf("%+v: %v", p, err)
		}
	}
	d := DefaultPolicy()
	if d.InboxTTL() != 30*24*time.Hour-time.Hour {
		t.Errorf("default inbox TTL %v", d.InboxTTL())
	}
	if m := (Policy{ActivityWriteInterval: time.Hour}).WithDefaults().InboxTTLMargin; m != 2*time.Hour {
		t.Errorf("margin with hourly activity writes %v, want 2h", m)
	}
	if err := (Policy{InactiveAfter: time.Hour, InboxTTLMargin: time.Hour}).WithDefaults().Validate(); err == nil {
		t.Error("a margin as long as the inactivity window: no error")
	}
}
