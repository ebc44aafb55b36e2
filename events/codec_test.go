package events

import (
	"encoding/json"
	"errors"
	"reflect"
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
		PostCreated{PostID: 1<<62 + 1, AuthorID: 8, Content: "re", CreatedAt: created, AuthorFollowers: 1,
			ReplyTo: 1 << 62, ReplyRoot: 1<<62 - 5, ReplyToAuthor: 7, QuoteOf: 1<<62 - 9, QuoteAuthor: 9,
			Media: []Media{{URL: "https://cdn.example/a.png", MIMEType: "image/png", Alt: "a cat", Width: 640, Height: 480}}},
		PostReposted{RepostID: 1<<62 + 2, ReposterID: 8, PostID: 1 << 62, AuthorID: 7, CreatedAt: created, ReposterFollowers: 5, Reposts: 2},
		PostUnreposted{RepostID: 1<<62 + 2, ReposterID: 8, PostID: 1 << 62, AuthorID: 7, UnrepostedAt: created, Reposts: 1},
		PostLiked{LikerID: 8, PostID: 1 << 62, AuthorID: 7, LikedAt: created, Likes: 3},
		PostUnliked{LikerID: 8, PostID: 1 << 62, AuthorID: 7, UnlikedAt: created, Likes: 2},
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
			if !reflect.DeepEqual(got, want) {
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

// TestUpcastPostCreatedV1: a post.created.v1 as stored before v2 existed
// reads as the current PostCreated with no reply, quote or media, through
// every way the codec decodes (Decode, the audience key, a Kafka message).
func TestUpcastPostCreatedV1(t *testing.T) {
	v1 := json.RawMessage(`{"postId":"9007199254740993","authorId":"7","content":"olá","createdAt":"2026-11-30T09:41:12.345Z","authorFollowers":3}`)
	want := PostCreated{PostID: 9007199254740993, AuthorID: 7, Content: "olá", CreatedAt: time.Date(2026, 11, 30, 9, 41, 12, 345_000_000, time.UTC), AuthorFollowers: 3}
	got, err := DefaultCodec.Decode(TypePostCreatedV1, v1)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) || got.EventType() != TypePostCreated {
		t.Fatalf("upcast v1: got %#v, want %#v", got, want)
	}
	if k, err := DefaultCodec.AudienceKeyOf(TypePostCreatedV1, v1); err != nil || k != 7 {
		t.Fatalf("audience key of a v1: %d, %v", k, err)
	}
	msg := []byte(`{"eventId":"e","position":"3","streamId":"post-9007199254740993","streamVersion":1,"type":"post.created.v1","payload":` + string(v1) + `,"metadata":{},"recordedAt":"2026-11-30T09:41:12Z","audienceKey":"7"}`)
	env, ev, err := DefaultCodec.DecodeEnvelopeJSON(TypePostCreatedV1, msg)
	if err != nil || env.Type != TypePostCreatedV1 || !reflect.DeepEqual(ev, want) {
		t.Fatalf("a v1 message: %+v %#v %v", env, ev, err)
	}
	// A v2 of a plain post is the v1 payload under the new name.
	b, err := Encode(want)
	if err != nil {
		t.Fatal(err)
	}
	var a, c map[string]any
	if json.Unmarshal(b, &a) != nil || json.Unmarshal(v1, &c) != nil || !reflect.DeepEqual(a, c) {
		t.Fatalf("a plain post's v2 payload %s differs from v1's %s", b, v1)
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
	if k := (PostReposted{ReposterID: 4, PostID: 5, AuthorID: 3}).AudienceKey(); k != 4 {
		t.Fatalf("reposts are keyed by the reposter, got %d", k)
	}
	if k := (PostLiked{LikerID: 4, PostID: 5, AuthorID: 3}).AudienceKey(); k != 3 {
		t.Fatalf("likes are keyed by the liked post's author, got %d", k)
	}
}
