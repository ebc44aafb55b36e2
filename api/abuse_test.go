package api_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/feedco/feed/api"
	"github.com/feedco/feed/queries"
	"github.com/feedco/feed/readmodel"
	"github.com/feedco/feed/testkit/testenv"
)

// The abuse suite: each attack a hostile client can make on the public
// port, and the answer it gets (docs/faults.md, the abuse rows). Every
// test serves through Server.Serve on a loopback listener, so the
// connection-level defences (deadlines, connection bounds, framing
// checks) are the ones in production.

// served is a test server listening on loopback, with its address.
func served(t *testing.T, opt options) (*env, string) {
	t.Helper()
	e := setup(t, opt)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	serveOn(t, e.srv, ln)
	e.url = "http://" + ln.Addr().String()
	return e, ln.Addr().String()
}

// rawDial opens a connection for hand-written requests; a hang fails the
// test rather than blocking it.
func rawDial(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if err := c.SetDeadline(time.Now().Add(60 * time.Second)); err != nil {
		t.Fatal(err)
	}
	return c
}

// readAnswer reads one response from br and its problem type ("" for
// none).
func readAnswer(t *testing.T, br *bufio.Reader) (*http.Response, string) {
	t.Helper()
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("read the answer: %v", err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var p api.Problem
	_ = json.Unmarshal(b, &p)
	return resp, strings.TrimPrefix(p.Type, api.ProblemBase)
}

// closedAfter reports whether the server closed the connection after its
// answer (the next read sees EOF or a reset, not a time-out).
func closedAfter(br *bufio.Reader, c net.Conn) bool {
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, err := br.ReadByte()
	if err == nil {
		return false
	}
	ne, ok := err.(net.Error)
	return !ok || !ne.Timeout()
}

// Attack: many anonymous connections announce a body (Expect:
// 100-continue, or a Content-Length they never fill) on the write routes
// and hold it. Answer: none holds a write slot (an unidentified post is
// 401 before its body is read; a registration's body must arrive within
// BodyReadTimeout, else 408 and the connection closed), so a logged-in
// user's writes succeed meanwhile, with a write bound of 2.
func TestAbuseHeldBodiesDoNotTakeWriteSlots(t *testing.T) {
	t.Parallel()
	e, addr := served(t, options{cfg: api.Config{MaxWritesInFlight: 2, BodyReadTimeout: 2 * time.Second}})
	e.user(t, 1)
	const holders = 40
	var wg sync.WaitGroup
	answers := make(chan string, holders)
	for i := range holders {
		c := rawDial(t, addr)
		path, extra := "/api/users", ""
		if i%2 == 0 {
			path, extra = "/api/posts", "Expect: 100-continue\r\n"
		}
		if _, err := fmt.Fprintf(c, "POST %s HTTP/1.1\r\nHost: feed\r\nContent-Type: application/json\r\n%sContent-Length: 100\r\n\r\n{\"na", path, extra); err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			br := bufio.NewReader(c)
			resp, typ := readAnswer(t, br)
			answers <- fmt.Sprintf("%s %d %s closed=%v", path, resp.StatusCode, typ, resp.Close || closedAfter(br, c))
		}()
	}
	// Every holder is connected and its headers are read: a write now
	// must not wait for them.
	testenv.Eventually(t, 10*time.Second, "the holders' connections open", func() bool {
		open, _ := e.srv.Conns()
		return open >= holders
	})
	for i := range 10 {
		r := e.do(t, "POST", "/api/posts", fmt.Sprintf(`{"content":"held %d"}`, i), "Authorization", e.bearer(1))
		if r.Status != 201 {
			t.Fatalf("a logged-in post while %d anonymous bodies are held: %d %s", holders, r.Status, r.Body)
		}
	}
	wg.Wait()
	close(answers)
	for a := range answers {
		switch {
		case strings.HasPrefix(a, "/api/posts 401 unauthorized"):
		case a == "/api/users 408 request-timeout closed=true":
		default:
			t.Errorf("a held body answered %q", a)
		}
	}
	if _, writes := e.srv.InFlight(); writes != 0 {
		t.Fatalf("%d writes in flight after the attack", writes)
	}
}

