package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/feedco/feed/internal/kafka"
	"github.com/feedco/feed/projections"
	"github.com/feedco/feed/testkit/kafkatest"
	"github.com/feedco/feed/testkit/testenv"
)

// `feed poison` against a real broker and PostgreSQL: list, show (JSON),
// discard, list --all, a replay that cannot decode its record (exit 1,
// still pending), the usage errors (exit 2), and the counts in
// `feed status`'s poison section.
func TestPoisonCommands(t *testing.T) {
	t.Parallel()
	db := testenv.NewDB(t)
	b := kafkatest.Start(t)
	topic := b.Topic(t, 1)
	group := projections.GroupPosts
	mk := func(uuid string, payload string) *message.Message {
		m := message.NewMessage(uuid, []byte(payload))
		m.Metadata.Set(kafka.MetaName, "post.created.v1")
		m.Metadata.Set(kafka.MetaPartitionKey, "7")
		m.Metadata.Set(kafka.MetaPosition, "12")
		m.Metadata.Set(kafka.MetaPoisonGroup, group)
		m.Metadata.Set(kafka.MetaPoisonReason, "posts: apply post.created.v1: boom\nstack")
		return m
	}
	b.Publish(t, kafka.PoisonTopic(topic), mk("e-1", `{"type":`), mk("e-2", `{"eventId":"e-2"}`))
	cfg := Config{DatabaseURL: db.URL, RedisURL: testenv.RedisURL(), KafkaBrokers: b.Addrs(), Topic: topic}

	code, out, stderr := runCLI(t, cfg, "poison", "list")
	if code != 0 || !strings.Contains(out, "0:0") || !strings.Contains(out, "0:1") || !strings.Contains(out, group) || strings.Contains(out, "stack") {
		t.Fatalf("list: exit %d\n%s%s", code, out, stderr)
	}
	code, out, stderr = runCLI(t, cfg, "poison", "show", "0:1")
	var shown map[string]any
	if code != 0 || json.Unmarshal([]byte(out), &shown) != nil || shown["group"] != group || shown["state"] != "pending" || shown["uuid"] != "e-2" {
		t.Fatalf("show: exit %d\n%s%s", code, out, stderr)
	}
	for _, args := range [][]string{{"poison", "show", "9:9"}, {"poison", "show", "x"}, {"poison", "show"}, {"poison", "discard"}, {"poison", "replay"}} {
		if code, out, stderr := runCLI(t, cfg, args...); code != 2 {
			t.Errorf("feed %v: exit %d, want 2\n%s%s", args, code, out, stderr)
		}
	}
	if code, out, stderr := runCLI(t, cfg, "poison", "discard", "--id", "0:1"); code != 0 || !strings.Contains(out, "discarded 0:1") {
		t.Fatalf("discard: exit %d\n%s%s", code, out, stderr)
	}
	if _, out, _ := runCLI(t, cfg, "poison", "list"); listsID(out, "0:1") || !listsID(out, "0:0") {
		t.Fatalf("list after the discard:\n%s", out)
	}
	if _, out, _ := runCLI(t, cfg, "poison", "list", "--all"); !strings.Contains(out, "discarded") || !strings.Contains(out, "0:0") {
		t.Fatalf("list --all:\n%s", out)
	}
	code, out, stderr = runCLI(t, cfg, "poison", "replay", "--group", group)
	if code != 1 || !strings.Contains(out, "NOT replayed") || !strings.Contains(out, "decode") {
		t.Fatalf("replay of an undecodable record: exit %d\n%s%s", code, out, stderr)
	}

	a := &App{Cfg: cfg, Pool: db.Pool}
	var st bytes.Buffer
	if err := printPoisonStatus(context.Background(), a, &st); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(st.String(), group) || !strings.Contains(st.String(), "1 pending, 0 replayed, 1 discarded") {
		t.Fatalf("status:\n%s", st.String())
	}
}

// listsID reports whether the table out of `feed poison list` has a row
// for id (its first column: a time in another column may contain the
// same characters).
func listsID(out, id string) bool {
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) > 0 && f[0] == id {
			return true
		}
	}
	return false
}
