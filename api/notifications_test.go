package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/feedco/feed/api"
	"github.com/feedco/feed/events"
	"github.com/feedco/feed/projections"
	"github.com/feedco/feed/queries"
	"github.com/feedco/feed/readmodel"
	"github.com/feedco/feed/testkit/testenv"
)

// notifEnv is the API with a query side over a Redis prefix, and the
// notifications and followers projectors (mutes and blocks) applied
// straight from the events table (CDC and Kafka are the pipeline's
// tests').
type notifEnv struct {
	*env
	rd   *testenv.Redis
	keys readmodel.Keys
	last int64
}

func setupNotifications(t *testing.T) *notifEnv {
	t.Helper()
	return setupNotificationsMax(t, 0)
}

// setupNotificationsMax is setupNotifications with the query side's
// notifications bound max (0: the default).
func setupNotificationsMax(t *testing.T, max int) *notifEnv {
	t.Helper()
	ne := &notifEnv{rd: testenv.NewRedis(t)}
	ne.keys = readmodel.Keys{Prefix: ne.rd.Prefix}
	ne.env = setup(t, options{withPool: func(pool *pgxpool.Pool, d *api.Deps) {
		f, err := queries.New(queries.Config{Keys: ne.keys, NotificationsMax: max, Logger: testenv.Logger()}, pool, ne.rd.Client)
		if err != nil {
			t.Fatal(err)
		}
		testenv.Start(t, f.Service())
		d.Feed = f
	}})
	return ne
}

// project applies the events appended since the last call.
func (ne *notifEnv) project(t *testing.T) {
	t.Helper()
	ne.projectOnly(t, projections.NameNotifications, projections.NameFollowers)
}

// projectOnly applies the events appended since the last call with the
// projectors named.
func (ne *notifEnv) projectOnly(t *testing.T, names ...string) {
	t.Helper()
	ctx := context.Background()
	ps, err := projections.New(projections.Config{Keys: ne.keys}, ne.pool, ne.rd.Client, nil, names...)
	if err != nil {
		t.Fatal(err)
	}
	rows, err := ne.pool.Query(ctx, `SELECT position, stream_id, stream_version, type, payload, recorded_at FROM events WHERE position > $1 ORDER BY position`, ne.last)
	if err != nil {
		t.Fatal(err)
	}
	var envs []events.Envelope
	for rows.Next() {
		var e events.Envelope
		if err := rows.Scan(&e.Position, &e.StreamID, &e.StreamVersion, &e.Type, &e.Payload, &e.RecordedAt); err != nil {
			t.Fatal(err)
		}
		envs = append(envs, e)
		ne.last = e.Position
	}
	rows.Close()
	for _, e := range envs {
		if err := projections.Apply(ctx, ps, e); err != nil {
			t.Fatal(err)
		}
	}
}

type notifPage struct {
	Items []struct {
		ID, Type, CreatedAt string
		Actor               struct{ ID, Name string }
		Post                *struct {
			ID, AuthorID, Content string
			Unavailable           bool
		}
	}
	NextCursor *string
	Unread     int
}

func (ne *notifEnv) page(t *testing.T, bearer, query string) notifPage {
	t.Helper()
	r := ne.do(t, "GET", "/api/notifications"+query, "", "Authorization", bearer)
	if r.Status != 200 {
		t.Fatalf("GET notifications%s: %d %s", query, r.Status, r.Body)
	}
	var p notifPage
	if err := json.Unmarshal(r.Body, &p); err != nil {
		t.Fatal(err)
	}
	return p
}

func (ne *notifEnv) put(t *testing.T, bearer, path string) {
	t.Helper()
	if r := ne.do(t, "PUT", path, "", "Authorization", bearer); r.Status != 204 {
		t.Fatalf("PUT %s: %d %s", path, r.Status, r.Body)
	}
}

func (ne *notifEnv) post(t *testing.T, bearer, body string) string {
	t.Helper()
	r := ne.do(t, "POST", "/api/posts", body, "Authorization", bearer)
	if r.Status != 201 {
		t.Fatalf("POST post: %d %s", r.Status, r.Body)
	}
	return r.json(t)["id"].(string)
}