// Attack: more connections than the server holds. Answer: it accepts
// MaxConns and no more (the rest wait in the backlog, no file descriptor
// spent), a closed one makes room, and kept-alive connections beyond
// MaxIdleConns are closed as they go idle.
func TestAbuseConnectionBounds(t *testing.T) {
	t.Parallel()
	e, addr := served(t, options{cfg: api.Config{MaxConns: 8, MaxIdleConns: 4}})
	// Eight kept-alive connections, each after one request: four stay.
	var idle []*bufio.Reader
	var conns []net.Conn
	for range 8 {
		c := rawDial(t, addr)
		if _, err := io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: feed\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		br := bufio.NewReader(c)
		if resp, _ := readAnswer(t, br); resp.StatusCode != 200 {
			t.Fatalf("healthz: %d", resp.StatusCode)
		}
		idle, conns = append(idle, br), append(conns, c)
		// One at a time, so that the first four are the ones kept.
		want := min(len(conns), 4)
		testenv.Eventually(t, 10*time.Second, fmt.Sprintf("%d idle connections left open", want), func() bool {
			open, idleNow := e.srv.Conns()
			return open == want && idleNow == want
		})
	}
	for i := 4; i < 8; i++ { // the four that went idle beyond the bound
		if !closedAfter(idle[i], conns[i]) {
			t.Fatalf("connection %d, idle beyond the bound of 4, is still open", i)
		}
	}
	// Fill the bound with connections that send nothing: the ninth is
	// not accepted until one closes.
	for range 4 {
		rawDial(t, addr)
	}
	testenv.Eventually(t, 10*time.Second, "eight connections open", func() bool {
		open, _ := e.srv.Conns()
		return open == 8
	})
	ninth := rawDial(t, addr) // the kernel completes the handshake; the server has not accepted it
	if _, err := io.WriteString(ninth, "GET /healthz HTTP/1.1\r\nHost: feed\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	if open, _ := e.srv.Conns(); open != 8 {
		t.Fatalf("%d connections open, want the bound of 8", open)
	}
	conns[0].Close() // room for the ninth
	if resp, _ := readAnswer(t, bufio.NewReader(ninth)); resp.StatusCode != 200 {
		t.Fatalf("the ninth connection once another closed: %d", resp.StatusCode)
	}
}

// Attack: one user writes as fast as it can, through two API processes
// that share Redis; one client address registers account after account.
// Answer: past the quota (counted across both processes), 429
// rate-limited with Retry-After and the RateLimit fields, having done
// nothing; under it, the fields say what is left.
func TestAbuseQuotas(t *testing.T) {
	t.Parallel()
	rd := testenv.NewRedis(t)
	quota := func(d *api.Deps) { d.QuotaRedis, d.QuotaKeys = rd.Client, readmodel.Keys{Prefix: rd.Prefix} }
	cfg := api.Config{WritesPerMinute: 3, RegistrationsPerHour: 2, ReadsPerSecond: 1000}
	a := setup(t, options{cfg: cfg, tweak: quota})
	// A second process, on a database of its own but the same Redis:
	// the quota is the user's wherever it writes.
	b := setup(t, options{cfg: cfg, tweak: quota})
	b.user(t, 1001)

	a.user(t, 1001)
	for i, e := range []*env{a, b, a} {
		r := e.do(t, "POST", "/api/posts", fmt.Sprintf(`{"content":"quota %d"}`, i), "Authorization", a.bearer(1001))
		if r.Status != 201 {
			t.Fatalf("post %d under the quota: %d %s", i, r.Status, r.Body)
		}
		if p := r.Header.Get("RateLimit-Policy"); p != `"writes";q=3;w=60` {
			t.Fatalf("RateLimit-Policy %q", p)
		}
		if want := fmt.Sprintf(`"writes";r=%d;t=`, 2-i); !strings.HasPrefix(r.Header.Get("RateLimit"), want) {
			t.Fatalf("post %d: RateLimit %q, want %s...", i, r.Header.Get("RateLimit"), want)
		}
	}
	r := b.do(t, "POST", "/api/posts", `{"content":"one too many"}`, "Authorization", a.bearer(1001))
	wantProblem(t, r, http.StatusTooManyRequests, "rate-limited")
	if ra, err := strconv.Atoi(r.Header.Get("Retry-After")); err != nil || ra < 1 || ra > 60 {
		t.Fatalf("Retry-After %q", r.Header.Get("Retry-After"))
	}
	if !strings.HasPrefix(r.Header.Get("RateLimit"), `"writes";r=0;t=`) {
		t.Fatalf("RateLimit %q past the quota", r.Header.Get("RateLimit"))
	}
	if n := countRows(t, a.pool, `SELECT count(*) FROM posts WHERE author_id = 1001`) + countRows(t, b.pool, `SELECT count(*) FROM posts WHERE author_id = 1001`); n != 3 {
		t.Fatalf("%d posts, want the 3 answered 201", n)
	}

	// Registrations: two per address per hour, then 429.
	for i := range 3 {
		r := a.do(t, "POST", "/api/users", fmt.Sprintf(`{"name":"signup %d"}`, i))
		switch {
		case i < 2 && r.Status != 201:
			t.Fatalf("registration %d: %d %s", i, r.Status, r.Body)
		case i == 2:
			wantProblem(t, r, http.StatusTooManyRequests, "rate-limited")
		}
	}
}

