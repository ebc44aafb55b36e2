package rebuild

import (
	"context"
	"testing"

	"github.com/feedco/feed/verify"
)

// TestV1LogReplaysAndRebuilds: a log from before posts people share (every
// post a post.created.v1, no repost, like, reply or quote) replays and
// rebuilds into the same feeds. The world is written, its post events
// turned into the v1 form the writers of that release appended, and the
// log republished into a new topic: the projectors apply every event
// again (upcast to the current PostCreated, nothing poisoned) and the
// feeds equal the truth; then `rebuild all` from that topic, and the
// feeds and `feed verify` again.
func TestV1LogReplaysAndRebuilds(t *testing.T) {
	t.Parallel()
	s := startSystem(t)
	s.seed(t, 16, 4, 40)
	s.quiesce(t)
	ctx := context.Background()
	s.StopProjectors()
	s.StopCDC()
	tag, err := s.DB.Pool.Exec(ctx, `UPDATE events SET type = 'post.created.v1',
		payload = payload - 'replyTo' - 'replyRoot' - 'replyToAuthor' - 'quoteOf' - 'quoteAuthor' - 'media'
		WHERE type = 'post.created.v2'`)
	if err != nil {
		t.Fatal(err)
	}
	var v2, total int64 // total: the events reseedAll publishes
	if err := s.DB.Pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE type LIKE 'post.liked%' OR type LIKE 'post.unliked%'
		OR type LIKE 'post.reposted%' OR type LIKE 'post.unreposted%' OR type = 'post.created.v2'), count(*) FROM events`).Scan(&v2, &total); err != nil {
		t.Fatal(err)
	}
	if tag.RowsAffected() == 0 || v2 != 0 {
		t.Fatalf("the log is not a v1 log: %d posts rewritten, %d events of this release's types left", tag.RowsAffected(), v2)
	}
	topic, _ := s.reseedAll(t)
	s.MoveToTopic(t, topic)
	s.quiesce(t)
	s.checkConverged(t)
	if n := s.Poisoned(t); n != 0 {
		t.Fatalf("%d v1 messages poisoned", n)
	}
	if _, err := s.rebuilder(t, nil).Run(ctx, All); err != nil {
		t.Fatalf("rebuild all from the v1 log: %v", err)
	}
	s.quiesce(t)
	s.checkConverged(t)
	s.checkOnlyVersion(t, 2)
	rep, err := verify.Run(ctx, verify.Config{
		Slot: s.Slot, Users: len(s.users), Seed: 1, Logger: s.Log,
		Prefix: s.Prefix, Policy: policies.Policy(),
		Kafka: s.Broker.Conn(), Topic: topic, GroupPrefix: s.GroupPrefix,
	}, s.DB.Pool, s.Redis)
	if err != nil {
		t.Fatal(err)
	}
	if !rep.OK() || rep.Users == 0 {
		t.Fatalf("verify after the rebuild from the v1 log: %s; %v", rep.Summary(), rep.Differences)
	}
	t.Logf("%d events (%d posts as v1) replayed and rebuilt; verify: %s", total, tag.RowsAffected(), rep.Summary())
}
