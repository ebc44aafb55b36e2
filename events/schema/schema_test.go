package schema_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/feedco/feed/commands"
	"github.com/feedco/feed/events"
	"github.com/feedco/feed/events/schema"
	"github.com/feedco/feed/internal/snowflake"
	"github.com/feedco/feed/testkit/testenv"
)

// TestSchemasMatchTypes fails when a registered event type and version
// has no checked-in schema, when a checked-in schema differs from what
// the Go types generate, or when a schema file names no registered type.
// With -update it rewrites them (`go generate ./events/schema`).
func TestSchemasMatchTypes(t *testing.T) {
	want, err := generated()
	if err != nil {
		t.Fatal(err)
	}
	if *update {
		if err := writeAll(want); err != nil {
			t.Fatalf("write the schemas: %v", err)
		}
		return
	}
	for name, b := range want {
		cur, err := os.ReadFile(name)
		if errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s: no schema checked in; run `go generate ./events/schema`", name)
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(cur, b) {
			t.Errorf("%s differs from what the Go types generate; run `go generate ./events/schema` "+
				"(a released version's payload does not change, a change is a new version; the envelope only gains optional fields: docs/events.md)", name)
		}
	}
	files, err := filepath.Glob("*.json")
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range files {
		if _, ok := want[n]; !ok {
			t.Errorf("%s: no registered event type generates it (events.Registered); run `go generate ./events/schema`", n)
		}
	}
	if got, n := schema.Types(), len(events.Registered()); len(got) != n {
		t.Errorf("embedded schemas of %d types, %d registered", len(got), n)
	}
}

// TestEveryTypeIsRegistered fails when package events declares an event
// type name (a versioned string constant such as post.created.v1) that
// events.Registered does not list, so a new type cannot go without a
// schema.
func TestEveryTypeIsRegistered(t *testing.T) {
	registered := map[string]bool{}
	for _, ev := range events.Registered() {
		if registered[ev.EventType()] {
			t.Errorf("%s registered twice", ev.EventType())
		}
		registered[ev.EventType()] = true
	}
	versioned := regexp.MustCompile(typePattern)
	pkgs, err := parser.ParseDir(token.NewFileSet(), "..", func(fi os.FileInfo) bool {
		return !strings.HasSuffix(fi.Name(), "_test.go")
	}, 0)
	if err != nil {
		t.Fatal(err)
	}
	found := 0
	for _, pkg := range pkgs {
		for name, f := range pkg.Files {
			for _, d := range f.Decls {
				g, ok := d.(*ast.GenDecl)
				if !ok || g.Tok != token.CONST {
					continue
				}
				for _, spec := range g.Specs {
					for _, v := range spec.(*ast.ValueSpec).Values {
						lit, ok := v.(*ast.BasicLit)
						if !ok || lit.Kind != token.STRING {
							continue
						}
						s, _ := strconv.Unquote(lit.Value)
						if !versioned.MatchString(s) {
							continue
						}
						found++
						if !registered[s] {
							t.Errorf("%s declares event type %s, which events.Registered does not list", filepath.Base(name), s)
						}
					}
				}
			}
		}
	}
	if found < len(registered) {
		t.Errorf("found %d type constants in package events, %d registered: the scan is broken", found, len(registered))
	}
}

