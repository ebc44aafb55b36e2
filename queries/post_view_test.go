package queries

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"testing"
	"time"
)

// (The rows below are written as the write side's commands leave them:
// reply and quote columns, media as JSON, counts kept with the likes and
// reposts rows.)

func (b *bundle) reply(author int64, ms int64, parent key, parentAuthor int64) key {
	b.t.Helper()
	k := b.post(author, ms)
	b.exec(`UPDATE posts SET reply_to = $2, reply_to_author = $3, reply_root = $2 WHERE id = $1`, k.id, parent.id, parentAuthor)
	b.exec(`UPDATE posts SET reply_count = reply_count + 1 WHERE id = $1`, parent.id)
	return k
}

func (b *bundle) quote(k, quoted key, quotedAuthor int64) {
	b.t.Helper()
	b.exec(`UPDATE posts SET quote_of = $2, quote_author = $3 WHERE id = $1`, k.id, quoted.id, quotedAuthor)
}

func (b *bundle) like(user int64, k key) {
	b.t.Helper()
	b.exec(`INSERT INTO likes (user_id, post_id) VALUES ($1, $2)`, user, k.id)
	b.exec(`UPDATE posts SET like_count = like_count + 1 WHERE id = $1`, k.id)
}

func (b *bundle) repost(user int64, k key, id int64) {
	b.t.Helper()
	b.exec(`INSERT INTO reposts (id, user_id, post_id, created_at) VALUES ($3, $1, $2, now())`, user, k.id, id)
	b.exec(`UPDATE posts SET repost_count = repost_count + 1 WHERE id = $1`, k.id)
}

func (b *bundle) block(blocker, blocked int64) {
	b.t.Helper()
	b.exec(`INSERT INTO blocks (blocker_id, blocked_id) VALUES ($1, $2)`, blocker, blocked)
}

func (b *bundle) mute(muter, muted int64) {
	b.t.Helper()
	b.exec(`INSERT INTO mutes (muter_id, muted_id) VALUES ($1, $2)`, muter, muted)
}

func TestPostViewEveryField(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{})
	author, parentAuthor, quoted, viewer, other := b.user(), b.user(), b.user(), b.user(), b.user()
	parent := b.post(parentAuthor, base)
	inner := b.post(quoted, base+1) // the quoted post's own quote, later deleted
	q := b.post(quoted, base+2)
	b.quote(q, inner, quoted)
	b.deleteRow(inner)
	b.like(other, q)
	p := b.reply(author, base+3, parent, parentAuthor)
	b.quote(p, q, quoted)
	edited := time.UnixMilli(base + 5000).UTC()
	b.exec(`UPDATE posts SET content = 'hi "all"', edited_at = $2, version = 2,
	        media = '[{"url":"https://cdn.example/a.jpg","mimeType":"image/jpeg","alt":"a cat","width":1200,"height":800}]'
	        WHERE id = $1`, p.id, edited)
	b.like(viewer, p)
	b.like(other, p)
	b.repost(viewer, p, p.id+1000)
	b.reply(other, base+4, p, author)

	v, err := b.feed.PostView(b.ctx, viewer, p.id)
	if err != nil {
		t.Fatal(err)
	}
	got, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf(`{"id":"%d","authorId":"%d","author":{"id":"%d","name":"u1"},"content":"hi \"all\"","createdAt":%q,`+
		`"editedAt":%q,"media":[{"url":"https://cdn.example/a.jpg","mimeType":"image/jpeg","alt":"a cat","width":1200,"height":800}],`+
		`"replyTo":{"id":"%d","authorId":"%d"},`+
		`"quote":{"id":"%d","authorId":"%d","author":{"id":"%d","name":"u3"},"content":"post %d","createdAt":%q,`+
		`"quote":{"id":"%d"},"counts":{"likes":1,"reposts":0,"replies":0},"viewer":{"liked":false,"reposted":false}},`+
		`"counts":{"likes":2,"reposts":1,"replies":1},"viewer":{"liked":true,"reposted":true}}`,
		p.id, author, author, formatTime(p.ms), formatTime(edited.UnixMilli()), parent.id, parentAuthor,
		q.id, quoted, quoted, q.id, formatTime(q.ms), inner.id)
	if string(got) != want {
		t.Errorf("post view\n got %s\nwant %s", got, want)
	}

	// Another viewer: the counts are the same, the viewer's state its own.
	v, err = b.feed.PostView(b.ctx, other, p.id)
	if err != nil {
		t.Fatal(err)
	}
	if *v.Viewer != (ViewerState{Liked: true}) || *v.Quote.Post.Viewer != (ViewerState{Liked: true}) {
		t.Errorf("viewer state of another viewer: %+v, quote %+v", *v.Viewer, *v.Quote.Post.Viewer)
	}
	// A repost's id answers its original.
	r, err := b.feed.PostView(b.ctx, other, p.id+1000)
	if err != nil || r.ID != strconv.FormatInt(p.id, 10) {
		t.Errorf("by the repost's id: %s, %v; want the original %d", r.ID, err, p.id)
	}
}

