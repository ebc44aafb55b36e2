package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Refresh under writes, through the whole pipeline and the HTTP API: a
// reader polls GET /api/feed?after=prevCursor (and an author's
// /api/users/{id}/posts?after=) while authors post concurrently, a
// celebrity among them (pulled, not pushed), the reader too, with one
// post deleted. Once the system is quiet and the settled horizon has
// passed the last post, a page comes back empty, and the pages have shown
// every visible post above the first page exactly once, in order.
func TestRefreshUnderWrites(t *testing.T) {
	t.Parallel()
	testRefreshUnderWrites(t)
}

// refreshPoller follows prevCursor on one paged endpoint.
type refreshPoller struct {
	s      *system
	path   string // without query
	token  string
	cursor string
	seen   []apiPost // oldest first
}

// poll reads refresh pages until one comes back empty, checking each page's
// shape, and reports whether the last page was empty (always, unless an
// error).
func (p *refreshPoller) poll(ctx context.Context, t *testing.T) {
	t.Helper()
	for range 10_000 {
		var page apiPage
		q := "?limit=7&after=" + url.QueryEscape(p.cursor)
		if err := p.s.call(ctx, http.MethodGet, p.path+q, p.token, "", nil, &page, http.StatusOK, nil); err != nil {
			t.Fatal(err)
		}
		if page.Items == nil || len(page.Items) > 7 || page.NextCursor != nil {
			t.Fatalf("%s: refresh page of %d items (null %v), next cursor %v", p.path, len(page.Items), page.Items == nil, page.NextCursor)
		}
		if len(page.Items) == 0 {
			if page.PrevCursor != nil {
				t.Fatalf("%s: empty refresh page with prevCursor %q", p.path, *page.PrevCursor)
			}
			return
		}
		if page.PrevCursor == nil {
			t.Fatalf("%s: refresh page of %d items without prevCursor", p.path, len(page.Items))
		}
		for i := len(page.Items) - 1; i >= 0; i-- {
			p.seen = append(p.seen, page.Items[i])
		}
		p.cursor = *page.PrevCursor
	}
	t.Fatalf("%s: refreshing does not end", p.path)
}

