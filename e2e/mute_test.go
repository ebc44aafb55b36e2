package e2e

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/feedco/feed/homefeed"
	"github.com/feedco/feed/readmodel"
	"github.com/feedco/feed/verify"
)

// Mutes through the whole pipeline and the HTTP API: the codes of
// PUT/DELETE /api/muting/{userId}; a muted author's posts, those already in
// the inbox included, leave the home feed (a pushed author and a pulled
// celebrity), are not pushed while the mute stands, and come back on
// unmute; follows and counts stay; the PostgreSQL path (a lost inbox)
// honours the mute too; the events are in the log.
func TestMuteThroughPipeline(t *testing.T) {
	t.Parallel()
	testMuteThroughPipeline(t)
}

// userAPI is the few calls the feature tests make, failing the test on an
// unexpected status.
type userAPI struct {
	t *testing.T
	s *system
}

func (a userAPI) newUser(name string) (int64, string) {
	a.t.Helper()
	var u apiUser
	if err := a.s.call(context.Background(), http.MethodPost, "/api/users", "", "", map[string]string{"name": name}, &u, http.StatusCreated, nil); err != nil {
		a.t.Fatal(err)
	}
	id, err := strconv.ParseInt(u.ID, 10, 64)
	if err != nil {
		a.t.Fatal(err)
	}
	return id, a.s.signer.Sign(id, time.Hour)
}

// do sends a bodiless request (body nil) or a JSON one and wants status.
func (a userAPI) do(method, path, tok string, body any, want int) {
	a.t.Helper()
	if err := a.s.call(context.Background(), method, path, tok, "", body, nil, want, nil); err != nil {
		a.t.Fatal(err)
	}
}

func (a userAPI) post(tok, content string) apiPost {
	a.t.Helper()
	var p apiPost
	if err := a.s.call(context.Background(), http.MethodPost, "/api/posts", tok, "", map[string]string{"content": content}, &p, http.StatusCreated, nil); err != nil {
		a.t.Fatal(err)
	}
	return p
}

func (a userAPI) user(tok string, id int64) apiUser {
	a.t.Helper()
	var u apiUser
	if err := a.s.call(context.Background(), http.MethodGet, fmt.Sprint("/api/users/", id), tok, "", nil, &u, http.StatusOK, nil); err != nil {
		a.t.Fatal(err)
	}
	return u
}

// feedMatchesTruth reads u's whole home feed (pages of 4) and fails on any
// difference from the SQL truth; it returns the feed.
func (a userAPI) feedMatchesTruth(what string, u int64, tok string) []apiPost {
	a.t.Helper()
	ctx := context.Background()
	got, err := a.s.readAll(ctx, "/api/feed", tok, 4, 500)
	if err != nil {
		a.t.Fatalf("%s: %v", what, err)
	}
	truth, err := verify.LoadTruth(ctx, a.s.DB.Pool)
	if err != nil {
		a.t.Fatal(err)
	}
	want, err := verify.TruthFeed(ctx, a.s.DB.Pool, u)
	if err != nil {
		a.t.Fatal(err)
	}
	if d := truth.Diff(u, got, want); len(d) > 0 {
		a.t.Fatalf("%s: feed of %d differs from the truth: %v", what, u, d)
	}
	return got
}

// countByAuthor counts the posts of author in a feed.
func countByAuthor(feed []apiPost, author int64) int {
	n := 0
	for _, p := range feed {
		if p.AuthorID == strconv.FormatInt(author, 10) {
			n++
		}
	}
	return n
}

