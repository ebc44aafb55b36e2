package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"testing"
	"time"
)

// Issue 51's feed rules and items through the whole pipeline and the HTTP
// API: reposts, replies, quotes, likes, blocks, each case by name. Every
// feed page these tests read is validated against the OpenAPI document
// (specCheck), and read twice: in one page, and in pages of 2 to check
// that the cursor pages through the same items with no gap and no repeat.

// feedItem is an item of a feed page as a client decodes it.
type feedItem struct {
	ID        string `json:"id"`
	AuthorID  string `json:"authorId"`
	Author    struct{ ID, Name string }
	Content   string
	CreatedAt string
	ReplyTo   *struct{ ID, AuthorID string }
	Quote     *struct {
		ID          string
		Unavailable bool
		Content     string
	}
	Counts   *struct{ Likes, Reposts, Replies int64 }
	Viewer   *struct{ Liked, Reposted bool }
	RepostOf *feedItem
}

// label is "id" for a post, "repostId<-originalId" for a repost entry.
func (it feedItem) label() string {
	if it.RepostOf != nil {
		return it.ID + "<-" + it.RepostOf.ID
	}
	return it.ID
}

// sharesAPI is userAPI with issue 51's calls and a spec-checked feed read.
type sharesAPI struct {
	userAPI
	spec *specCheck
}

func startShares(t *testing.T, pol policies) sharesAPI {
	if pol.CacheTTL == 0 {
		pol = policies{CelebrityThreshold: 1000, InboxMax: 50, InboxTrimSlack: 5, TimelineMax: 50, BackfillPosts: 10,
			FanoutBatch: 8, CacheTTL: 300 * time.Millisecond}
	}
	s := startSystem(t, pol)
	return sharesAPI{userAPI{t, s}, newSpecCheck(t)}
}

func (a sharesAPI) follow(tok string, who int64) {
	a.t.Helper()
	a.do(http.MethodPut, fmt.Sprint("/api/following/", who), tok, nil, http.StatusNoContent)
}

// postWith creates a post with fields (replyTo, quoteOf) beside content.
func (a sharesAPI) postWith(tok, content string, fields map[string]string) string {
	a.t.Helper()
	body := map[string]string{"content": content}
	for k, v := range fields {
		body[k] = v
	}
	var p apiPost
	if err := a.s.call(context.Background(), http.MethodPost, "/api/posts", tok, "", body, &p, http.StatusCreated, nil); err != nil {
		a.t.Fatal(err)
	}
	return p.ID
}

// repost reposts post as the holder of tok (user id u) and returns the
// repost's own id.
func (a sharesAPI) repost(tok string, u int64, post string) string {
	a.t.Helper()
	a.do(http.MethodPut, "/api/posts/"+post+"/repost", tok, nil, http.StatusNoContent)
	var id int64
	if err := a.s.DB.Pool.QueryRow(context.Background(), `SELECT id FROM reposts WHERE user_id = $1 AND post_id = $2`, u, mustID(a.t, post)).Scan(&id); err != nil {
		a.t.Fatal(err)
	}
	return strconv.FormatInt(id, 10)
}

// feed reads tok's home feed (path: another feed) whole in one page and
// in pages of 2, both spec-checked; they must agree.
func (a sharesAPI) feed(tok string, path ...string) []feedItem {
	a.t.Helper()
	p := "/api/feed"
	if len(path) > 0 {
		p = path[0]
	}
	read := func(limit int) []feedItem {
		var all []feedItem
		cursor := ""
		for range 100 {
			q := fmt.Sprintf("%s?limit=%d", p, limit)
			if cursor != "" {
				q += "&cursor=" + cursor
			}
			ex := a.spec.do(a.s.baseURL, http.MethodGet, q, nil, "Authorization", "Bearer "+tok)
			if ex.status != http.StatusOK {
				a.t.Fatalf("GET %s: %d %s", q, ex.status, ex.body)
			}
			var page struct {
				Items      []feedItem
				NextCursor *string
			}
			if err := json.Unmarshal(ex.body, &page); err != nil {
				a.t.Fatal(err)
			}
			all = append(all, page.Items...)
			if page.NextCursor == nil {
				return all
			}
			cursor = *page.NextCursor
		}
		a.t.Fatalf("%s: more than 100 pages", p)
		return nil
	}
	whole, paged := read(50), read(2)
	if w, g := labels(whole), labels(paged); !slices.Equal(w, g) {
		a.t.Fatalf("%s in one page %v, in pages of 2 %v", p, w, g)
	}
	return whole
}

