package replay

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/feedco/feed/events"
	"github.com/feedco/feed/internal/testenv"
)

// TestAudienceFastPath: for every current event type, the fast path reads
// the same audience key as the type's AudienceKey method, from the payload
// as PostgreSQL prints it (jsonb, keys reordered, spaces) and as Go
// encodes it; odd payloads fall back to the codec.
func TestAudienceFastPath(t *testing.T) {
	t.Parallel()
	db := testenv.NewDB(t)
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	evs := []events.Event{
		events.UserRegistered{UserID: 11, Name: `a "quoted" {name}, [x]`},
		events.PostCreated{PostID: 1 << 62, AuthorID: 12, Content: `{"authorId":"999"}, \ "`, CreatedAt: now, AuthorFollowers: 3},
		events.PostDeleted{PostID: 5, AuthorID: 13, DeletedAt: now},
		events.Followed{FollowerID: 99, FolloweeID: 14, FolloweeFollowers: 1},
		events.Unfollowed{FollowerID: 98, FolloweeID: 15},
	}
	if len(evs) != len(audienceField) {
		t.Fatalf("%d types tested, %d in audienceField", len(evs), len(audienceField))
	}
	for _, e := range evs {
		goJSON, err := events.Encode(e)
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
			if got := audienceKey(e.EventType(), []byte(p)); got != e.AudienceKey() {
				t.Errorf("%s %s: audience key %d, want %d", e.EventType(), p, got, e.AudienceKey())
			}
		}
	}
	// Escaped or nested values take the codec's way, with the same answer.
	for _, p := range []string{`{"name": "x", "userId": "1\u0032"}`, `{"a": {"userId": "7"}, "userId": "8"}`, `{"a": [1, {"b": "]"}], "userId": "9"}`} {
		want, _ := events.DefaultCodec.Decode(events.TypeUserRegistered, json.RawMessage(p))
		if got := audienceKey(events.TypeUserRegistered, []byte(p)); got != want.AudienceKey() {
			t.Errorf("%s: %d, want %d", p, got, want.AudienceKey())
		}
	}
	if got := audienceKey("post.created.v0", []byte(`{"authorId":"1"}`)); got != 0 {
		t.Errorf("unknown type: %d, want 0 as CDC", got)
	}
}
