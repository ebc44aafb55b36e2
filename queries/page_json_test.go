package queries

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/feedco/feed/events"
)

func FuzzPageAppendJSONMatchesEncodingJSON(f *testing.F) {
	f.Add("915184806927532032", "1", "hello from ana", "2026-11-30T10:17:41.283Z", "AQAAAZ", true, 2)
	f.Add("1", "2", "<b>&amp;</b> \u2028 \x00 \"q\" \\ \xff\xfe é 😀", "x", "", false, 1)
	f.Add("", "", "", "", "\n\t", true, 0)
	f.Fuzz(func(t *testing.T, id, author, content, at, cursor string, hasCursor bool, n int) {
		p := Page{}
		if n >= 0 {
			p.Items = []Post{}
			for range n % 4 {
				p.Items = append(p.Items, Post{ID: id, AuthorID: author, Content: content, CreatedAt: at})
			}
		}
		if hasCursor {
			p.NextCursor = &cursor
		}
		if n%2 != 0 {
			prev := cursor + "-prev"
			p.PrevCursor = &prev
		}
		want, err := json.Marshal(p)
		if err != nil {
			t.Fatal(err)
		}
		if got := p.AppendJSON(nil); !bytes.Equal(got, want) {
			t.Fatalf("AppendJSON\n%s\nencoding/json\n%s", got, want)
		}
	})
}

// The JSON an item is encoded with once (encodePost, every item the query
// side makes) and the dynamic part appended per page are byte for byte
// encoding/json's, for posts with every optional field and repost
// entries, and the fields are the ones newItem made before it kept the
// JSON.
func FuzzEncodedPostMatchesEncodingJSON(f *testing.F) {
	f.Add(int64(915184806927532032), int64(1), "hello from ana", int64(1764497861283), "ana", uint8(0))
	f.Add(int64(1), int64(2), "<b>&amp;</b> \u2028 \x00 \"q\" \\ \xff\xfe é 😀", int64(0), "<n>\xff", uint8(255))
	f.Add(int64(-5), int64(0), "", int64(-62135596800001), "", uint8(7))
	f.Add(int64(7), int64(8), "x", int64(253402300800000), "é", uint8(42)) // year 10000
	f.Fuzz(func(t *testing.T, id, author int64, content string, ms int64, name string, shape uint8) {
		it := newItem(id, author, content, ms)
		plain := Post{ID: strconv.FormatInt(id, 10), AuthorID: strconv.FormatInt(author, 10), Content: content, CreatedAt: formatTime(ms)}
		if it.post.ID != plain.ID || it.post.AuthorID != plain.AuthorID || it.post.Content != plain.Content || it.post.CreatedAt != plain.CreatedAt {
			t.Fatalf("fields %+v, want %+v", it.post, plain)
		}
		if it.post.enc == nil {
			t.Fatal("no encoding kept")
		}
		// shape's bits choose the optional fields.
		fa := postFacts{id: id, author: author, content: content, ms: ms}
		if shape&1 != 0 {
			fa.editedAt = formatTime(ms + 1)
		}
		if shape&2 != 0 {
			fa.media = []events.Media{{URL: "https://x/" + content, MIMEType: "image/png", Alt: name, Width: 3, Height: 4}, {URL: "https://y", MIMEType: "video/mp4"}}
		}
		if shape&4 != 0 {
			fa.replyTo, fa.replyToAuthor = id+1, author+1
		}
		full := encodePost(fa)
		full.Author.Name = name
		full.Counts, full.Viewer = &Counts{Likes: int64(shape), Reposts: 2, Replies: -1}, &ViewerState{Liked: shape&8 != 0, Reposted: true}
		switch {
		case shape&16 != 0:
			q := encodePost(postFacts{id: id + 2, author: author, content: name, ms: ms})
			q.Quote = &Quote{ID: "9", Unavailable: shape&32 != 0}
			q.Counts, q.Viewer = &Counts{}, &ViewerState{}
			full.Quote = &Quote{ID: q.ID, Post: &q}
		case shape&32 != 0:
			full.Quote = &Quote{ID: "12", Unavailable: true}
		}
		repost := encodePost(postFacts{id: id + 3, author: author + 3, ms: ms, repost: true})
		repost.Author.Name = name + "!"
		repost.RepostOf = &full
		p := Page{Items: []Post{it.post, it.post, full, repost}}
		want, err := json.Marshal(p)
		if err != nil {
			t.Fatal(err)
		}
		if got := p.AppendJSON(nil); !bytes.Equal(got, want) {
			t.Fatalf("AppendJSON\n%s\nencoding/json\n%s", got, want)
		}
	})
}

// A Post changed after it was encoded is encoded again, never shown with
// its old JSON.
func TestEncodedPostChanged(t *testing.T) {
	for name, change := range map[string]func(p *Post){
		"id":              func(p *Post) { p.ID = "12" },
		"id same length":  func(p *Post) { p.ID = "124" },
		"author":          func(p *Post) { p.AuthorID = "9" },
		"content":         func(p *Post) { p.Content = "changed <b>" },
		"content prefix":  func(p *Post) { p.Content = p.Content[:3] },
		"createdAt":       func(p *Post) { p.CreatedAt = "2001-01-01T00:00:00.000Z" },
		"escaped content": func(p *Post) { p.Content = "a \"b\"" },
		"author's id":     func(p *Post) { p.Author.ID = "5" },
		"editedAt":        func(p *Post) { p.EditedAt = "2001-01-01T00:00:00.000Z" },
		"replyTo":         func(p *Post) { p.ReplyTo = &PostRef{ID: "1", AuthorID: "2"} },
		"media":           func(p *Post) { p.Media = []events.Media{{URL: "https://m"}} },
	} {
		it := newItem(123, 4, "hello & <bye>", 1764497861283)
		if name == "escaped content" {
			it = newItem(123, 4, "a 'b'", 1764497861283)
		}
		p := it.post
		change(&p)
		want, _ := json.Marshal(p)
		if got := p.AppendJSON(nil); !bytes.Equal(got, want) {
			t.Errorf("%s: AppendJSON\n%s\nencoding/json\n%s", name, got, want)
		}
	}
}

