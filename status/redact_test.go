package status

import (
	"strings"
	"testing"
)

func TestRedact(t *testing.T) {
	r := Report{
		CDC: CDC{Slot: "feed_cdc_feed", ConfirmedLSN: "0/16B3748",
			Error: "failed to connect to `user=feedadmin database=feedprod`: db.internal.example:5432 (10.1.2.3): dial error"},
		Redis: Redis{Mode: "cluster", Nodes: []RedisNode{{Addr: "10.0.0.7:6379", Keys: 3}, {Addr: "[fd00::7]:6379"}},
			Error: "dial tcp [fd00::7]:6379: connect: connection refused"},
		Poison:      Poison{Error: "kafka broker kafka-1.internal:9092 unreachable"},
		Verify:      Verify{Results: []VerifyResult{{Detail: "redis at cache.internal said no"}}},
		Projections: Projections{Error: "password=hunter2 rejected"},
	}
	got := Redact(r, "db.internal.example", "feedadmin", "kafka-1.internal:9092", "cache.internal")
	all := got.CDC.Error + got.Redis.Error + got.Poison.Error + got.Verify.Results[0].Detail + got.Projections.Error +
		got.Redis.Nodes[0].Addr + got.Redis.Nodes[1].Addr
	for _, leak := range []string{"feedadmin", "feedprod", "db.internal", "10.1.2.3", "10.0.0.7", "fd00::7", "kafka-1", "cache.internal", "hunter2", "5432"} {
		if strings.Contains(all, leak) {
			t.Errorf("redacted report still shows %q: %s", leak, all)
		}
	}
	if got.CDC.Slot != "feed_cdc_feed" || got.CDC.ConfirmedLSN != "0/16B3748" || got.Redis.Nodes[0].Keys != 3 || got.Redis.Nodes[0].Addr != "node 1" {
		t.Errorf("redaction lost what the page is for: %+v", got)
	}
	if r.Redis.Nodes[0].Addr != "10.0.0.7:6379" {
		t.Error("Redact changed its argument")
	}
}
