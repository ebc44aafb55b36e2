package kafka

import (
	"fmt"
	"maps"
	"testing"

	"github.com/IBM/sarama"
	wk "github.com/ThreeDotsLabs/watermill-kafka/v3/pkg/kafka"
	"github.com/ThreeDotsLabs/watermill/message"
)

// watermillMarshaler is watermill-kafka's own partitioning marshaler with
// the same key rule: what Marshaler must agree with.
var watermillMarshaler = wk.NewWithPartitioningMarshaler(func(_ string, msg *message.Message) (string, error) {
	k := msg.Metadata.Get(MetaPartitionKey)
	if k == "" {
		return "", fmt.Errorf("no %s", MetaPartitionKey)
	}
	return k, nil
})

func testMessage() *message.Message {
	m := message.NewMessage("0193a4b2-7c1e-7d3a-9f00-1234567890ab", []byte(`{"type":"post.created.v1"}`))
	m.Metadata = message.Metadata{
		MetaName: "post.created.v1", MetaStreamID: "post-7", MetaStreamVersion: "1", MetaPosition: "77",
		MetaCommitLSN: "16/B374D848", MetaCorrelationID: "corr-1", MetaPartitionKey: "1234",
	}
	return m
}

func headerMap(hs []sarama.RecordHeader) map[string]string {
	out := map[string]string{}
	for _, h := range hs {
		out[string(h.Key)] = string(h.Value)
	}
	return out
}

// TestMarshalerAgreesWithWatermill: same topic, key, value and headers as
// watermill-kafka's partitioning marshaler, the same refusals, and
// Unmarshal gives the message back.
func TestMarshalerAgreesWithWatermill(t *testing.T) {
	msg := testMessage()
	got, err := Marshaler.Marshal("events", msg)
	if err != nil {
		t.Fatal(err)
	}
	want, err := watermillMarshaler.Marshal("events", msg)
	if err != nil {
		t.Fatal(err)
	}
	gk, _ := got.Key.Encode()
	wkey, _ := want.Key.Encode()
	gv, _ := got.Value.Encode()
	wv, _ := want.Value.Encode()
	// Watermill's headers, and the CloudEvents attributes of an event.
	gotHeaders := headerMap(got.Headers)
	ce := map[string]string{
		MetaCESpecVersion: "1.0", MetaCEID: msg.UUID, MetaCESource: CloudEventsSource, MetaCEType: "post.created.v1",
		MetaCESubject: "post-7", MetaCEDataSchema: CloudEventsDataSchema, MetaCEPartition: "1234", MetaContentType: "application/json",
	}
	for k, v := range ce {
		if gotHeaders[k] != v {
			t.Errorf("header %s: %q, want %q", k, gotHeaders[k], v)
		}
		delete(gotHeaders, k)
	}
	if got.Topic != want.Topic || string(gk) != string(wkey) || string(gv) != string(wv) ||
		len(got.Headers) != len(want.Headers)+len(ce) || !maps.Equal(gotHeaders, headerMap(want.Headers)) {
		t.Fatalf("got %+v\nwant %+v", got, want)
	}
	back, err := Marshaler.Unmarshal(&sarama.ConsumerMessage{Key: gk, Value: gv, Headers: func() []*sarama.RecordHeader {
		var hs []*sarama.RecordHeader
		for i := range got.Headers {
			hs = append(hs, &got.Headers[i])
		}
		return hs
	}()})
	if err != nil || back.UUID != msg.UUID || string(back.Payload) != string(msg.Payload) {
		t.Fatalf("round trip: %+v, %v", back, err)
	}
	for k, v := range ce {
		if back.Metadata[k] != v {
			t.Errorf("round trip: metadata %s %q, want %q", k, back.Metadata[k], v)
		}
	}
	if backMeta := maps.Clone(back.Metadata); !maps.Equal(func() message.Metadata {
		maps.DeleteFunc(backMeta, func(k, _ string) bool { _, derived := ce[k]; return derived })
		return backMeta
	}(), msg.Metadata) {
		t.Fatalf("round trip: metadata %v, want %v and the CloudEvents attributes", back.Metadata, msg.Metadata)
	}
	// Republished as it was consumed (the poison queue): each header once.
	again, err := Marshaler.Marshal("events.poison", back)
	if err != nil || len(again.Headers) != len(got.Headers) || !maps.Equal(headerMap(again.Headers), headerMap(got.Headers)) {
		t.Fatalf("republished: %v, %v; want the headers of the first publish", again, err)
	}

	noKey := testMessage()
	delete(noKey.Metadata, MetaPartitionKey)
	reserved := testMessage()
	reserved.Metadata.Set(wk.UUIDHeaderKey, "x")
	for name, m := range map[string]*message.Message{"no partition key": noKey, "reserved header": reserved} {
		_, err := Marshaler.Marshal("events", m)
		_, werr := watermillMarshaler.Marshal("events", m)
		if err == nil || werr == nil {
			t.Errorf("%s: err %v, watermill's %v: both must refuse", name, err, werr)
		}
	}
}

// BenchmarkMarshal: Marshaler against watermill-kafka's partitioning
// marshaler, one CDC message each.
//
//	go test -run '^$' -bench Marshal -count 5 ./internal/kafka/
func BenchmarkMarshal(b *testing.B) {
	msg := testMessage()
	for name, m := range map[string]wk.Marshaler{"feed": Marshaler, "watermill": watermillMarshaler} {
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := m.Marshal("events", msg); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
