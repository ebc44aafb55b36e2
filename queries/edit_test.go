package queries

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/feedco/feed/testkit/testenv"
)

// editRow is the command's half of an edit (the posts projector has not
// written it to Redis yet): the row's content and version, and its
// post.edited.v1 event at that version, in one statement.
func (b *bundle) editRow(k key, content string) {
	b.t.Helper()
	b.exec(`WITH e AS (UPDATE posts SET content = $2, version = version + 1, edited_at = now() WHERE id = $1
                   RETURNING id, author_id, version)
INSERT INTO events (event_id, stream_id, stream_version, type, payload)
SELECT gen_random_uuid(), 'post-' || id, version, 'post.edited.v1',
       jsonb_build_object('postId', id::text, 'authorId', author_id::text, 'content', $2::text, 'version', version, 'editedAt', now())
FROM e`, k.id, content)
}

// contents reads user's whole home feed (or, with author set, the
// author's posts) and returns each post's content by id, failing on a
// page that repeats a post.
func (b *bundle) contents(user, author int64) map[int64]string {
	b.t.Helper()
	out := map[int64]string{}
	cursor := ""
	for range 100 {
		var p Page
		var err error
		if author != 0 {
			p, err = b.feed.AuthorPosts(b.ctx, author, author, cursor, 3)
		} else {
			p, err = b.feed.Home(b.ctx, user, cursor, 3)
		}
		if err != nil {
			b.t.Fatal(err)
		}
		for _, it := range p.Items {
			id, _ := strconv.ParseInt(it.ID, 10, 64)
			if _, dup := out[id]; dup {
				b.t.Fatalf("post %d shown twice", id)
			}
			out[id] = it.Content
			if edited := it.Content != "post "+it.ID; edited != (it.EditedAt != "") {
				b.t.Fatalf("post %d shows %q with editedAt %q", id, it.Content, it.EditedAt)
			}
		}
		if p.NextCursor == nil {
			return out
		}
		cursor = *p.NextCursor
	}
	b.t.Fatal("the feed does not end")
	return nil
}

func wantContents(t *testing.T, what string, got map[int64]string, posts []key, edited map[int64]string) {
	t.Helper()
	if len(got) != len(posts) {
		t.Fatalf("%s: %d posts shown, want %d", what, len(got), len(posts))
	}
	for _, k := range posts {
		want := "post " + strconv.FormatInt(k.id, 10)
		if e, ok := edited[k.id]; ok {
			want = e
		}
		if got[k.id] != want {
			t.Errorf("%s: post %d shows %q, want %q", what, k.id, got[k.id], want)
		}
	}
}

// An edit committed in PostgreSQL is shown by every read that starts after
// the change feed's first poll past its commit, before the posts projector
// writes it to Redis: from the process cache (the read cache holds the
// inbox's ids, which do not change), after the body was evicted and read
// again from a Redis post cache that still has the old content, on author
// pages, and from PostgreSQL when Redis has no body.
func TestHomeShowsEditSeenByFeedBeforeProjector(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{})
	u, a, all := b.projectedFollow(5)
	wantContents(t, "before", b.contents(u, 0), all, nil) // warms the caches, starts the poller
	b.editRow(all[4], "edited once")
	b.editRow(all[4], "edited twice")
	b.editRow(all[1], "edited <b>")
	committed := time.Now()
	testenv.Eventually(t, 10*time.Second, "the change feed polls past the commit", func() bool {
		return b.feed.deletions.through.Load() > committed.UnixNano()
	})
	edited := map[int64]string{all[4].id: "edited twice", all[1].id: "edited <b>"}
	wantContents(t, "home", b.contents(u, 0), all, edited)
	wantContents(t, "author page", b.contents(0, a), all, edited)
	b.feed.posts.evict(all[4].id)
	wantContents(t, "evicted, read again from Redis's older body", b.contents(u, 0), all, edited)
	if err := b.rdb.Del(b.ctx, b.keys.Post(all[1].id)).Err(); err != nil {
		t.Fatal(err)
	}
	b.feed.posts.evict(all[1].id)
	wantContents(t, "no body in Redis: from PostgreSQL", b.contents(u, 0), all, edited)
}