func labels(items []feedItem) []string {
	out := make([]string, len(items))
	for i, it := range items {
		out[i] = it.label()
	}
	return out
}

// wantFeed quiesces the system and wants tok's feed to be want (labels).
func (a sharesAPI) wantFeed(what, tok string, want ...string) []feedItem {
	a.t.Helper()
	a.s.quiesce(a.t, 2*time.Minute)
	got := a.feed(tok)
	if g := labels(got); !slices.Equal(g, want) {
		a.t.Fatalf("%s: feed %v, want %v", what, g, want)
	}
	return got
}

func rp(repost, original string) string { return repost + "<-" + original }

// A repost of a post already in the feed (the viewer follows its author)
// does not show the original twice: the post shows as itself.
func TestRepostOfPostAlreadyInFeed(t *testing.T) {
	t.Parallel()
	a := startShares(t, policies{})
	v, vt := a.newUser("viewer")
	q, qt := a.newUser("reposter")
	o, ot := a.newUser("author")
	a.follow(vt, q)
	a.follow(vt, o)
	a.feed(vt) // the viewer is active: pushes from now on
	post := a.post(ot, "original").ID
	a.repost(qt, q, post)
	got := a.wantFeed("repost of a followed author's post", vt, post)
	if c := got[0].Counts; c == nil || c.Reposts != 1 {
		t.Fatalf("the post's counts %+v, want its repost counted", c)
	}
	// The viewer's own repost of a followed author's post: the same.
	a.repost(vt, v, post)
	a.wantFeed("the viewer's own repost too", vt, post)
}

// Two followees repost the same post: it shows once, at the earlier
// repost.
func TestTwoFolloweesRepostSamePost(t *testing.T) {
	t.Parallel()
	a := startShares(t, policies{})
	_, vt := a.newUser("viewer")
	q1, q1t := a.newUser("first")
	q2, q2t := a.newUser("second")
	_, ot := a.newUser("author")
	a.follow(vt, q1)
	a.follow(vt, q2)
	a.feed(vt)
	post := a.post(ot, "original").ID
	r1 := a.repost(q1t, q1, post)
	a.repost(q2t, q2, post)
	got := a.wantFeed("two reposts", vt, rp(r1, post))
	if r := got[0]; r.AuthorID != strconv.FormatInt(q1, 10) || r.Author.Name != "first" || r.Content != "" || r.Counts != nil ||
		r.Viewer != nil || r.RepostOf.Content != "original" || r.RepostOf.Author.Name != "author" || r.RepostOf.Counts.Reposts != 2 {
		t.Fatalf("repost entry %+v (original %+v)", r, r.RepostOf)
	}
}

// Undoing the shown repost brings the next one.
func TestUndoShownRepostBringsNext(t *testing.T) {
	t.Parallel()
	a := startShares(t, policies{})
	_, vt := a.newUser("viewer")
	q1, q1t := a.newUser("first")
	q2, q2t := a.newUser("second")
	_, ot := a.newUser("author")
	a.follow(vt, q1)
	a.follow(vt, q2)
	a.feed(vt)
	post := a.post(ot, "original").ID
	r1 := a.repost(q1t, q1, post)
	r2 := a.repost(q2t, q2, post)
	a.wantFeed("two reposts", vt, rp(r1, post))
	a.do(http.MethodDelete, "/api/posts/"+post+"/repost", q1t, nil, http.StatusNoContent)
	a.wantFeed("the first undone", vt, rp(r2, post))
	// The first reposts again: a new, later repost; the second stays shown.
	a.repost(q1t, q1, post)
	a.wantFeed("the first reposted again", vt, rp(r2, post))
}