// TestEncodedEventsValidate encodes every registered type, with every
// field set and with every field zero, and validates the payload against
// its schema and the envelope CDC writes around it against envelope.json.
func TestEncodedEventsValidate(t *testing.T) {
	for _, zero := range events.Registered() {
		typ := zero.EventType()
		full := filled(reflect.TypeOf(zero)).Interface().(events.Event)
		for _, ev := range []events.Event{full, zero} {
			p, err := events.Encode(ev)
			if err != nil {
				t.Fatal(err)
			}
			if err := schema.Validate(typ, p); err != nil {
				t.Errorf("%s %s: %v", typ, p, err)
			}
			env := events.Envelope{EventID: "0194f1c2-7b3a-7d4e-9f00-112233445566", Position: 42, StreamID: ev.StreamID(),
				StreamVersion: 1, Type: typ, Payload: p, RecordedAt: time.Now(),
				Metadata: events.Metadata{CorrelationID: "c", CausationID: "r", Actor: "7",
					TraceParent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"},
				CommitLSN: "16/B374D848", AudienceKey: ev.AudienceKey()}
			b, err := env.AppendJSON(nil, false)
			if err != nil {
				t.Fatal(err)
			}
			if err := schema.ValidateEnvelope(b); err != nil {
				t.Errorf("envelope of %s %s: %v", typ, b, err)
			}
		}
	}
}

// TestSchemasReject shows the schemas are not vacuous: a missing
// required field, an unknown one, a number where a decimal string is
// published, and a payload of another type all fail.
func TestSchemasReject(t *testing.T) {
	for _, c := range []struct{ typ, payload string }{
		{events.TypePostCreated, `{"postId":"1","authorId":"2","content":"x","createdAt":"2026-12-06T09:41:12Z"}`},
		{events.TypePostCreated, `{"postId":"1","authorId":"2","content":"x","createdAt":"2026-12-06T09:41:12Z","authorFollowers":0,"extra":1}`},
		{events.TypeFollowed, `{"followerId":1,"followeeId":"2","followeeFollowers":1}`},
		{events.TypeFollowed, `{"followerId":"x","followeeId":"2","followeeFollowers":1}`},
		{events.TypePostDeleted, `{"postId":"1","authorId":"2","deletedAt":"yesterday"}`},
	} {
		if err := schema.Validate(c.typ, []byte(c.payload)); err == nil {
			t.Errorf("%s accepted %s", c.typ, c.payload)
		}
	}
	if err := schema.Validate("post.created.v0", []byte(`{}`)); !errors.Is(err, schema.ErrNoSchema) {
		t.Errorf("a type without a schema: %v, want ErrNoSchema", err)
	}
	env := `{"eventId":"0194f1c2-7b3a-7d4e-9f00-112233445566","position":"1","streamId":"follow-1-2","streamVersion":1,` +
		`"type":"user.followed.v1","payload":{"userId":"1","name":"ana"},"metadata":{},"recordedAt":"2026-12-06T09:41:12Z","audienceKey":"2"}`
	if err := schema.ValidateEnvelope([]byte(env)); err == nil {
		t.Errorf("an envelope whose payload is of another type validated")
	}
}

// TestCommandsWriteValidEvents runs the real commands against PostgreSQL
// and validates every event they wrote, payload and metadata, against the
// published schemas.
func TestCommandsWriteValidEvents(t *testing.T) {
	ctx := context.Background()
	db := testenv.NewDB(t)
	ids, err := snowflake.New(1)
	if err != nil {
		t.Fatal(err)
	}
	c, err := commands.New(db.Pool, ids, commands.Config{})
	if err != nil {
		t.Fatal(err)
	}
	tr := commands.Trace{CorrelationID: "corr-1", CausationID: "req-1"}
	must := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	ana, err := c.RegisterUser.Handle(ctx, commands.RegisterUser{Name: "ana", Trace: tr})
	must("register", err)
	bo, err := c.RegisterUser.Handle(ctx, commands.RegisterUser{Name: "bo <b>é"})
	must("register", err)
	_, err = c.Follow.Handle(ctx, commands.Follow{FollowerID: bo.ID, FolloweeID: ana.ID, Trace: tr})
	must("follow", err)
	p, err := c.CreatePost.Handle(ctx, commands.CreatePost{AuthorID: ana.ID, Content: "olá <b>&", Trace: tr})
	must("post", err)
	q, err := c.CreatePost.Handle(ctx, commands.CreatePost{AuthorID: bo.ID, Content: "a reply that quotes", ReplyTo: p.ID, QuoteOf: p.ID,
		Media: []events.Media{{URL: "https://media.example/a.png", MIMEType: "image/png", Alt: "a cat", Width: 640, Height: 480}}, Trace: tr})
	must("reply", err)
	_, err = c.Repost.Handle(ctx, commands.Repost{UserID: bo.ID, PostID: p.ID, Trace: tr})
	must("repost", err)
	_, err = c.Unrepost.Handle(ctx, commands.Unrepost{UserID: bo.ID, PostID: p.ID})
	must("unrepost", err)
	_, err = c.Like.Handle(ctx, commands.Like{UserID: ana.ID, PostID: q.ID, Trace: tr})
	must("like", err)
	_, err = c.Unlike.Handle(ctx, commands.Unlike{UserID: ana.ID, PostID: q.ID})
	must("unlike", err)
	_, err = c.EditPost.Handle(ctx, commands.EditPost{ActorID: ana.ID, PostID: p.ID, Content: "edited"})
	must("edit", err)
	_, err = c.DeletePost.Handle(ctx, commands.DeletePost{ActorID: ana.ID, PostID: p.ID})
	must("delete", err)
	_, err = c.Mute.Handle(ctx, commands.Mute{MuterID: bo.ID, MutedID: ana.ID})
	must("mute", err)
	_, err = c.Unmute.Handle(ctx, commands.Unmute{MuterID: bo.ID, MutedID: ana.ID})
	must("unmute", err)
	_, err = c.Unfollow.Handle(ctx, commands.Unfollow{FollowerID: bo.ID, FolloweeID: ana.ID})
	must("unfollow", err)
	_, err = c.Follow.Handle(ctx, commands.Follow{FollowerID: bo.ID, FolloweeID: ana.ID})
	must("follow again", err)
	_, err = c.Block.Handle(ctx, commands.Block{BlockerID: ana.ID, BlockedID: bo.ID})
	must("block", err)
	_, err = c.Unblock.Handle(ctx, commands.Unblock{BlockerID: ana.ID, BlockedID: bo.ID})
	must("unblock", err)

	rows, err := db.Pool.Query(ctx, `SELECT event_id::text, position, stream_id, stream_version, type, payload::text, metadata::text, recorded_at
		FROM events ORDER BY position`)
	must("read the log", err)
	defer rows.Close()
	var seen []string
	for rows.Next() {
		var env events.Envelope
		var payload, meta string
		must("scan", rows.Scan(&env.EventID, &env.Position, &env.StreamID, &env.StreamVersion, &env.Type, &payload, &meta, &env.RecordedAt))
		if err := schema.Validate(env.Type, []byte(payload)); err != nil {
			t.Errorf("%s at %d: %v", env.Type, env.Position, err)
		}
		must("metadata", json.Unmarshal([]byte(meta), &env.Metadata))
		env.Payload = json.RawMessage(payload)
		ev, err := events.DefaultCodec.Decode(env.Type, env.Payload)
		must("decode", err)
		env.AudienceKey = ev.AudienceKey()
		b, err := env.AppendJSON(nil, true)
		must("envelope", err)
		if err := schema.ValidateEnvelope(b); err != nil {
			t.Errorf("envelope %s: %v", b, err)
		}
		if !slices.Contains(seen, env.Type) {
			seen = append(seen, env.Type)
		}
	}
	must("read the log", rows.Err())
	for _, typ := range []string{events.TypeUserRegistered, events.TypeFollowed, events.TypePostCreated, events.TypePostEdited,
		events.TypePostDeleted, events.TypeMuted, events.TypeUnmuted, events.TypeUnfollowed, events.TypeBlocked, events.TypeUnblocked,
		events.TypePostReposted, events.TypePostUnreposted, events.TypePostLiked, events.TypePostUnliked} {
		if !slices.Contains(seen, typ) {
			t.Errorf("the commands wrote no %s (wrote %v)", typ, seen)
		}
	}
}
