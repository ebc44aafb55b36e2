package events

import (
	"encoding/json"
	"errors"
	"testing"
	"time"
)

func TestRoundTrip(t *testing.T) {
	created := time.Date(2026, 11, 30, 9, 41, 12, 345_000_000, time.UTC)
	cases := []Event{
		UserRegistered{UserID: 7, Name: "ana"},
		PostCreated{PostID: 1 << 62, AuthorID: 7, Content: "olá", CreatedAt: created, AuthorFollowers: 3},
		PostDeleted{PostID: 1 << 62, AuthorID: 7, DeletedAt: created},
		PostEdited{PostID: 1 << 62, AuthorID: 7, Content: "olá, edited", Version: 3, EditedAt: created},
		Followed{FollowerID: 1, FolloweeID: 7, FolloweeFollowers: 4},
		Unfollowed{FollowerID: 1, FolloweeID: 7, FolloweeFollowers: 3},
		Muted{MuterID: 21, MutedID: 16, Following: true, MutedFollowers: 2},
		Unmuted{MuterID: 21, MutedID: 16, Following: true, MutedFollowers: 2},
		Blocked{BlockerID: 22, BlockedID: 17},
		Unblocked{BlockerID: 22, BlockedID: 17},
	}
	for _, want := range cases {
		t.Run(want.EventType(), func(t *testing.T) {
			b, err := Encode(want)
			if err != nil {
				t.Fatal(err)
			}
			got, err := DefaultCodec.Decode(want.EventType(), b)
			if err != nil {
				t.Fatal(err)
			}
			if got != want {
				t.Fatalf("round trip: got %#v, want %#v", got, want)
			}
		})
	}
}

func TestIDsAreJSONStrings(t *testing.T) {
	b, _ := Encode(PostCreated{PostID: 9007199254740993, AuthorID: 2})
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	if m["postId"] != "9007199254740993" || m["authorId"] != "2" {
		t.Fatalf("ids must be strings past 2^53: %s", b)
	}
}

func TestUpcastChain(t *testing.T) {
	// A hypothetical v0 that named the author "user" and had no follower count.
	c := NewCodec(map[string]Upcaster{
		"post.created.v0": func(p json.RawMessage) (string, json.RawMessage, error) {
			var old struct {
				PostID  string `json:"postId"`
				User    string `json:"user"`
				Content string `json:"content"`
			}
			if err := json.Unmarshal(p, &old); err != nil {
				return "", nil, err
			}
			np, err := json.Marshal(map[string]any{"postId": old.PostID, "authorId": old.User, "content": old.Content, "createdAt": "2020-01-01T00:00:00Z"})
			return TypePostCreated, np, err
		},
	})
	got, err := c.Decode("post.created.v0", json.RawMessage(`{"postId":"5","user":"9","content":"hi"}`))
	if err != nil {
		t.Fatal(err)
	}
	pc, ok := got.(PostCreated)
	if !ok || pc.PostID != 5 || pc.AuthorID != 9 || pc.Content != "hi" {
		t.Fatalf("upcast: got %#v", got)
	}
}

func TestUnknownType(t *testing.T) {
	_, err := DefaultCodec.Decode("nope.v1", json.RawMessage(`{}`))
	if !errors.Is(err, ErrUnknownType) {
		t.Fatalf("want ErrUnknownType, got %v", err)
	}
}

func TestAudienceKey(t *testing.T) {
	if k := (Followed{FollowerID: 1, FolloweeID: 2}).AudienceKey(); k != 2 {
		t.Fatalf("follow events are keyed by the followee, got %d", k)
	}
	if k := (PostDeleted{PostID: 5, AuthorID: 3}).AudienceKey(); k != 3 {
		t.Fatalf("post events are keyed by the author, got %d", k)
	}
}