// eventCount is how many events of typ the log holds.
func eventCount(t *testing.T, s *system, typ string) int {
	t.Helper()
	var n int
	if err := s.DB.Pool.QueryRow(context.Background(), `SELECT count(*) FROM events WHERE type = $1`, typ).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// inboxPosts is every post id in u's inbox, whatever the floor.
func inboxPosts(t *testing.T, s *system, u int64) []int64 {
	t.Helper()
	pol := readmodel.Policy{InboxMax: s.pol.InboxMax}.WithDefaults()
	ids, err := homefeed.NewInboxes(s.Keys, pol).Posts(context.Background(), s.Redis, u)
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

func testMuteThroughPipeline(t *testing.T) {
	pol := policies{CelebrityThreshold: 3, InboxMax: 20, InboxTrimSlack: 3, TimelineMax: 15, BackfillPosts: 3,
		FanoutBatch: 4, CacheTTL: 300 * time.Millisecond}
	s := startSystem(t, pol)
	a := userAPI{t, s}
	reader, rtok := a.newUser("reader")
	author, atok := a.newUser("author")
	star, stok := a.newUser("star")
	other, otok := a.newUser("other")
	for _, id := range []int64{author, star, other} {
		a.do(http.MethodPut, fmt.Sprint("/api/following/", id), rtok, nil, http.StatusNoContent)
	}
	for i := range 3 { // star's fans make it a celebrity (pulled)
		_, tok := a.newUser(fmt.Sprint("fan", i))
		a.do(http.MethodPut, fmt.Sprint("/api/following/", star), tok, nil, http.StatusNoContent)
	}
	a.feedMatchesTruth("first read", reader, rtok) // the reader is active: pushes from now on
	var authorPosts []apiPost
	for i := range 5 {
		authorPosts = append(authorPosts, a.post(atok, fmt.Sprint("author ", i)))
		a.post(stok, fmt.Sprint("star ", i))
		a.post(otok, fmt.Sprint("other ", i))
	}
	s.quiesce(t, 2*time.Minute)
	feed := a.feedMatchesTruth("before the mute", reader, rtok)
	if countByAuthor(feed, author) != 5 || countByAuthor(feed, star) != 5 {
		t.Fatalf("before the mute: %d posts of the author, %d of the star, want 5 each", countByAuthor(feed, author), countByAuthor(feed, star))
	}
	pushed := inboxPosts(t, s, reader)
	if !slices.Contains(pushed, mustID(t, authorPosts[4].ID)) {
		t.Fatalf("the author's newest post was not pushed to the reader: inbox %v", pushed)
	}

	// The codes.
	a.do(http.MethodPut, fmt.Sprint("/api/muting/", author), rtok, nil, http.StatusNoContent)
	a.do(http.MethodPut, fmt.Sprint("/api/muting/", author), rtok, nil, http.StatusNoContent) // repeat
	a.do(http.MethodPut, fmt.Sprint("/api/muting/", star), rtok, nil, http.StatusNoContent)
	a.do(http.MethodPut, fmt.Sprint("/api/muting/", reader), rtok, nil, http.StatusBadRequest)  // self
	a.do(http.MethodPut, "/api/muting/987654321", rtok, nil, http.StatusNotFound)               // unknown
	a.do(http.MethodDelete, "/api/muting/987654321", rtok, nil, http.StatusNotFound)            // unknown
	a.do(http.MethodPut, "/api/muting/x1", rtok, nil, http.StatusBadRequest)                    // bad id
	a.do(http.MethodDelete, fmt.Sprint("/api/muting/", other), rtok, nil, http.StatusNoContent) // not muted: no-op
	a.do(http.MethodPut, fmt.Sprint("/api/muting/", author), "", nil, http.StatusUnauthorized)  // no identity
	if n := eventCount(t, s, "user.muted.v1"); n != 2 {
		t.Fatalf("%d user.muted.v1 events after two mutes and a repeat, want 2", n)
	}
	if n := eventCount(t, s, "user.unmuted.v1"); n != 0 {
		t.Fatalf("%d user.unmuted.v1 events after an unmute of an account not muted, want 0", n)
	}

	// Muted: gone from the feed, those in the inbox included; follows and
	// counts unchanged.
	s.quiesce(t, 2*time.Minute)
	feed = a.feedMatchesTruth("muted", reader, rtok)
	if countByAuthor(feed, author) != 0 || countByAuthor(feed, star) != 0 || countByAuthor(feed, other) != 5 {
		t.Fatalf("muted: %d posts of the author, %d of the star, %d of the other, want 0, 0, 5",
			countByAuthor(feed, author), countByAuthor(feed, star), countByAuthor(feed, other))
	}
	if u := a.user(rtok, reader); u.FollowingCount != 3 {
		t.Fatalf("the reader follows %d accounts after muting two, want 3", u.FollowingCount)
	}
	if u := a.user(rtok, author); u.FollowerCount != 1 {
		t.Fatalf("the author has %d followers after the mute, want 1", u.FollowerCount)
	}
	// While muted, the author's posts are not pushed to the reader.
	var during []apiPost
	for i := range 2 {
		during = append(during, a.post(atok, fmt.Sprint("author while muted ", i)))
		a.post(otok, fmt.Sprint("other while muted ", i))
	}
	s.quiesce(t, 2*time.Minute)
	pushed = inboxPosts(t, s, reader)
	for _, p := range append(slices.Clone(authorPosts), during...) {
		if slices.Contains(pushed, mustID(t, p.ID)) {
			t.Fatalf("muted: the author's post %s is in the reader's inbox %v", p.ID, pushed)
		}
	}
	a.feedMatchesTruth("muted, after more posts", reader, rtok)
	// The PostgreSQL path: the inbox lost, the read is served from the
	// source of truth (and rebuilds the inbox), the mute honoured.
	if err := s.Redis.Del(context.Background(), homefeed.Key(s.Keys, reader), homefeed.Key(s.Keys, reader)+"+").Err(); err != nil {
		t.Fatal(err)
	}
	feed = a.feedMatchesTruth("muted, inbox lost", reader, rtok)
	if countByAuthor(feed, author) != 0 {
		t.Fatalf("muted, inbox lost: %d posts of the author", countByAuthor(feed, author))
	}

	// Unmuted: every post of the author is back, those of the mute's time
	// included, in their places.
	a.do(http.MethodDelete, fmt.Sprint("/api/muting/", author), rtok, nil, http.StatusNoContent)
	a.do(http.MethodDelete, fmt.Sprint("/api/muting/", author), rtok, nil, http.StatusNoContent) // repeat
	a.do(http.MethodDelete, fmt.Sprint("/api/muting/", star), rtok, nil, http.StatusNoContent)
	s.quiesce(t, 2*time.Minute)
	feed = a.feedMatchesTruth("unmuted", reader, rtok)
	if countByAuthor(feed, author) != 7 || countByAuthor(feed, star) != 5 {
		t.Fatalf("unmuted: %d posts of the author, %d of the star, want 7 and 5", countByAuthor(feed, author), countByAuthor(feed, star))
	}
	if n := eventCount(t, s, "user.unmuted.v1"); n != 2 {
		t.Fatalf("%d user.unmuted.v1 events, want 2", n)
	}
}

func mustID(t *testing.T, s string) int64 {
	t.Helper()
	id, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// Blocks through the whole pipeline and the HTTP API: the codes of
// PUT/DELETE /api/blocking/{userId}; a block removes the follows both
// ways, each with its Unfollowed and counts, so neither sees the other's
// posts (those already in the inbox included); the blocked account's follow
// of the blocker is 403 problem+json, and so is the blocker's of the
// blocked; an unblock restores no follow.
func TestBlockThroughPipeline(t *testing.T) {
	t.Parallel()
	pol := policies{CelebrityThreshold: 3, InboxMax: 20, InboxTrimSlack: 3, TimelineMax: 15, BackfillPosts: 3,
		FanoutBatch: 4, CacheTTL: 300 * time.Millisecond}
	s := startSystem(t, pol)
	a := userAPI{t, s}
	ana, atok := a.newUser("ana")
	bo, btok := a.newUser("bo")
	cy, ctok := a.newUser("cy")
	for _, f := range [][2]string{{atok, fmt.Sprint(bo)}, {btok, fmt.Sprint(ana)}, {atok, fmt.Sprint(cy)}, {btok, fmt.Sprint(cy)}} {
		a.do(http.MethodPut, "/api/following/"+f[1], f[0], nil, http.StatusNoContent)
	}
	a.feedMatchesTruth("ana's first read", ana, atok)
	a.feedMatchesTruth("bo's first read", bo, btok)
	for i := range 3 {
		a.post(atok, fmt.Sprint("ana ", i))
		a.post(btok, fmt.Sprint("bo ", i))
		a.post(ctok, fmt.Sprint("cy ", i))
	}
	s.quiesce(t, 2*time.Minute)
	if feed := a.feedMatchesTruth("before the block", ana, atok); countByAuthor(feed, bo) != 3 {
		t.Fatalf("before the block: %d of bo's posts in ana's feed, want 3", countByAuthor(feed, bo))
	}
	unfollowsBefore := eventCount(t, s, "user.unfollowed.v1")

	a.do(http.MethodPut, fmt.Sprint("/api/blocking/", bo), atok, nil, http.StatusNoContent)
	a.do(http.MethodPut, fmt.Sprint("/api/blocking/", bo), atok, nil, http.StatusNoContent)   // repeat
	a.do(http.MethodPut, fmt.Sprint("/api/blocking/", ana), atok, nil, http.StatusBadRequest) // self
	a.do(http.MethodPut, "/api/blocking/987654321", atok, nil, http.StatusNotFound)
	a.do(http.MethodDelete, "/api/blocking/987654321", atok, nil, http.StatusNotFound)
	a.do(http.MethodDelete, fmt.Sprint("/api/blocking/", cy), atok, nil, http.StatusNoContent) // not blocked: no-op
	if n := eventCount(t, s, "user.unfollowed.v1") - unfollowsBefore; n != 2 {
		t.Fatalf("the block appended %d Unfollowed events, want 2 (both ways)", n)
	}
	if n := eventCount(t, s, "user.blocked.v1"); n != 1 {
		t.Fatalf("%d user.blocked.v1 events after a block and a repeat, want 1", n)
	}
	if n := eventCount(t, s, "user.unblocked.v1"); n != 0 {
		t.Fatalf("%d user.unblocked.v1 events after an unblock of an account not blocked, want 0", n)
	}
	// The blocked account's follow of the blocker, and the other way.
	err := s.call(context.Background(), http.MethodPut, fmt.Sprint("/api/following/", ana), btok, "", nil, nil, http.StatusForbidden, nil)
	if err != nil {
		t.Fatal(err)
	}
	a.do(http.MethodPut, fmt.Sprint("/api/following/", bo), atok, nil, http.StatusForbidden)
	a.do(http.MethodDelete, fmt.Sprint("/api/following/", ana), btok, nil, http.StatusNoContent) // no follow: no-op
	for _, id := range []int64{ana, bo} {
		if u := a.user(atok, id); u.FollowerCount != 0 || u.FollowingCount != 1 {
			t.Fatalf("after the block, user %d has %d followers and follows %d, want 0 and 1", id, u.FollowerCount, u.FollowingCount)
		}
	}
	a.post(btok, "bo after the block")
	s.quiesce(t, 2*time.Minute)
	for _, r := range []struct {
		u, other int64
		tok      string
	}{{ana, bo, atok}, {bo, ana, btok}} {
		feed := a.feedMatchesTruth("blocked", r.u, r.tok)
		if countByAuthor(feed, r.other) != 0 || countByAuthor(feed, cy) != 3 {
			t.Fatalf("blocked: %d posts of %d in the feed of %d, %d of cy's; want 0 and 3", countByAuthor(feed, r.other), r.other, r.u, countByAuthor(feed, cy))
		}
	}

	// Unblocked: no follow comes back, follows are allowed again.
	a.do(http.MethodDelete, fmt.Sprint("/api/blocking/", bo), atok, nil, http.StatusNoContent)
	a.do(http.MethodDelete, fmt.Sprint("/api/blocking/", bo), atok, nil, http.StatusNoContent)
	if u := a.user(atok, ana); u.FollowerCount != 0 {
		t.Fatalf("after the unblock, ana has %d followers, want 0", u.FollowerCount)
	}
	a.do(http.MethodPut, fmt.Sprint("/api/following/", ana), btok, nil, http.StatusNoContent)
	s.quiesce(t, 2*time.Minute)
	if feed := a.feedMatchesTruth("bo follows ana again", bo, btok); countByAuthor(feed, ana) != 3 {
		t.Fatalf("bo follows ana again: %d of ana's posts, want 3", countByAuthor(feed, ana))
	}
	if n := eventCount(t, s, "user.unblocked.v1"); n != 1 {
		t.Fatalf("%d user.unblocked.v1 events, want 1", n)
	}
}