func TestPostViewQuoteUnavailable(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{})
	author, quoted, viewer := b.user(), b.user(), b.user()
	visible := func(desc string, wantUnavailable bool, setup func(q key)) {
		t.Helper()
		q := b.post(quoted, base)
		p := b.post(author, base+1)
		b.quote(p, q, quoted)
		setup(q)
		v, err := b.feed.PostView(b.ctx, viewer, p.id)
		if err != nil {
			t.Fatalf("%s: %v", desc, err)
		}
		got, _ := json.Marshal(v.Quote)
		want := fmt.Sprintf(`{"id":"%d","unavailable":true}`, q.id)
		if unavailable := string(got) == want; unavailable != wantUnavailable {
			t.Errorf("%s: quote %s, want unavailable %v", desc, got, wantUnavailable)
		}
		if !wantUnavailable && (v.Quote.Post == nil || v.Quote.Post.ID != strconv.FormatInt(q.id, 10)) {
			t.Errorf("%s: quote %s, want the quoted post", desc, got)
		}
	}
	visible("a live quoted post", false, func(key) {})
	visible("a deleted quoted post", true, func(q key) { b.deleteRow(q) })
	visible("the quoted author blocks the viewer", true, func(key) { b.block(quoted, viewer) })
	b.exec(`DELETE FROM blocks`)
	visible("the viewer blocks the quoted author", true, func(key) { b.block(viewer, quoted) })
	b.exec(`DELETE FROM blocks`)
	visible("the viewer mutes the quoted author", true, func(key) { b.mute(viewer, quoted) })
}

func TestPostViewNotFound(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{})
	author, viewer := b.user(), b.user()
	p, gone := b.post(author, base), b.post(author, base+1)
	b.deleteRow(gone)
	for desc, id := range map[string]int64{"missing": p.id + 99, "deleted": gone.id} {
		if _, err := b.feed.PostView(b.ctx, viewer, id); !errors.Is(err, ErrPostNotFound) {
			t.Errorf("%s: %v, want ErrPostNotFound", desc, err)
		}
		if _, err := b.feed.Replies(b.ctx, viewer, id, "", 10); !errors.Is(err, ErrPostNotFound) {
			t.Errorf("replies of %s: %v, want ErrPostNotFound", desc, err)
		}
	}
	b.block(viewer, author)
	if _, err := b.feed.PostView(b.ctx, viewer, p.id); err != nil {
		t.Errorf("the viewer's own block of the author hides nothing here: %v", err)
	}
	b.block(author, viewer)
	if _, err := b.feed.PostView(b.ctx, viewer, p.id); !errors.Is(err, ErrPostNotFound) {
		t.Errorf("the author blocks the viewer: %v, want ErrPostNotFound", err)
	}
	if _, err := b.feed.Replies(b.ctx, viewer, p.id, "", 10); !errors.Is(err, ErrPostNotFound) {
		t.Errorf("replies, the author blocks the viewer: %v, want ErrPostNotFound", err)
	}
	if _, err := b.feed.PostView(b.ctx, author, p.id); err != nil {
		t.Errorf("the author's own post: %v", err)
	}
}

