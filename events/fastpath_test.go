package events

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/feedco/feed/testkit/testenv"
)

// TestAudienceFastPath: for every current event type, the fast path reads
// the same audience key as the type's AudienceKey method, from the payload
// as PostgreSQL prints it (jsonb, keys reordered, spaces) and as Go
// encodes it; odd payloads fall back to the codec.
func TestAudienceFastPath(t *testing.T) {
	t.Parallel()
	db := testenv.NewDB(t)
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	evs := []Event{
		UserRegistered{UserID: 11, Name: `a "quoted" {name}, [x]`},
		PostCreated{PostID: 1 << 62, AuthorID: 12, Content: `{"authorId":"999"}, \ "`, CreatedAt: now, AuthorFollowers: 3},
		PostDeleted{PostID: 5, AuthorID: 13, DeletedAt: now},
		PostEdited{PostID: 6, AuthorID: 18, Content: `{"authorId":"999"}`, Version: 2, EditedAt: now},
		Followed{FollowerID: 99, FolloweeID: 14, FolloweeFollowers: 1},
		Unfollowed{FollowerID: 98, FolloweeID: 15},
		Muted{MuterID: 21, MutedID: 16, Following: true, MutedFollowers: 2},
		Unmuted{MuterID: 21, MutedID: 16, Following: true, MutedFollowers: 2},
		Blocked{BlockerID: 22, BlockedID: 17},
		Unblocked{BlockerID: 22, BlockedID: 17},
		PostReposted{RepostID: 30, ReposterID: 23, PostID: 6, AuthorID: 18, CreatedAt: now, ReposterFollowers: 1, Reposts: 1},
		PostUnreposted{RepostID: 30, ReposterID: 23, PostID: 6, AuthorID: 18, UnrepostedAt: now},
		PostLiked{LikerID: 24, PostID: 6, AuthorID: 19, LikedAt: now, Likes: 1},
		PostUnliked{LikerID: 24, PostID: 6, AuthorID: 19, UnlikedAt: now},
	}
	if len(evs) != len(audienceField) {
		t.Fatalf("%d types tested, %d in audienceField", len(evs), len(audienceField))
	}
	for _, e := range evs {
		goJSON, err := Encode(e)
		if err != nil {
			t.Fatal(err)
		}
		var pgJSON string
		if err := db.Pool.QueryRow(context.Background(), `SELECT $1::jsonb::text`, string(goJSON)).Scan(&pgJSON); err != nil {
			t.Fatal(err)
		}
		for _, p := range []string{string(goJSON), pgJSON} {
			if _, ok := topLevelString([]byte(p), audienceField[e.EventType()]); !ok {
				t.Errorf("%s: fast path missed in %s", e.EventType(), p)
			}
			if got := audienceKeyOf(e.EventType(), []byte(p)); got != e.AudienceKey() {
				t.Errorf("%s %s: audience key %d, want %d", e.EventType(), p, got, e.AudienceKey())
			}
		}
	}
	// Escaped or nested values take the codec's way, with the same answer.
	for _, p := range []string{`{"name": "x", "userId": "1\u0032"}`, `{"a": {"userId": "7"}, "userId": "8"}`, `{"a": [1, {"b": "]"}], "userId": "9"}`} {
		want, _ := DefaultCodec.Decode(TypeUserRegistered, json.RawMessage(p))
		if got := audienceKeyOf(TypeUserRegistered, []byte(p)); got != want.AudienceKey() {
			t.Errorf("%s: %d, want %d", p, got, want.AudienceKey())
		}
	}
	if got := audienceKeyOf("post.created.v0", []byte(`{"authorId":"1"}`)); got != 0 {
		t.Errorf("unknown type: %d, want 0 as CDC", got)
	}
}

func audienceKeyOf(typ string, p []byte) int64 {
	k, _ := DefaultCodec.AudienceKeyOf(typ, p)
	return k
}

// TestParseMetadata: the fast path agrees with json.Unmarshal on what the
// commands write, on PostgreSQL's jsonb text, and on odd inputs (which take
// the slow path).
func TestParseMetadata(t *testing.T) {
	for _, in := range []string{
		`{}`, ` { } `,
		`{"correlationId":"c1","causationId":"c0","actor":"12"}`,
		`{"actor": "12", "causationId": "", "correlationId": "corr-1"}`,
		`{"actor": "12", "extra": {"actor": "99", "x": [1, "}"]}, "n": 5}`,
		`{"correlationId": "a\"b"}`,
		`{"CorrelationId": "case"}`,
		`{"actor": 12}`,
		`{"actor": "1", "actor": "2"}`,
		`{"actor": "1",}`, `{"actor" "1"}`, `[]`, ``,
	} {
		var want Metadata
		werr := json.Unmarshal([]byte(in), &want)
		got, err := ParseMetadata([]byte(in))
		if (err != nil) != (werr != nil) || got != want {
			t.Errorf("%q: got %+v, %v; json.Unmarshal %+v, %v", in, got, err, want, werr)
		}
	}
	if !parseMetadataFast([]byte(`{"actor": "12", "causationId": "", "correlationId": "corr-1"}`), new(Metadata)) {
		t.Error("jsonb's form of command metadata missed the fast path")
	}
}

// FuzzParseMetadata: ParseMetadata is json.Unmarshal, only faster.
func FuzzParseMetadata(f *testing.F) {
	f.Add(`{"actor": "12", "causationId": "", "correlationId": "corr-1"}`)
	f.Add(`{"a": [{"b": "}"}], "actor": "x"}`)
	f.Fuzz(func(t *testing.T, in string) {
		var want Metadata
		werr := json.Unmarshal([]byte(in), &want)
		got, err := ParseMetadata([]byte(in))
		if werr == nil && (err != nil || got != want) {
			t.Fatalf("%q: got %+v, %v; json.Unmarshal %+v", in, got, err, want)
		}
		if werr != nil && err == nil && !parseMetadataFast([]byte(in), new(Metadata)) {
			t.Fatalf("%q: slow path accepted what json.Unmarshal refused", in)
		}
	})
}