// BenchmarkPageAppendJSON: a page of 20 posts encoded by AppendJSON from
// posts encoded once ("pre-encoded"), by AppendJSON from plain posts
// ("encoded per read") and by json.Marshal ("encoding/json").
//
//	go test -run '^$' -bench PageAppendJSON -count 5 ./queries/
func BenchmarkPageAppendJSON(b *testing.B) {
	content := "post 123456: lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod"
	encoded, plain := Page{}, Page{}
	for i := range 20 {
		it := newItem(915184806927532032+int64(i), 1234, content, 1764497861283)
		encoded.Items = append(encoded.Items, it.post)
		plain.Items = append(plain.Items, Post{ID: it.post.ID, AuthorID: it.post.AuthorID, Content: it.post.Content, CreatedAt: it.post.CreatedAt})
	}
	c := "AQAAAZrU"
	encoded.NextCursor, plain.NextCursor = &c, &c
	encoded.PrevCursor, plain.PrevCursor = &c, &c
	buf := make([]byte, 0, 8<<10)
	b.Run("pre-encoded", func(b *testing.B) {
		for b.Loop() {
			buf = encoded.AppendJSON(buf[:0])
		}
	})
	b.Run("encoded per read", func(b *testing.B) {
		for b.Loop() {
			buf = plain.AppendJSON(buf[:0])
		}
	})
	b.Run("encoding/json", func(b *testing.B) {
		for b.Loop() {
			if _, err := json.Marshal(plain); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// Pages read through Redis and PostgreSQL, first from Redis's post cache
// and then from the process's (whose posts carry their JSON encoded once),
// encode byte for byte as encoding/json encodes them, with each post's
// content as written; a post deleted after it was cached leaves the page.
func TestHomePageJSONMatchesEncodingJSON(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{})
	u, a := b.user(), b.user()
	b.follow(u, a)
	contents := []string{"plain words", `<b>"quoted" & \ </b>`, "line\nbreak\ttab \u2028 é 😀", "invalid \xff utf-8"}
	want := map[int64]string{}
	var ks []key
	for i, c := range contents {
		k := b.post(a, base+int64(i))
		b.exec(`UPDATE posts SET content = $1 WHERE id = $2`, strings.ToValidUTF8(c, "\uFFFD"), k.id) // PostgreSQL keeps valid UTF-8 only
		want[k.id] = strings.ToValidUTF8(c, "\uFFFD")
		ks = append(ks, k)
	}
	b.projectAll(nil, []int64{u}, 500, 500)
	// One body only in PostgreSQL (evicted from Redis's post cache).
	b.rdb.Del(b.ctx, b.keys.Post(ks[1].id))
	check := func(what string, n int) {
		t.Helper()
		p, err := b.feed.Home(b.ctx, u, "", 20)
		if err != nil {
			t.Fatal(err)
		}
		if len(p.Items) != n {
			t.Fatalf("%s: %d items, want %d", what, len(p.Items), n)
		}
		for _, it := range p.Items {
			if it.enc == nil {
				t.Fatalf("%s: post %s without its encoded JSON", what, it.ID)
			}
			id, _ := strconv.ParseInt(it.ID, 10, 64)
			if it.Content != want[id] {
				t.Fatalf("%s: post %d content %q, want %q", what, id, it.Content, want[id])
			}
		}
		enc, err := json.Marshal(p)
		if err != nil {
			t.Fatal(err)
		}
		if got := p.AppendJSON(nil); !bytes.Equal(got, enc) {
			t.Fatalf("%s: AppendJSON\n%s\nencoding/json\n%s", what, got, enc)
		}
	}
	check("from Redis and PostgreSQL", len(contents))
	check("from the process cache", len(contents))
	b.deletePost(ks[2])
	b.feed.posts.markDeleted([]int64{ks[2].id}, time.Now()) // as the deletion feed would
	check("after a deletion", len(contents)-1)
}

// A page made by makePage gives its items' array back on Release, cleared
// (no post kept alive through the pool); a page made elsewhere is left
// as it is.
func TestPageRelease(t *testing.T) {
	var items []item
	for i := range 3 {
		items = append(items, item{key: key{ms: int64(1000 - i), id: int64(10 - i)}, post: Post{ID: strconv.Itoa(10 - i), Content: "p"}})
	}
	p := makePage(items, 2)
	if len(p.Items) != 2 || p.Items[0].ID != "10" || p.Items[1].ID != "9" || p.NextCursor == nil || p.PrevCursor == nil {
		t.Fatalf("page %+v", p)
	}
	arr := p.Items[:cap(p.Items)]
	p.Release()
	if p.Items != nil {
		t.Fatalf("released page still has items %+v", p.Items)
	}
	for i := range arr {
		if arr[i].ID != "" || arr[i].Content != "" {
			t.Fatalf("released array holds post %d: %+v", i, arr[i])
		}
	}
	p.Release() // a second release gives nothing back twice

	own := []Post{{ID: "1"}}
	q := Page{Items: own}
	q.Release()
	if own[0].ID != "1" || len(q.Items) != 1 {
		t.Fatalf("a page made elsewhere was changed by Release: %+v", q)
	}
}