func TestNotificationsAPI(t *testing.T) {
	ne := setupNotifications(t)
	ana, bob, cy, dee := ne.register(t, "ana"), ne.register(t, "bob"), ne.register(t, "cy"), ne.register(t, "dee")
	A, B, C, D := ne.bearer(ana), ne.bearer(bob), ne.bearer(cy), ne.bearer(dee)
	post := ne.post(t, A, `{"content":"hello"}`)
	ne.put(t, B, "/api/posts/"+post+"/like")
	ne.put(t, B, "/api/posts/"+post+"/repost")
	ne.post(t, C, fmt.Sprintf(`{"content":"re","replyTo":%q}`, post))
	ne.post(t, C, fmt.Sprintf(`{"content":"q","quoteOf":%q}`, post))
	ne.put(t, D, fmt.Sprintf("/api/following/%d", ana))
	ne.put(t, A, "/api/posts/"+post+"/like") // one's own: nothing
	ne.project(t)

	// Every type, newest first, hydrated; paged gap-free with limit 2.
	all := ne.page(t, A, "?limit=50")
	var types []string
	for _, it := range all.Items {
		types = append(types, it.Type)
	}
	if fmt.Sprint(types) != "[follow quote reply repost like]" {
		t.Fatalf("types newest first %v", types)
	}
	if all.Unread != 5 || all.NextCursor != nil {
		t.Fatalf("unread %d, nextCursor %v; want 5 and none", all.Unread, all.NextCursor)
	}
	if it := all.Items[4]; it.Actor.Name != "bob" || it.Post == nil || it.Post.ID != post || it.Post.Content != "hello" {
		t.Fatalf("the like: %+v", it)
	}
	if all.Items[0].Post != nil || all.Items[0].Actor.ID != fmt.Sprint(dee) {
		t.Fatalf("the follow: %+v", all.Items[0])
	}
	var paged []string
	cursor := ""
	for range 5 {
		p := ne.page(t, A, "?limit=2"+cursor)
		for _, it := range p.Items {
			paged = append(paged, it.ID)
		}
		if p.NextCursor == nil {
			break
		}
		cursor = "&cursor=" + *p.NextCursor
	}
	if len(paged) != 5 {
		t.Fatalf("paged %d notifications, want 5", len(paged))
	}
	for i, it := range all.Items {
		if paged[i] != it.ID {
			t.Fatalf("page by page %v, at once %v", paged, all.Items)
		}
	}

	// The marker: unread counts what is newer; an older marker is a no-op.
	if r := ne.do(t, "PUT", "/api/markers", `{}`, "Authorization", A); r.Status != 204 {
		t.Fatalf("PUT no marker: %d %s", r.Status, r.Body)
	}
	if r := ne.do(t, "PUT", "/api/markers", fmt.Sprintf(`{"notifications":%q}`, all.Items[2].ID), "Authorization", A); r.Status != 204 {
		t.Fatalf("PUT marker: %d %s", r.Status, r.Body)
	}
	if u := ne.page(t, A, "").Unread; u != 2 {
		t.Fatalf("unread %d after the marker at the third, want 2", u)
	}
	if r := ne.do(t, "PUT", "/api/markers", fmt.Sprintf(`{"notifications":%q}`, all.Items[4].ID), "Authorization", A); r.Status != 204 {
		t.Fatalf("PUT an older marker: %d %s", r.Status, r.Body)
	}
	r := ne.do(t, "GET", "/api/markers", "", "Authorization", A)
	var mk struct{ Home, Notifications *string }
	if err := json.Unmarshal(r.Body, &mk); err != nil || r.Status != 200 {
		t.Fatalf("GET markers: %d %s", r.Status, r.Body)
	}
	if mk.Notifications == nil || *mk.Notifications != all.Items[2].ID || mk.Home != nil {
		t.Fatalf("markers %s: the older marker moved it back, or home is set", r.Body)
	}
	if u := ne.page(t, A, "").Unread; u != 2 {
		t.Fatalf("unread %d after an older marker, want still 2", u)
	}
	// A home marker is a feed cursor, forward only as well.
	feed := ne.do(t, "GET", "/api/feed", "", "Authorization", A).json(t)
	if prev, ok := feed["prevCursor"].(string); ok {
		if r := ne.do(t, "PUT", "/api/markers", fmt.Sprintf(`{"home":%q}`, prev), "Authorization", A); r.Status != 204 {
			t.Fatalf("PUT home marker: %d %s", r.Status, r.Body)
		}
		if got := ne.do(t, "GET", "/api/markers", "", "Authorization", A).json(t)["home"]; got != prev {
			t.Fatalf("home marker %v, want %s", got, prev)
		}
	} else {
		t.Fatalf("ana's feed has no prevCursor: %v", feed)
	}

	// Mutes and blocks hide the actor's notifications at read time, either
	// way: ana mutes bob, cy blocks ana.
	ne.put(t, A, fmt.Sprintf("/api/muting/%d", bob))
	ne.put(t, C, fmt.Sprintf("/api/blocking/%d", ana))
	ne.project(t)
	hidden := ne.page(t, A, "")
	if len(hidden.Items) != 1 || hidden.Items[0].Type != "follow" {
		t.Fatalf("with bob muted and cy blocking: %+v", hidden.Items)
	}
	if hidden.Unread != 1 {
		t.Fatalf("unread %d with the others hidden, want 1 (the follow)", hidden.Unread)
	}

	// Undo and deletion: the like goes, a deleted post shows unavailable.
	ne.do(t, "DELETE", "/api/posts/"+post, "", "Authorization", A)
	if r := ne.do(t, "DELETE", fmt.Sprintf("/api/muting/%d", bob), "", "Authorization", A); r.Status != 204 {
		t.Fatalf("unmute: %d", r.Status)
	}
	if r := ne.do(t, "DELETE", "/api/posts/"+post+"/like", "", "Authorization", B); r.Status != 204 {
		t.Fatalf("unlike: %d", r.Status)
	}
	ne.project(t)
	p := ne.page(t, A, "")
	if len(p.Items) != 2 || p.Items[1].Type != "repost" || p.Items[1].Post == nil || !p.Items[1].Post.Unavailable {
		t.Fatalf("after the unlike and the deletion: %+v", p.Items)
	}

	// A lost set is not read as the truth: the next read completes it
	// from PostgreSQL (the cold path), the same page.
	if err := ne.rd.Client.Del(context.Background(), readmodel.NewNotifications(ne.keys, 0, 0).Key(ana)).Err(); err != nil {
		t.Fatal(err)
	}
	again := ne.page(t, A, "")
	if len(again.Items) != len(p.Items) || again.Items[0].ID != p.Items[0].ID || again.Items[1].ID != p.Items[1].ID || again.Unread != p.Unread {
		t.Fatalf("after the set was lost: %+v, want %+v", again, p)
	}

	// Errors: problem+json 400 and 401.
	for _, q := range []string{"?cursor=nope", "?cursor=AAAA", "?limit=0"} {
		if r := ne.do(t, "GET", "/api/notifications"+q, "", "Authorization", A); r.Status != 400 || r.Header.Get("Content-Type") != "application/problem+json" {
			t.Errorf("GET notifications%s: %d %s", q, r.Status, r.Header.Get("Content-Type"))
		}
	}
	for _, body := range []string{`{"notifications":"nope"}`, `{"home":"nope"}`, `{"other":1}`, `[`} {
		if r := ne.do(t, "PUT", "/api/markers", body, "Authorization", A); r.Status != 400 || r.Header.Get("Content-Type") != "application/problem+json" {
			t.Errorf("PUT markers %s: %d %s", body, r.Status, r.Body)
		}
	}
	for _, m := range []string{"GET /api/notifications", "GET /api/markers", "PUT /api/markers"} {
		var method, path string
		fmt.Sscan(m, &method, &path)
		if r := ne.do(t, method, path, `{}`); r.Status != 401 {
			t.Errorf("%s without a token: %d", m, r.Status)
		}
	}
}