// Attack: request smuggling past a proxy that frames by Content-Length:
// a request with both Content-Length and Transfer-Encoding, or with a
// Transfer-Encoding folded onto the next line, whose body hides a second
// request. Answer: 400 bad-request and the connection closed; the hidden
// request is never answered. A connection's ordinary requests (a chunked
// body, a Content-Length body, a bodiless one) are served on one
// keep-alive connection as before.
func TestAbuseSmuggling(t *testing.T) {
	t.Parallel()
	e, addr := served(t, options{})
	e.user(t, 1001)
	auth := "Authorization: " + e.bearer(1001) + "\r\n"
	smuggled := "GET /api/users/1001 HTTP/1.1\r\nHost: feed\r\n" + auth + "\r\n"
	for _, c := range []struct{ name, head string }{
		{"CL then TE", "Content-Length: 5\r\nTransfer-Encoding: chunked\r\n"},
		{"TE then CL", "Transfer-Encoding: chunked\r\nContent-Length: 5\r\n"},
		{"folded TE", "Transfer-Encoding:\r\n chunked\r\n"},
	} {
		t.Run(c.name, func(t *testing.T) {
			conn := rawDial(t, addr)
			req := "POST /api/posts HTTP/1.1\r\nHost: feed\r\n" + auth + "Content-Type: application/json\r\n" + c.head + "\r\n0\r\n\r\n" + smuggled
			if _, err := io.WriteString(conn, req); err != nil {
				t.Fatal(err)
			}
			br := bufio.NewReader(conn)
			resp, typ := readAnswer(t, br)
			if resp.StatusCode != 400 || typ != "bad-request" || !resp.Close {
				t.Fatalf("answer %d %s, Connection: close %v; want 400 bad-request, closed", resp.StatusCode, typ, resp.Close)
			}
			if !closedAfter(br, conn) {
				t.Fatal("the connection is open after the refusal: the hidden request may be served")
			}
		})
	}
	t.Run("keep-alive", func(t *testing.T) {
		conn := rawDial(t, addr)
		br := bufio.NewReader(conn)
		body := `{"content":"chunked"}`
		reqs := []string{
			"POST /api/posts HTTP/1.1\r\nHost: feed\r\n" + auth + "Transfer-Encoding: chunked\r\n\r\n" +
				fmt.Sprintf("%x;note=1\r\n%s\r\n0\r\nX-Trailer: 1\r\n\r\n", len(body), body),
			"POST /api/posts HTTP/1.1\r\nHost: feed\r\n" + auth + fmt.Sprintf("Content-Length: %d\r\n\r\n%s", len(`{"content":"length"}`), `{"content":"length"}`),
			smuggled,
		}
		for i, want := range []int{201, 201, 200} {
			if _, err := io.WriteString(conn, reqs[i]); err != nil {
				t.Fatal(err)
			}
			if resp, typ := readAnswer(t, br); resp.StatusCode != want || resp.Close {
				t.Fatalf("request %d: %d %s (close %v), want %d on a kept-alive connection", i, resp.StatusCode, typ, resp.Close, want)
			}
		}
	})
}

// withFeed gives the server the query side on the test's database and a
// Redis namespace of its own.
func withFeed(t *testing.T) func(*pgxpool.Pool, *api.Deps) {
	rd := testenv.NewRedis(t)
	return func(pool *pgxpool.Pool, d *api.Deps) {
		f, err := queries.New(queries.Config{Keys: readmodel.Keys{Prefix: rd.Prefix}, ReadCacheKeys: -1, Logger: testenv.Logger()}, pool, rd.Client)
		if err != nil {
			t.Fatal(err)
		}
		testenv.Start(t, f.Service())
		d.Feed = f
	}
}

// pageIDs reads every page of path as user and returns the posts' ids.
func (e *env) pageIDs(t *testing.T, path string, user int64) []string {
	t.Helper()
	var ids []string
	cursor := ""
	for range 100 {
		p := path + "?limit=50"
		if cursor != "" {
			p += "&cursor=" + cursor
		}
		r := e.do(t, "GET", p, "", "Authorization", e.bearer(user))
		if r.Status != 200 {
			t.Fatalf("GET %s as %d: %d %s", p, user, r.Status, r.Body)
		}
		var page struct {
			Items []struct {
				ID string `json:"id"`
			} `json:"items"`
			NextCursor *string `json:"nextCursor"`
		}
		if err := json.Unmarshal(r.Body, &page); err != nil {
			t.Fatal(err)
		}
		for _, it := range page.Items {
			ids = append(ids, it.ID)
		}
		if page.NextCursor == nil {
			return ids
		}
		cursor = *page.NextCursor
	}
	t.Fatalf("%s: more than 100 pages", path)
	return nil
}

