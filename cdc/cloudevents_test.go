package cdc

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/feedco/feed/events"
	"github.com/feedco/feed/events/schema"
	"github.com/feedco/feed/internal/kafka"
)

// TestCloudEventsHeaders reads the topic CDC fed with a plain Kafka client
// (franz-go) and checks that every record is a CloudEvents 1.0 event in
// the Kafka binding's binary mode: ce_specversion, ce_id (the event id),
// ce_type (the versioned type), ce_source, ce_time (the recorded time),
// ce_subject (the stream), content-type and ce_partitionkey (the record's
// key), beside watermill's headers; and that the value, the event's data,
// validates against the envelope's published schema.
func TestCloudEventsHeaders(t *testing.T) {
	t.Parallel()
	b := setup(t, 3)
	ctx := context.Background()
	at := time.Date(2026, 12, 6, 9, 41, 12, 0, time.UTC)
	ids := mustInsert(ctx, t, b.db, []row{
		{events.UserRegistered{UserID: 7, Name: "ana"}, 1},
		{events.PostCreated{PostID: 1 << 60, AuthorID: 7, Content: "olá <b>", CreatedAt: at, AuthorFollowers: 1}, 1},
		{events.Followed{FollowerID: 8, FolloweeID: 7, FolloweeFollowers: 1}, 1},
	}, false)
	ids = append(ids, mustInsert(ctx, t, b.db, []row{
		{events.PostDeleted{PostID: 1 << 60, AuthorID: 7, DeletedAt: at}, 2},
	}, false)...)
	b.start(t, b.config())
	want := map[string]bool{}
	for _, id := range ids {
		want[id] = true
	}
	cons := newConsumer(t, b)
	cons.readUntil(t, 60*time.Second, "every event", func(c *consumer) bool { return c.hasAll(want) })

	for _, r := range cons.recs {
		e := r.env
		checks := map[string][2]string{
			kafka.MetaCESpecVersion: {r.headers["ce_specversion"], "1.0"},
			kafka.MetaCEID:          {r.headers["ce_id"], e.EventID},
			kafka.MetaCEType:        {r.headers["ce_type"], e.Type},
			kafka.MetaCESource:      {r.headers["ce_source"], "https://github.com/feedco/feed"},
			kafka.MetaCESubject:     {r.headers["ce_subject"], e.StreamID},
			kafka.MetaCEPartition:   {r.headers["ce_partitionkey"], r.key},
			kafka.MetaCEDataSchema:  {r.headers["ce_dataschema"], schema.BaseURL + schema.EnvelopeFile},
			kafka.MetaContentType:   {r.headers["content-type"], "application/json"},
			"key is the audience":   {r.key, strconv.FormatInt(e.AudienceKey, 10)},
			"watermill uuid":        {r.headers["_watermill_message_uuid"], e.EventID},
			"watermill name":        {r.headers[kafka.MetaName], e.Type},
		}
		for what, v := range checks {
			if v[0] != v[1] {
				t.Errorf("%s %s: got %q, want %q", e.Type, what, v[0], v[1])
			}
		}
		ceTime, err := time.Parse(time.RFC3339Nano, r.headers["ce_time"])
		if err != nil {
			t.Errorf("%s ce_time %q is not RFC 3339: %v", e.Type, r.headers["ce_time"], err)
		} else if !ceTime.Equal(e.RecordedAt) {
			t.Errorf("%s ce_time %v, recordedAt %v", e.Type, ceTime, e.RecordedAt)
		}
		if err := schema.ValidateEnvelope(r.value); err != nil {
			t.Errorf("%s: the record's value does not validate: %v", e.Type, err)
		}
	}
	if len(cons.recs) < len(ids) {
		t.Fatalf("read %d records, wrote %d events", len(cons.recs), len(ids))
	}
}
