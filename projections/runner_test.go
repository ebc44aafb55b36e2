package projections_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"

	"github.com/feedco/feed/events"
	"github.com/feedco/feed/internal/kafka"
	"github.com/feedco/feed/projections"
	"github.com/feedco/feed/testkit/kafkatest"
	"github.com/feedco/feed/testkit/testenv"
)

// A projector that ignores a type (Selective) acknowledges its messages
// without decoding them, so an undecodable one of that type is not
// poisoned there; an undecodable message of a type it handles, and one of
// a type nobody knows, still are, in partition order, and the good
// messages after them are applied.
func TestIgnoredTypesAreNotDecoded(t *testing.T) {
	t.Parallel()
	rig := newPostsRig(t)
	w, rd, b, topic, keys := rig.w, rig.rd, rig.b, rig.topic, rig.keys
	if sel, ok := rig.posts.(projections.Selective); !ok || !sel.Ignores(events.TypeFollowed) || sel.Ignores(events.TypePostCreated) || sel.Ignores("user.renamed.v1") {
		t.Fatalf("the posts projector must ignore follows only among the types asked (%T)", rig.posts)
	}
	runProjectors(t, b.Addrs(), topic, []projections.Projector{rig.posts})
	a := w.user(true)
	p := w.post(a)
	garbage := []byte(`{"type":`)
	mk := func(uuid, typ string) {
		m := kafkatest.EventMessage(t, w.envs[1])
		m.UUID, m.Payload = uuid, garbage
		m.Metadata.Set(kafka.MetaName, typ)
		b.Publish(t, topic, m)
	}
	mk("ignored-1", events.TypeFollowed)
	mk("handled-1", events.TypePostCreated)
	mk("unknown-1", "user.renamed.v1")
	b.PublishEvents(t, topic, w.envs...)
	ctx := context.Background()
	testenv.Eventually(t, 60*time.Second, "the good messages after the bad ones", func() bool {
		return rd.Client.Exists(ctx, keys.Post(p)).Val() == 1
	})
	sub, err := kafka.NewSubscriber(b.Conn(), "poison-reader-"+topic, watermill.NopLogger{})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	sctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	ch, err := sub.Subscribe(sctx, kafka.PoisonTopic(topic))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"handled-1", "unknown-1"} {
		select {
		case m := <-ch:
			m.Ack()
			if m.UUID != want || !strings.Contains(m.Metadata.Get(kafka.MetaPoisonReason), "decode") {
				t.Fatalf("poison message %s (want %s): %v", m.UUID, want, m.Metadata)
			}
		case <-sctx.Done():
			t.Fatalf("%s not on the poison topic", want)
		}
	}
}

// flaky fails the first attempt at the event fail names, then applies it.
type flaky struct {
	projections.Projector
	fail     string
	attempts atomic.Int32
}

func (f *flaky) Apply(ctx context.Context, env events.Envelope, ev events.Event) error {
	if env.EventID == f.fail && f.attempts.Add(1) == 1 {
		return fmt.Errorf("flaky on %s", env.EventID)
	}
	return f.Projector.Apply(ctx, env, ev)
}

// A message whose handler fails is retried in place and applied, and the
// retry is logged at warn with the projector, its group and the error:
// a retry applies the whole message again, so an operator must see it.
func TestRetryIsLogged(t *testing.T) {
	t.Parallel()
	rig := newPostsRig(t)
	w, rd, b, topic, keys := rig.w, rig.rd, rig.b, rig.topic, rig.keys
	a := w.user(true)
	p := w.post(a)
	f := &flaky{Projector: rig.posts, fail: w.envs[len(w.envs)-1].EventID}
	var logs testenv.SyncBuffer
	r, err := projections.NewRunner(projections.RunnerConfig{Brokers: b.Addrs(), Topic: topic, GroupPrefix: topic + ".",
		Logger:      slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn})),
		LagInterval: -1, RetryInitial: 5 * time.Millisecond}, f)
	if err != nil {
		t.Fatal(err)
	}
	testenv.Go(t, "runner", r.Run)
	b.PublishEvents(t, topic, w.envs...)
	ctx := context.Background()
	testenv.Eventually(t, 60*time.Second, "the post applied after its retry", func() bool {
		return rd.Client.Exists(ctx, keys.Post(p)).Val() == 1
	})
	if n := f.attempts.Load(); n != 2 {
		t.Fatalf("%d attempts at the failing event, want 2", n)
	}
	var retries []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		if rec["msg"] == "projectors: retrying a message" {
			retries = append(retries, rec)
		}
	}
	if len(retries) != 1 {
		t.Fatalf("%d retry records, want 1; logs:\n%s", len(retries), logs.String())
	}
	rec := retries[0]
	if rec["level"] != "WARN" || rec["projector"] != projections.NamePosts || rec["group"] != topic+"."+rig.posts.Group() ||
		!strings.Contains(fmt.Sprint(rec["err"]), "flaky on "+f.fail) {
		t.Fatalf("retry record %v", rec)
	}
}