func testRefreshUnderWrites(t *testing.T) {
	const settle = 4 * time.Second
	pol := policies{CelebrityThreshold: 3, InboxMax: 20, InboxTrimSlack: 3, TimelineMax: 15, BackfillPosts: 3,
		FanoutBatch: 4, CacheTTL: 300 * time.Millisecond, RefreshSettle: settle}
	s := startSystem(t, pol)
	ctx := context.Background()
	newUser := func(name string) (int64, string) {
		var u apiUser
		if err := s.call(ctx, http.MethodPost, "/api/users", "", "", map[string]string{"name": name}, &u, http.StatusCreated, nil); err != nil {
			t.Fatal(err)
		}
		id, err := strconv.ParseInt(u.ID, 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		return id, s.signer.Sign(id, time.Hour)
	}
	follow := func(tok string, who int64) {
		if err := s.call(ctx, http.MethodPut, fmt.Sprint("/api/following/", who), tok, "", nil, nil, http.StatusNoContent, nil); err != nil {
			t.Fatal(err)
		}
	}
	tryPost := func(tok, content string) (apiPost, error) {
		var p apiPost
		err := s.call(ctx, http.MethodPost, "/api/posts", tok, "", map[string]string{"content": content}, &p, http.StatusCreated, nil)
		return p, err
	}
	post := func(tok, content string) apiPost {
		p, err := tryPost(tok, content)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	reader, rtok := newUser("reader")
	star, stok := newUser("star")
	stranger, xtok := newUser("stranger")
	type author struct {
		id  int64
		tok string
	}
	authors := []author{{reader, rtok}, {star, stok}}
	for i := range 4 {
		id, tok := newUser(fmt.Sprint("author", i))
		follow(rtok, id)
		authors = append(authors, author{id, tok})
	}
	follow(rtok, star)
	for i := range 3 { // star's followers make it a celebrity
		_, tok := newUser(fmt.Sprint("fan", i))
		follow(tok, star)
	}
	for _, a := range authors {
		for i := range 3 {
			post(a.tok, fmt.Sprint("before ", a.id, " ", i))
		}
	}
	s.quiesce(t, 2*time.Minute)

	// The first pages, then the 400s and an empty refresh above them.
	var first apiPage
	if err := s.call(ctx, http.MethodGet, "/api/feed?limit=5", rtok, "", nil, &first, http.StatusOK, nil); err != nil {
		t.Fatal(err)
	}
	if len(first.Items) != 5 || first.PrevCursor == nil {
		t.Fatalf("first page: %d items, prevCursor %v", len(first.Items), first.PrevCursor)
	}
	starPath := fmt.Sprint("/api/users/", star, "/posts")
	var firstStar apiPage
	if err := s.call(ctx, http.MethodGet, starPath+"?limit=2", rtok, "", nil, &firstStar, http.StatusOK, nil); err != nil || firstStar.PrevCursor == nil {
		t.Fatalf("star's first page: %v (prevCursor %v)", err, firstStar.PrevCursor)
	}
	refreshBadRequests(t, s, rtok, *first.PrevCursor, starPath)
	for _, path := range []string{"/api/feed", starPath} {
		var empty apiPage
		if err := s.call(ctx, http.MethodGet, path+"?after="+url.QueryEscape(*first.PrevCursor), rtok, "", nil, &empty, http.StatusOK, nil); err != nil {
			t.Fatal(err)
		}
		if empty.Items == nil || len(empty.Items) != 0 || empty.PrevCursor != nil || empty.NextCursor != nil {
			t.Fatalf("%s: refresh above the newest post: %+v, want an empty page with null cursors", path, empty)
		}
	}

	// Writers post concurrently while the pollers refresh.
	home := &refreshPoller{s: s, path: "/api/feed", token: rtok, cursor: *first.PrevCursor}
	ofStar := &refreshPoller{s: s, path: starPath, token: rtok, cursor: *firstStar.PrevCursor}
	var mu sync.Mutex
	var made []apiPost // visible posts above the first page, for the reader
	var wg sync.WaitGroup
	for _, a := range authors {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 25 {
				p, err := tryPost(a.tok, fmt.Sprint("during ", a.id, " ", i))
				if err != nil {
					t.Error(err)
					return
				}
				if i == 10 && a.id != star {
					if err := s.call(ctx, http.MethodDelete, "/api/posts/"+p.ID, a.tok, "", nil, nil, http.StatusNoContent, nil); err != nil {
						t.Error(err)
					}
					continue
				}
				mu.Lock()
				made = append(made, p)
				mu.Unlock()
			}
		}()
	}
	wg.Add(1)
	go func() { // not followed: never in the reader's feed
		defer wg.Done()
		for i := range 10 {
			if _, err := tryPost(xtok, fmt.Sprint("stranger ", stranger, " ", i)); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	for writing := true; writing; {
		select {
		case <-done:
			writing = false
		default:
		}
		home.poll(ctx, t)
		ofStar.poll(ctx, t)
	}
	if t.Failed() {
		return
	}
	s.quiesce(t, 2*time.Minute)
	var lastMs int64
	for _, p := range made {
		lastMs = max(lastMs, postMs(t, p))
	}
	// The horizon is rounded down to the second: past it once the clock is
	// settle plus a second beyond the last post.
	for time.Now().Add(-settle-time.Second).UnixMilli() <= lastMs {
		home.poll(ctx, t)
		ofStar.poll(ctx, t)
		time.Sleep(50 * time.Millisecond) // the clock moves the horizon
	}
	home.poll(ctx, t)
	ofStar.poll(ctx, t)

	want := sortedOldestFirst(t, made)
	if d := diffPosts(home.seen, want); d != "" {
		t.Errorf("home refresh: %s", d)
	}
	var starWant []apiPost
	for _, p := range want {
		if p.AuthorID == strconv.FormatInt(star, 10) {
			starWant = append(starWant, p)
		}
	}
	if d := diffPosts(ofStar.seen, starWant); d != "" {
		t.Errorf("star's posts refresh: %s", d)
	}
	t.Logf("refresh: %d posts above the first page seen once each, %d of the celebrity's", len(home.seen), len(ofStar.seen))
}

// refreshBadRequests checks the 400s of after: with cursor, malformed,
// empty; problem+json as every 400.
func refreshBadRequests(t *testing.T, s *system, tok, cursor, authorPath string) {
	t.Helper()
	for _, path := range []string{"/api/feed", authorPath} {
		for _, q := range []string{
			"after=" + url.QueryEscape(cursor) + "&cursor=" + url.QueryEscape(cursor),
			"cursor=&after=" + url.QueryEscape(cursor),
			"after=not-a-cursor",
			"after=",
			"after=" + strings.Repeat("A", 600),
		} {
			req, err := http.NewRequest(http.MethodGet, s.baseURL+path+"?"+q, nil)
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Authorization", "Bearer "+tok)
			resp, err := s.http.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			var prob struct {
				Type   string `json:"type"`
				Status int    `json:"status"`
			}
			if resp.StatusCode != http.StatusBadRequest || resp.Header.Get("Content-Type") != "application/problem+json" ||
				json.Unmarshal(b, &prob) != nil || prob.Status != http.StatusBadRequest || prob.Type == "" {
				t.Errorf("GET %s?%s: %d %s %s, want a 400 problem", path, q, resp.StatusCode, resp.Header.Get("Content-Type"), b)
			}
		}
	}
}

func postMs(t testing.TB, p apiPost) int64 {
	t.Helper()
	at, err := time.Parse(time.RFC3339Nano, p.CreatedAt)
	if err != nil {
		t.Fatal(err)
	}
	return at.UnixMilli()
}

// sortedOldestFirst orders posts as a refresh shows them: ascending
// (createdAt ms, id).
func sortedOldestFirst(t *testing.T, ps []apiPost) []apiPost {
	t.Helper()
	out := slices.Clone(ps)
	k := func(p apiPost) [2]int64 {
		id, err := strconv.ParseInt(p.ID, 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		return [2]int64{postMs(t, p), id}
	}
	slices.SortFunc(out, func(a, b apiPost) int {
		ka, kb := k(a), k(b)
		if c := cmpInt(ka[0], kb[0]); c != 0 {
			return c
		}
		return cmpInt(ka[1], kb[1])
	})
	return out
}

func cmpInt(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// diffPosts says how got differs from want by id ("" when equal): missing,
// duplicated, foreign, out of order.
func diffPosts(got, want []apiPost) string {
	var errs []error
	count := map[string]int{}
	for _, p := range got {
		count[p.ID]++
	}
	wanted := map[string]bool{}
	for _, p := range want {
		wanted[p.ID] = true
		if count[p.ID] == 0 {
			errs = append(errs, fmt.Errorf("missing %s (%s)", p.ID, p.CreatedAt))
		}
	}
	for id, n := range count {
		if n > 1 {
			errs = append(errs, fmt.Errorf("%s shown %d times", id, n))
		}
		if !wanted[id] {
			errs = append(errs, fmt.Errorf("foreign or hidden %s", id))
		}
	}
	if len(errs) == 0 {
		for i := range got {
			if got[i].ID != want[i].ID {
				errs = append(errs, fmt.Errorf("out of order at %d: %s, want %s", i, got[i].ID, want[i].ID))
				break
			}
		}
	}
	if len(errs) > 10 {
		errs = append(errs[:10], fmt.Errorf("and %d more", len(errs)-10))
	}
	if err := errors.Join(errs...); err != nil {
		return err.Error()
	}
	return ""
}