// Deleting an original hides every repost of it.
func TestDeleteOriginalHidesReposts(t *testing.T) {
	t.Parallel()
	a := startShares(t, policies{})
	_, vt := a.newUser("viewer")
	q, qt := a.newUser("reposter")
	_, ot := a.newUser("author")
	a.follow(vt, q)
	a.feed(vt)
	post := a.post(ot, "original").ID
	keep := a.post(ot, "kept").ID
	r := a.repost(qt, q, post)
	rk := a.repost(qt, q, keep)
	a.wantFeed("two reposts", vt, rp(rk, keep), rp(r, post))
	a.do(http.MethodDelete, "/api/posts/"+post, ot, nil, http.StatusNoContent)
	a.wantFeed("the original deleted", vt, rp(rk, keep))
	if got := labels(a.feed(vt, fmt.Sprint("/api/users/", q, "/posts"))); !slices.Equal(got, []string{rp(rk, keep)}) {
		t.Fatalf("the reposter's page %v, want the live original's repost alone", got)
	}
}

// A reply to an account the viewer does not follow is hidden; a reply to
// a followed account and a self-reply show, with replyTo.
func TestReplyToUnfollowedAccountHidden(t *testing.T) {
	t.Parallel()
	a := startShares(t, policies{})
	_, vt := a.newUser("viewer")
	f, ft := a.newUser("followed")
	g, gt := a.newUser("other")
	_, st := a.newUser("stranger")
	a.follow(vt, f)
	a.follow(vt, g)
	a.feed(vt)
	strangers := a.post(st, "stranger's").ID
	others := a.post(gt, "other's").ID
	toStranger := a.postWith(ft, "to the stranger", map[string]string{"replyTo": strangers})
	toOther := a.postWith(ft, "to the other", map[string]string{"replyTo": others})
	self := a.postWith(ft, "to myself", map[string]string{"replyTo": toOther})
	_ = toStranger
	got := a.wantFeed("replies", vt, self, toOther, others)
	if r := got[1].ReplyTo; r == nil || r.ID != others || r.AuthorID != strconv.FormatInt(g, 10) {
		t.Fatalf("replyTo %+v, want %s by %d", r, others, g)
	}
	if c := got[2].Counts; c.Replies != 1 {
		t.Fatalf("the other's post counts %+v, want 1 reply", c)
	}
}

// A quote of a post later deleted stays, its quote unavailable.
func TestQuoteOfDeletedPostUnavailable(t *testing.T) {
	t.Parallel()
	a := startShares(t, policies{})
	_, vt := a.newUser("viewer")
	f, ft := a.newUser("quoter")
	_, st := a.newUser("quoted")
	a.follow(vt, f)
	a.feed(vt)
	quoted := a.post(st, "quoted words").ID
	quote := a.postWith(ft, "look", map[string]string{"quoteOf": quoted})
	got := a.wantFeed("a quote", vt, quote)
	if q := got[0].Quote; q == nil || q.ID != quoted || q.Unavailable || q.Content != "quoted words" {
		t.Fatalf("quote %+v, want the quoted post", q)
	}
	a.do(http.MethodDelete, "/api/posts/"+quoted, st, nil, http.StatusNoContent)
	got = a.wantFeed("the quoted post deleted", vt, quote)
	if q := got[0].Quote; q == nil || q.ID != quoted || !q.Unavailable || q.Content != "" {
		t.Fatalf("quote %+v, want {id, unavailable}", q)
	}
}

// A block between the reposter and the viewer (either way) hides the
// reposter's reposts; a block between the viewer and the original's
// author hides the reposts of their posts.
func TestBlockBetweenReposterAndViewer(t *testing.T) {
	t.Parallel()
	a := startShares(t, policies{})
	v, vt := a.newUser("viewer")
	q, qt := a.newUser("reposter")
	w, wt := a.newUser("other reposter")
	o, ot := a.newUser("author")
	a.follow(vt, q)
	a.follow(vt, w)
	a.feed(vt)
	p1 := a.post(ot, "first").ID
	p2 := a.post(ot, "second").ID
	r1 := a.repost(qt, q, p1)
	r2 := a.repost(wt, w, p2)
	a.wantFeed("before the blocks", vt, rp(r2, p2), rp(r1, p1))
	a.do(http.MethodPut, fmt.Sprint("/api/blocking/", v), qt, nil, http.StatusNoContent) // the reposter blocks the viewer
	a.wantFeed("the reposter blocks the viewer", vt, rp(r2, p2))
	a.do(http.MethodPut, fmt.Sprint("/api/blocking/", o), vt, nil, http.StatusNoContent) // the viewer blocks the author
	a.wantFeed("the viewer blocks the original's author", vt)
}