func TestRepliesPagesOldestFirstHidingWhatTheViewerMayNotSee(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{})
	author, viewer, blocker, blocked, muted, friend := b.user(), b.user(), b.user(), b.user(), b.user(), b.user()
	parent := b.post(author, base)
	var want []int64
	for i := range 12 {
		ms := base + 10 + int64(i/3) // three replies a millisecond: ties order by id
		switch i % 6 {
		case 1:
			b.reply(blocker, ms, parent, author)
		case 2:
			b.reply(blocked, ms, parent, author)
		case 3:
			b.reply(muted, ms, parent, author)
		case 4:
			b.deleteRow(b.reply(friend, ms, parent, author))
		default:
			want = append(want, b.reply(friend, ms, parent, author).id)
		}
	}
	b.reply(friend, base+50, b.post(author, base+1), author) // another post's reply
	b.block(blocker, viewer)
	b.block(viewer, blocked)
	b.mute(viewer, muted)
	// A reply of a reply is not a direct reply.
	b.reply(friend, base+60, key{ms: base + 10, id: want[0]}, friend)

	for _, limit := range []int{1, 2, 3, 50} {
		var got []int64
		cursor, pages := "", 0
		for {
			p, err := b.feed.Replies(b.ctx, viewer, parent.id, cursor, limit)
			if err != nil {
				t.Fatal(err)
			}
			pages++
			if len(p.Items) > limit || (p.NextCursor != nil && len(p.Items) != limit) {
				t.Fatalf("limit %d: a page of %d items, next %v", limit, len(p.Items), p.NextCursor)
			}
			for _, it := range p.Items {
				id, _ := strconv.ParseInt(it.ID, 10, 64)
				got = append(got, id)
				if it.ReplyTo == nil || it.ReplyTo.ID != strconv.FormatInt(parent.id, 10) {
					t.Errorf("reply %s: replyTo %+v", it.ID, it.ReplyTo)
				}
			}
			if (p.PrevCursor == nil) != (len(p.Items) == 0) {
				t.Errorf("limit %d: prevCursor %v on a page of %d", limit, p.PrevCursor, len(p.Items))
			}
			if p.NextCursor == nil {
				break
			}
			cursor = *p.NextCursor
		}
		if !slices.Equal(got, want) {
			t.Errorf("limit %d: replies %v, want %v", limit, got, want)
		}
		if wantPages := max(1, (len(want)+limit-1)/limit); pages != wantPages {
			t.Errorf("limit %d: %d pages, want %d", limit, pages, wantPages)
		}
	}
	// The author sees the replies of the accounts the viewer hides.
	p, err := b.feed.Replies(b.ctx, author, parent.id, "", 50)
	if err != nil || len(p.Items) != 10 {
		t.Errorf("the author's view: %d replies, %v; want 10 (all but the deleted)", len(p.Items), err)
	}
	// A post without replies: an empty page.
	p, err = b.feed.Replies(b.ctx, viewer, want[0], "", 10)
	if err != nil || p.Items == nil || len(p.Items) != 1 {
		t.Errorf("a reply's replies: %+v, %v; want the one", p, err)
	}
	lone := b.post(author, base+2)
	p, err = b.feed.Replies(b.ctx, viewer, lone.id, "", 10)
	if err != nil || len(p.Items) != 0 || p.NextCursor != nil || p.PrevCursor != nil {
		t.Errorf("no replies: %+v, %v; want an empty page", p, err)
	}
	if _, err := b.feed.Replies(b.ctx, viewer, parent.id, "not a cursor", 10); !isBadCursor(err) {
		t.Errorf("a malformed cursor: %v", err)
	}
}