// TestNotificationsOpenAPI validates the responses of the notifications
// and markers routes against the OpenAPI document: every type, a deleted
// post (unavailable), markers unset and set, the problems.
func TestNotificationsOpenAPI(t *testing.T) {
	ne := setupNotifications(t)
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(api.OpenAPI())
	if err != nil {
		t.Fatal(err)
	}
	check := func(method, path string, status int, r response) {
		t.Helper()
		op := doc.Paths.Value(path).GetOperation(method)
		ref := op.Responses.Status(status)
		if ref == nil {
			t.Fatalf("%s %s: status %d is not in the document", method, path, status)
		}
		if status == 204 {
			return
		}
		mt := r.Header.Get("Content-Type")
		media := ref.Value.Content.Get(mt)
		if media == nil {
			t.Fatalf("%s %s %d: Content-Type %q is not the document's", method, path, status, mt)
		}
		var v any
		if err := json.Unmarshal(r.Body, &v); err != nil {
			t.Fatal(err)
		}
		if err := media.Schema.Value.VisitJSON(v, openapi3.EnableJSONSchema2020()); err != nil {
			t.Errorf("%s %s %d: %s does not match the document: %v", method, path, status, r.Body, err)
		}
	}
	ana, bob := ne.register(t, "ana"), ne.register(t, "bob")
	A, B := ne.bearer(ana), ne.bearer(bob)
	post := ne.post(t, A, `{"content":"hello"}`)
	gone := ne.post(t, A, `{"content":"soon gone"}`)
	ne.put(t, B, "/api/posts/"+post+"/like")
	ne.put(t, B, "/api/posts/"+gone+"/repost")
	ne.post(t, B, fmt.Sprintf(`{"content":"re","replyTo":%q,"quoteOf":%q}`, post, post))
	ne.put(t, B, fmt.Sprintf("/api/following/%d", ana))
	ne.do(t, "DELETE", "/api/posts/"+gone, "", "Authorization", A)
	ne.project(t)

	r := ne.do(t, "GET", "/api/markers", "", "Authorization", A)
	check("GET", "/api/markers", 200, r)
	r = ne.do(t, "GET", "/api/notifications?limit=3", "", "Authorization", A)
	check("GET", "/api/notifications", 200, r)
	var p notifPage
	if err := json.Unmarshal(r.Body, &p); err != nil || p.NextCursor == nil || len(p.Items) != 3 {
		t.Fatalf("first page %s", r.Body)
	}
	check("GET", "/api/notifications", 200, ne.do(t, "GET", "/api/notifications?cursor="+*p.NextCursor, "", "Authorization", A))
	all := ne.page(t, A, "")
	if len(all.Items) != 5 || !all.Items[3].Post.Unavailable {
		t.Fatalf("want 5 notifications, the repost of the deleted post unavailable: %+v", all.Items)
	}
	r = ne.do(t, "PUT", "/api/markers", fmt.Sprintf(`{"notifications":%q}`, p.Items[0].ID), "Authorization", A)
	check("PUT", "/api/markers", r.Status, r)
	check("GET", "/api/markers", 200, ne.do(t, "GET", "/api/markers", "", "Authorization", A))
	check("GET", "/api/notifications", 400, ne.do(t, "GET", "/api/notifications?cursor=x", "", "Authorization", A))
	check("PUT", "/api/markers", 400, ne.do(t, "PUT", "/api/markers", `{"notifications":"x"}`, "Authorization", A))
	check("GET", "/api/notifications", 401, ne.do(t, "GET", "/api/notifications", ""))
	check("PUT", "/api/markers", 401, ne.do(t, "PUT", "/api/markers", `{}`))
	check("GET", "/api/markers", 401, ne.do(t, "GET", "/api/markers", ""))
}