// Attack: a blocked user reads the blocker's posts at their author
// page. Answer: an empty page while the block stands; the blocker's
// posts again once it is lifted; others see them throughout.
func TestAbuseBlockedUserReadsBlockersPosts(t *testing.T) {
	t.Parallel()
	e := setup(t, options{withPool: withFeed(t)})
	ana, bob, cy := e.register(t, "ana"), e.register(t, "bob"), e.register(t, "cy")
	post := e.post(t, ana, "ana's post")
	path := fmt.Sprintf("/api/users/%d/posts", ana)
	if r := e.do(t, "PUT", fmt.Sprintf("/api/blocking/%d", bob), "", "Authorization", e.bearer(ana)); r.Status != 204 {
		t.Fatalf("block: %d %s", r.Status, r.Body)
	}
	if got := e.pageIDs(t, path, bob); len(got) != 0 {
		t.Fatalf("the blocked user reads the blocker's posts %v", got)
	}
	for _, u := range []int64{ana, cy} {
		if got := e.pageIDs(t, path, u); len(got) != 1 || got[0] != post {
			t.Fatalf("user %d reads %v at ana's page, want [%s]", u, got, post)
		}
	}
	if r := e.do(t, "DELETE", fmt.Sprintf("/api/blocking/%d", bob), "", "Authorization", e.bearer(ana)); r.Status != 204 {
		t.Fatalf("unblock: %d %s", r.Status, r.Body)
	}
	if got := e.pageIDs(t, path, bob); len(got) != 1 || got[0] != post {
		t.Fatalf("after the unblock bob reads %v, want [%s]", got, post)
	}
}

// Attack: posts and names that show nothing, or other than what was
// written; tokens a lax verifier reads otherwise; the operators' pages
// asked for on the public port. Answer: 400 bad-request, 401
// unauthorized, 404 not-found; nothing is written.
func TestAbuseContentTokensAndPages(t *testing.T) {
	t.Parallel()
	e := setup(t, options{})
	ana := e.register(t, "ana")
	for _, content := range []string{"\u200b\u200b", "\ufeff", "\u3164", "a\x1b[2Jb", "pay\u202eexe.gpj", "\u2066x\u2069"} {
		b, _ := json.Marshal(map[string]string{"content": content})
		wantProblem(t, e.do(t, "POST", "/api/posts", string(b), "Authorization", e.bearer(ana)), 400, "bad-request")
	}
	wantProblem(t, e.do(t, "POST", "/api/users", `{"name":"\u200d"}`), 400, "bad-request")
	if n := countRows(t, e.pool, `SELECT count(*) FROM posts`); n != 0 {
		t.Fatalf("%d posts written by refused requests", n)
	}
	key := []byte(secret)
	for name, tok := range map[string]string{
		"numeric-string exp": forgeToken(t, key, nil, map[string]any{"sub": fmt.Sprint(ana), "exp": fmt.Sprint(time.Now().Add(time.Hour).Unix())}),
		"crit header":        forgeToken(t, key, map[string]any{"crit": []string{"exp"}}, map[string]any{"sub": fmt.Sprint(ana), "exp": time.Now().Add(time.Hour).Unix()}),
		"iat in the future":  forgeToken(t, key, nil, map[string]any{"sub": fmt.Sprint(ana), "exp": time.Now().Add(2 * time.Hour).Unix(), "iat": time.Now().Add(time.Hour).Unix()}),
	} {
		r := e.do(t, "GET", fmt.Sprintf("/api/users/%d", ana), "", "Authorization", "Bearer "+tok)
		if r.Status != 401 {
			t.Errorf("a token with a %s: %d, want 401", name, r.Status)
		}
	}
	for _, p := range []string{"/metrics", "/status", "/debug/pprof/", "/debug/pprof/cmdline"} {
		if r := e.do(t, "GET", p, ""); r.Status != 404 {
			t.Errorf("GET %s on the public port: %d, want 404", p, r.Status)
		}
		if r := e.admin(t, p); r.Status == 404 {
			t.Errorf("GET %s on the admin listener: 404", p)
		}
	}
}