// With the change feed stopped, the process that committed an edit shows
// it at once (PostEdited, the api's AfterPostEdited hook) and writes it to
// the Redis post cache, where an older edit then changes nothing.
func TestPostEditedWriteThrough(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{noDeletionFeed: true})
	u, a, all := b.projectedFollow(3)
	wantContents(t, "before", b.contents(u, 0), all, nil)
	b.editRow(all[0], "v2")
	b.editRow(all[0], "v3")
	if err := b.feed.PostEdited(b.ctx, EditedPost{ID: all[0].id, AuthorID: a, Content: "v3", Version: 3, EditedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	edited := map[int64]string{all[0].id: "v3"}
	wantContents(t, "after the write-through", b.contents(u, 0), all, edited)
	// An older edit (a late hook of another process) changes neither the
	// process cache nor Redis.
	if err := b.feed.PostEdited(b.ctx, EditedPost{ID: all[0].id, AuthorID: a, Content: "v2", Version: 2, EditedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	b.feed.posts.evict(all[0].id)
	b.feed.posts.forgetDeletionsBefore(time.Now().Add(time.Hour)) // only Redis can tell now
	wantContents(t, "from Redis", b.contents(u, 0), all, edited)
}

// The cache keeps the newest version of a body: an older answer or edit
// never replaces it, an edit learnt before the body was read is applied
// to it, and a deletion wins over every edit.
func TestPostCacheKeepsNewestEdit(t *testing.T) {
	t.Parallel()
	now := time.Unix(1000, 0)
	c := newPostCache(10, time.Second)
	body := func(id int64, content string, version int64) *cachedPost {
		return &cachedPost{it: newItem(id, 1, content, 5), author: 1, version: version, checkedAt: now.UnixNano()}
	}
	get := func(id int64) *cachedPost {
		out := make([]*cachedPost, 1)
		_, stale := c.lookup([]int64{id}, now, false, out)
		if out[0] == nil && len(stale) > 0 {
			return stale[0]
		}
		return out[0]
	}
	c.store(body(1, "v1", 1))
	c.markEdited(1, 3, "v3", now, now)
	c.markEdited(1, 2, "v2", now, now)
	if p := get(1); p.it.post.Content != "v3" || p.version != 3 {
		t.Fatalf("after edits 3 then 2: %q at %d", p.it.post.Content, p.version)
	}
	if p := c.store(body(1, "v2", 2)); p.it.post.Content != "v3" {
		t.Fatalf("an older answer replaced the body: %q", p.it.post.Content)
	}
	if p := c.store(body(1, "v4", 4)); p.it.post.Content != "v4" || p.version != 4 {
		t.Fatalf("a newer answer was not stored: %q", p.it.post.Content)
	}
	// Learnt before the body is read (evicted, or never cached).
	c.markEdited(2, 2, "v2", now, now)
	if p := c.store(body(2, "v1", 1)); p.it.post.Content != "v2" || p.version != 2 {
		t.Fatalf("an edit learnt earlier was not applied to an older answer: %q", p.it.post.Content)
	}
	if js := string(makePage([]item{get(2).it}, 1).AppendJSON(nil)); !strings.Contains(js, `"content":"v2"`) {
		t.Fatalf("the page's JSON does not hold the edit: %s", js)
	}
	c.markDeleted([]int64{2}, now)
	c.markEdited(2, 3, "v3", now, now)
	if p := get(2); !p.deleted {
		t.Fatal("an edit undid a deletion")
	}
	c.forgetDeletionsBefore(now.Add(time.Second))
	if p := c.store(body(3, "v1", 1)); p.it.post.Content != "v1" {
		t.Fatal("post 3 was never edited")
	}
	c.evict(1)
	if p := c.store(body(1, "v1", 1)); p.it.post.Content != "v1" {
		t.Fatal("edits kept past forgetDeletionsBefore")
	}
}
