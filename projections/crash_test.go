package projections_test

import (
	"context"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/feedco/feed/homefeed"
	"github.com/feedco/feed/internal/kafka"
	"github.com/feedco/feed/projections"
	"github.com/feedco/feed/readmodel"
	"github.com/feedco/feed/testkit/kafkatest"
	"github.com/feedco/feed/testkit/testenv"
)

// crashChildEnv makes the test binary run as a projector process (see
// TestMain): the crash test starts it, kills it with SIGKILL, restarts it.
const crashChildEnv = "FEED_PROJECTIONS_CRASH_CHILD"

func TestMain(m *testing.M) { testenv.ChildMain(m, crashChildEnv, crashChild) }

func crashChild() int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	pool, err := pgxpool.New(ctx, os.Getenv("CHILD_DB"))
	if err != nil {
		return 3
	}
	defer pool.Close()
	rdb, err := testenv.OpenRedis()
	if err != nil {
		return 3
	}
	cfg := projections.Config{Keys: readmodel.Keys{Prefix: os.Getenv("CHILD_PREFIX")}, CelebrityThreshold: 100_000, FanoutBatch: 100}
	ps, err := projections.New(cfg, pool, rdb, nil)
	if err != nil {
		return 4
	}
	r, err := projections.NewRunner(projections.RunnerConfig{Brokers: strings.Split(os.Getenv("CHILD_BROKERS"), ","),
		Topic: os.Getenv("CHILD_TOPIC"), GroupPrefix: os.Getenv("CHILD_TOPIC") + ".", Logger: quietLogger(), LagInterval: -1}, ps...)
	if err != nil {
		return 5
	}
	if err := r.Run(ctx); err != nil {
		return 6
	}
	return 0
}

// A projector killed with SIGKILL in the middle of fan-outs, and started
// again, ends with exactly the Redis state of an uninterrupted run: the
// uncommitted messages (post edits among them) are redelivered and
// re-applying them changes nothing
// (byte for byte with sorted sets; as read with packed inboxes, whose
// buffers keep a redelivery's duplicates until the next merge).
func TestCrashMidFanout(t *testing.T) {
	t.Parallel()
	testCrashMidFanout(t)
}

func testCrashMidFanout(t *testing.T) {
	w := newWorld(t)
	rd := testenv.NewRedis(t)
	b := kafkatest.Start(t)
	topic := b.Topic(t, 4)

	// Two authors with 1,500 active followers each (bulk rows), then posts:
	// more than PackedMergeAt, so that every inbox's buffer is merged
	// under the crash.
	perAuthor := homefeed.MergeAt/2 + 5
	authors := []int64{w.user(true), w.user(true)}
	ctx := context.Background()
	var first, last int64
	if err := w.db.Pool.QueryRow(ctx, `WITH u AS (INSERT INTO users (name) SELECT 'f' FROM generate_series(1, 1500) RETURNING id)
		SELECT min(id), max(id) FROM u`).Scan(&first, &last); err != nil {
		t.Fatal(err)
	}
	w.exec(`INSERT INTO user_activity (user_id, last_seen_at) SELECT id, now() FROM users WHERE id BETWEEN $1 AND $2`, first, last)
	for i, a := range authors {
		w.exec(`INSERT INTO follows (follower_id, followee_id) SELECT id, $1 FROM users WHERE id BETWEEN $2 AND $3`, a, first, last)
		w.exec(`UPDATE users SET follower_count = 1500 WHERE id = $1`, a)
		for j := 0; j < perAuthor; j++ {
			w.post(authors[(i+j)%2])
		}
	}
	w.follow(authors[0], authors[1]) // and a backfill
	for j := 0; j < 5; j++ {
		p := w.post(authors[j%2])
		// Edits, committed before the projector runs: re-applied after
		// the kill, they leave the newest content.
		for k := range j {
			w.edit(authors[j%2], p, "edit "+strconv.Itoa(k))
		}
	}
	b.PublishEvents(t, topic, w.envs...)

	// Reference: the same messages applied once, directly.
	ref := testenv.NewRedis(t)
	applyAll(t, newProjectors(t, w, ref.Client, projections.Config{Keys: readmodel.Keys{Prefix: ref.Prefix}, CelebrityThreshold: 100_000}), w.envs)
	state := func(rdb redis.UniversalClient, prefix string) map[string]string {
		return canonical(t, rdb, prefix, readmodel.DefaultPolicy().InboxKeep())
	}
	want := state(ref.Client, ref.Prefix)

	start := func() *exec.Cmd {
		return testenv.StartChild(t, crashChildEnv, os.Stderr, "CHILD_DB="+w.db.URL, "CHILD_PREFIX="+rd.Prefix,
			"CHILD_BROKERS="+strings.Join(b.Addrs(), ","), "CHILD_TOPIC="+topic)
	}
	inboxKeys := func() int64 {
		ks, _ := testenv.Keys(ctx, rd.Client, rd.Prefix+"*pfeed:*")
		return int64(len(ks))
	}
	child := start()
	testenv.Eventually(t, 60*time.Second, "fan-out under way", func() bool { return inboxKeys() > 100 })
	if err := child.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = child.Wait()
	killedAt := len(dump(t, rd.Client, rd.Prefix))
	child = start()
	defer func() {
		_ = child.Process.Signal(syscall.SIGTERM)
		_ = child.Wait()
	}()
	testenv.Eventually(t, 90*time.Second, "the restarted projector to catch up", func() bool {
		lags, err := projections.ConsumerLag(ctx, b.Conn(), topic, []string{topic + "." + projections.GroupInbox, topic + "." + projections.GroupPosts})
		return err == nil && lags[topic+"."+projections.GroupInbox] == 0 && lags[topic+"."+projections.GroupPosts] == 0
	})
	got := state(rd.Client, rd.Prefix)
	if d := diff(want, got); d != "" {
		t.Fatalf("after kill -9 (at %d of %d keys) and restart, Redis differs from an uninterrupted run:\n%s", killedAt, len(want), d)
	}
	t.Logf("killed with %d of %d keys written; final state identical", killedAt, len(want))
}

// A message that cannot be decoded goes to the poison topic with the reason
// and the group, and the partition moves on.
func TestPoisonQueue(t *testing.T) {
	t.Parallel()
	rig := newPostsRig(t)
	w, rd, b, topic, keys := rig.w, rig.rd, rig.b, rig.topic, rig.keys
	runProjectors(t, b.Addrs(), topic, []projections.Projector{rig.posts})
	a := w.user(true)
	p := w.post(a)
	bad := kafkatest.EventMessage(t, w.envs[1])
	bad.UUID = "bad-1"
	bad.Payload = []byte(`{"type":"post.created.v1","payload":{"postId":`)
	b.Publish(t, topic, bad)
	b.PublishEvents(t, topic, w.envs...)
	ctx := context.Background()
	testenv.Eventually(t, 60*time.Second, "the good message after the bad one", func() bool {
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
	select {
	case m := <-ch:
		m.Ack()
		if m.UUID != "bad-1" || !strings.Contains(m.Metadata.Get(kafka.MetaPoisonReason), "decode") ||
			m.Metadata.Get(kafka.MetaPoisonGroup) != topic+"."+projections.GroupPosts {
			t.Fatalf("poison message %s: %v", m.UUID, m.Metadata)
		}
	case <-sctx.Done():
		t.Fatal("nothing on the poison topic")
	}
}