// A celebrity's repost (the reposter's followers pull it at read time)
// shows like a pushed one.
func TestCelebrityRepostPulled(t *testing.T) {
	t.Parallel()
	a := startShares(t, policies{CelebrityThreshold: 3, InboxMax: 50, InboxTrimSlack: 5, TimelineMax: 50, BackfillPosts: 10,
		FanoutBatch: 8, CacheTTL: 300 * time.Millisecond})
	_, vt := a.newUser("viewer")
	star, startok := a.newUser("star")
	_, ot := a.newUser("author")
	a.follow(vt, star)
	for i := range 3 {
		_, tok := a.newUser(fmt.Sprint("fan", i))
		a.follow(tok, star)
	}
	a.feed(vt)
	post := a.post(ot, "original").ID
	r := a.repost(startok, star, post)
	got := a.wantFeed("a celebrity's repost", vt, rp(r, post))
	if got[0].Author.Name != "star" || got[0].RepostOf.Author.Name != "author" {
		t.Fatalf("repost entry %+v", got[0])
	}
}

// The hydration of an item: the author's name, counts and the viewer's
// own state follow likes and reposts, in the feed and on the author's page.
func TestItemHydrationAfterLikeAndRepost(t *testing.T) {
	t.Parallel()
	a := startShares(t, policies{})
	v, vt := a.newUser("viewer")
	f, ft := a.newUser("friend")
	_, ot := a.newUser("other")
	a.follow(vt, f)
	a.feed(vt)
	post := a.post(ft, "hello").ID
	got := a.wantFeed("a post", vt, post)
	if it := got[0]; it.Author.Name != "friend" || it.Author.ID != strconv.FormatInt(f, 10) || *it.Counts != (struct{ Likes, Reposts, Replies int64 }{}) ||
		it.Viewer.Liked || it.Viewer.Reposted {
		t.Fatalf("fresh item %+v counts %+v viewer %+v", it, it.Counts, it.Viewer)
	}
	a.do(http.MethodPut, "/api/posts/"+post+"/like", vt, nil, http.StatusNoContent)
	a.do(http.MethodPut, "/api/posts/"+post+"/like", ot, nil, http.StatusNoContent)
	a.do(http.MethodPut, "/api/posts/"+post+"/like", vt, nil, http.StatusNoContent) // again: no change
	r := a.repost(vt, v, post)
	a.postWith(ot, "reply", map[string]string{"replyTo": post})
	// The viewer's own repost of a followed author's post: the post shows as itself.
	got = a.wantFeed("liked and reposted", vt, post)
	it := got[0]
	if it.Counts.Likes != 2 || it.Counts.Reposts != 1 || it.Counts.Replies != 1 || !it.Viewer.Liked || !it.Viewer.Reposted {
		t.Fatalf("item counts %+v viewer %+v", it.Counts, it.Viewer)
	}
	// The viewer's page shows its repost entry, hydrated alike.
	own := a.feed(vt, fmt.Sprint("/api/users/", v, "/posts"))
	if len(own) != 1 || own[0].label() != rp(r, post) || own[0].Author.Name != "viewer" || !own[0].RepostOf.Viewer.Liked ||
		own[0].RepostOf.Counts.Likes != 2 {
		t.Fatalf("the viewer's page %+v", own)
	}
	a.do(http.MethodDelete, "/api/posts/"+post+"/like", vt, nil, http.StatusNoContent)
	got = a.wantFeed("unliked", vt, post)
	if it := got[0]; it.Counts.Likes != 1 || it.Viewer.Liked || !it.Viewer.Reposted {
		t.Fatalf("after the unlike: counts %+v viewer %+v", it.Counts, it.Viewer)
	}
	if !a.spec.seen["homeFeed 200"] || !a.spec.seen["authorPosts 200"] {
		t.Fatal("no feed page was validated against the document")
	}
}