// forgeToken is an HS256 token with the given header fields and claims.
func forgeToken(t *testing.T, key []byte, header, claims map[string]any) string {
	t.Helper()
	tok := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims(claims))
	for k, v := range header {
		tok.Header[k] = v
	}
	s, err := tok.SignedString(key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// The invariant under attack: every post answered 201 reaches its
// readers. While anonymous clients hold bodies open, smuggle requests and
// post invisible content, and the author's own writes run past their
// quota and the write bound, each post answered 201 is in the author's
// page and in a follower's home feed, and nothing refused is.
func TestAbuseEvery201ReachesItsReaders(t *testing.T) {
	t.Parallel()
	rd := testenv.NewRedis(t)
	cfg := api.Config{MaxWritesInFlight: 4, BodyReadTimeout: time.Second, WritesPerMinute: 40}
	e, addr := served(t, options{cfg: cfg, withPool: withFeed(t), tweak: func(d *api.Deps) {
		d.QuotaRedis, d.QuotaKeys = rd.Client, readmodel.Keys{Prefix: rd.Prefix}
	}})
	ana, bob := e.register(t, "ana"), e.register(t, "bob")
	if r := e.do(t, "PUT", fmt.Sprintf("/api/following/%d", ana), "", "Authorization", e.bearer(bob)); r.Status != 204 {
		t.Fatalf("follow: %d %s", r.Status, r.Body)
	}
	var wg sync.WaitGroup
	// The attackers: held bodies and smuggling attempts, on their own
	// connections, until the writes are done.
	done := make(chan struct{})
	for i := range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-done:
					return
				default:
				}
				c, err := net.Dial("tcp", addr)
				if err != nil {
					return
				}
				req := "POST /api/users HTTP/1.1\r\nHost: feed\r\nContent-Length: 50\r\n\r\n{\"na"
				if i%2 == 1 {
					req = "POST /api/posts HTTP/1.1\r\nHost: feed\r\nAuthorization: " + e.bearer(ana) +
						"\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nPOST /api/posts HTTP/1.1\r\nContent-Length: 20\r\n\r\n{\"content\":\"smuggled\"}"
				}
				_ = c.SetDeadline(time.Now().Add(10 * time.Second))
				_, _ = io.WriteString(c, req)
				_, _ = io.Copy(io.Discard, c) // until the server closes it
				c.Close()
			}
		}()
	}
	// The author: 60 posts from 4 clients, a sixth of them invisible.
	type answer struct {
		status  int
		id      string
		content string
	}
	answers := make(chan answer, 60)
	var writers sync.WaitGroup
	for w := range 4 {
		writers.Add(1)
		go func() {
			defer writers.Done()
			for i := range 15 {
				content := fmt.Sprintf("post %d-%d", w, i)
				if i%6 == 5 {
					content = "\u200b" + strings.Repeat("\ufeff", w+1)
				}
				b, _ := json.Marshal(map[string]string{"content": content})
				req, _ := http.NewRequest("POST", e.url+"/api/posts", strings.NewReader(string(b)))
				req.Header.Set("Authorization", e.bearer(ana))
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Errorf("post: %v", err)
					return
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				var p struct{ ID string }
				_ = json.Unmarshal(body, &p)
				answers <- answer{resp.StatusCode, p.ID, content}
			}
		}()
	}
	writers.Wait()
	close(done)
	wg.Wait()
	close(answers)
	created := map[string]bool{}
	counts := map[int]int{}
	for a := range answers {
		counts[a.status]++
		switch a.status {
		case 201:
			created[a.id] = true
		case 400, 429:
		default:
			t.Errorf("a post answered %d", a.status)
		}
		if a.status == 201 && strings.Trim(a.content, "\u200b\ufeff") == "" {
			t.Errorf("invisible content %q answered 201", a.content)
		}
	}
	if counts[201] == 0 || counts[429] == 0 || counts[400] == 0 {
		t.Fatalf("answers %v: want 201s, 400s (invisible) and 429s (past the quota)", counts)
	}
	for _, read := range []struct {
		who  int64
		path string
	}{{bob, "/api/feed"}, {bob, fmt.Sprintf("/api/users/%d/posts", ana)}, {ana, "/api/feed"}} {
		got := map[string]bool{}
		for _, id := range e.pageIDs(t, read.path, read.who) {
			got[id] = true
		}
		for id := range created {
			if !got[id] {
				t.Errorf("post %s answered 201 is not in %s as read by %d", id, read.path, read.who)
			}
		}
		if len(got) != len(created) {
			t.Errorf("%s as read by %d holds %d posts, %d were answered 201", read.path, read.who, len(got), len(created))
		}
	}
	t.Logf("answers to the author's posts under attack: %v", counts)
}