// TestNotificationsBelowTheFloor: a set holds the newest inside the
// horizon (4 days), at most the bound (3 here); pages and the unread
// count continue from PostgreSQL below its floor, in the same order,
// with mutes applied there too. Ana's twelve followers followed her 20,
// 40, ... 240 hours ago (the rows' times moved back; no projector runs
// for them, so the set is the query side's completion from PostgreSQL).
func TestNotificationsBelowTheFloor(t *testing.T) {
	ctx := context.Background()
	ne := setupNotificationsMax(t, 3)
	ana := ne.register(t, "ana")
	A := ne.bearer(ana)
	for i := range 12 {
		f := ne.register(t, fmt.Sprintf("f%d", i))
		ne.put(t, ne.bearer(f), fmt.Sprintf("/api/following/%d", ana))
		if _, err := ne.pool.Exec(ctx, `UPDATE follows SET created_at = now() - $2 * interval '20 hours'
			WHERE follower_id = $1`, f, 12-i); err != nil {
			t.Fatal(err)
		}
	}
	type follow struct {
		id    string
		actor int64
	}
	var want []follow // newest first, from the table
	rows, err := ne.pool.Query(ctx, `SELECT follower_id, floor(extract(epoch FROM created_at) * 1000)::bigint
		FROM follows WHERE followee_id = $1 ORDER BY created_at DESC`, ana)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var n readmodel.Notification
		if err := rows.Scan(&n.Actor, &n.MS); err != nil {
			t.Fatal(err)
		}
		n.Type = readmodel.NotifyFollow
		want = append(want, follow{n.ID(), n.Actor})
	}
	rows.Close()
	if len(want) != 12 {
		t.Fatalf("%d follows in the table, want 12", len(want))
	}
	pageAll := func() ([]string, int) {
		var ids []string
		unread, cursor := -1, ""
		for range 20 {
			p := ne.page(t, A, "?limit=2"+cursor)
			if unread < 0 {
				unread = p.Unread
			}
			for _, it := range p.Items {
				ids = append(ids, it.ID)
			}
			if p.NextCursor == nil {
				return ids, unread
			}
			cursor = "&cursor=" + *p.NextCursor
		}
		t.Fatal("more than 20 pages")
		return nil, 0
	}
	ids, unread := pageAll()
	if len(ids) != 12 || unread != 12 {
		t.Fatalf("paged %d notifications, unread %d; want 12 and 12", len(ids), unread)
	}
	for i, w := range want {
		if ids[i] != w.id {
			t.Fatalf("notification %d: %s, want %s (the table's order)", i, ids[i], w.id)
		}
	}
	// What Redis holds: the newest 3 (all inside the horizon), the floor
	// at the fourth, expiring 4 days after the newest.
	model := readmodel.DefaultPolicy().Notifications(ne.keys, nil)
	set := must(model.All(ctx, ne.rd.Client, ana))
	if !set.Built || !set.Older || len(set.Items) != 3 || set.Items[0].ID() != want[0].id || set.Items[2].ID() != want[2].id {
		t.Fatalf("the completed set: %+v", set)
	}
	fourth := must(readmodel.ParseNotificationID(want[3].id))
	if set.Floor != fourth.MS {
		t.Fatalf("floor %d, want the fourth's %d", set.Floor, fourth.MS)
	}
	exp := must(ne.rd.Client.PExpireTime(ctx, model.Key(ana)).Result())
	if newest := set.Items[0].MS + model.Horizon().H.Milliseconds(); exp.Milliseconds() != newest {
		t.Fatalf("the set expires at %d, want the newest + 4 days, %d", exp.Milliseconds(), newest)
	}

	// A marker at the eighth: seven are unread, four of them below the
	// floor. Muting the seventh's actor hides it in PostgreSQL's part too.
	if r := ne.do(t, "PUT", "/api/markers", fmt.Sprintf(`{"notifications":%q}`, want[7].id), "Authorization", A); r.Status != 204 {
		t.Fatalf("PUT marker: %d %s", r.Status, r.Body)
	}
	if u := ne.page(t, A, "?limit=1").Unread; u != 7 {
		t.Fatalf("unread %d with the marker at the eighth, want 7", u)
	}
	ne.put(t, A, fmt.Sprintf("/api/muting/%d", want[6].actor))
	ne.projectOnly(t, projections.NameFollowers) // the follows' notifications stay the completion's
	ids, unread = pageAll()
	if len(ids) != 11 || unread != 6 || slices.Contains(ids, want[6].id) {
		t.Fatalf("with the seventh's actor muted: %d notifications, unread %d; want 11 and 6, without it", len(ids), unread)
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
