package e2e

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/feedco/feed/api"
	"github.com/feedco/feed/live"
	"github.com/feedco/feed/queries"
	"github.com/feedco/feed/testkit/testenv"
)

// A stream reads the changes stream only when its hub was woken on the
// changes channel since its last read of them (live.Hub.ChangesSeen):
// wake-ups of new posts cost no read of the changes, an edit's wake-up
// does, and after the hub's subscription connection is killed (messages
// published meanwhile are lost) the resubscription's reply makes the
// next step read them, so an edit made around the loss still arrives.
func TestStreamReadsChangesOnlyWhenWoken(t *testing.T) {
	t.Parallel()
	s := startSystem(t, streamPolicies().onlineAtEveryPush())
	single, ok := s.Redis.(*redis.Client)
	if !ok {
		t.Skip("the hook counts one client's commands: a single Redis")
	}
	ctx := context.Background()
	o := *single.Options()
	o.ClientName = fmt.Sprintf("changes-test-%d", time.Now().UnixNano())
	rc := redis.NewClient(&o)
	t.Cleanup(func() { _ = rc.Close() })
	var xranges atomic.Int64
	rc.AddHook(countHook{name: "xrange", n: &xranges})

	feed, err := queries.New(queries.Config{Keys: s.Keys, InboxMax: s.pol.InboxMax, CelebrityThreshold: s.pol.CelebrityThreshold,
		CelebrityCacheTTL: s.pol.CacheTTL, RefreshSettle: s.pol.RefreshSettle, Registerer: prometheus.NewRegistry(), Logger: s.Log}, s.DB.Pool, s.Redis)
	if err != nil {
		t.Fatal(err)
	}
	testenv.Start(t, feed.Service())
	hub, err := live.NewHub(live.HubConfig{Keys: s.Keys, Logger: s.Log}, rc)
	if err != nil {
		t.Fatal(err)
	}
	testenv.Start(t, hub.Service())

	reader, rtok := newUserOn(t, s, "reader")
	author, atok := newUserOn(t, s, "author")
	if err := s.call(ctx, http.MethodPut, fmt.Sprint("/api/following/", author), rtok, "", nil, nil, http.StatusNoContent, nil); err != nil {
		t.Fatal(err)
	}
	post := func(content string) apiPost { return postAs(t, s, atok, content) }
	edit := func(p apiPost, content string) {
		if err := s.call(ctx, http.MethodPatch, "/api/posts/"+p.ID, atok, "", map[string]string{"content": content}, nil, http.StatusOK, nil); err != nil {
			t.Fatal(err)
		}
	}
	post("before the stream")
	s.quiesce(t, time.Minute)

	st, err := live.Open(ctx, hub, feed, reader, "", "")
	if err != nil {
		t.Fatal(err)
	}
	chs, err := st.Channels(ctx)
	if err != nil {
		t.Fatal(err)
	}
	l, err := hub.Listen(ctx, reader, chs)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(l.Close)
	testenv.Eventually(t, 10*time.Second, "the changes channel subscribed", func() bool {
		_, up := hub.ChangesSeen()
		return up
	})
	// step reads until the stream has sent want (events' types and
	// contents), stepping again at each wake-up.
	var got []string
	step := func(what string, want func([]string) bool) {
		t.Helper()
		deadline := time.After(20 * time.Second)
		for {
			evs, _, err := st.Step(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			for _, ev := range evs {
				got = append(got, ev.Type+" "+string(ev.Data))
			}
			if want(got) {
				return
			}
			select {
			case <-l.C:
			case <-time.After(500 * time.Millisecond):
			case <-deadline:
				t.Fatalf("%s: the stream sent %q", what, got)
			}
		}
	}
	has := func(typ, text string) func([]string) bool {
		return func(evs []string) bool {
			for _, e := range evs {
				if strings.HasPrefix(e, typ+" ") && strings.Contains(e, text) {
					return true
				}
			}
			return false
		}
	}

	step("the first step", func([]string) bool { return true })
	first := xranges.Load()
	if first != 1 {
		t.Fatalf("the first step read the changes %d times, want 1", first)
	}
	p := post("live post")
	step("a new post", has("post", "live post"))
	if n := xranges.Load(); n != first {
		t.Fatalf("steps woken by a post read the changes %d times, want none", n-first)
	}

	edit(p, "live post, edited")
	step("the edit", has("edit", "live post, edited"))
	if n := xranges.Load(); n == first {
		t.Fatal("the edit arrived without a read of the changes")
	}

	// The subscription connection killed: go-redis reconnects and
	// resubscribes; an edit published around it arrives either by its
	// message or by the read the resubscription's reply asks for.
	before, _ := hub.ChangesSeen()
	ids, err := single.Do(ctx, "CLIENT", "LIST").Text()
	if err != nil {
		t.Fatal(err)
	}
	killed := 0
	for _, line := range strings.Split(ids, "\n") {
		if strings.Contains(line, "name="+o.ClientName+" ") && strings.Contains(line, "flags=P") {
			id := strings.TrimPrefix(strings.Fields(line)[0], "id=")
			if err := single.Do(ctx, "CLIENT", "KILL", "ID", id).Err(); err != nil {
				t.Fatal(err)
			}
			killed++
		}
	}
	if killed == 0 {
		t.Fatalf("no subscription connection named %s in CLIENT LIST", o.ClientName)
	}
	edit(p, "live post, edited again")
	testenv.Eventually(t, 20*time.Second, "the hub resubscribed", func() bool {
		n, up := hub.ChangesSeen()
		return up && n > before
	})
	step("the edit around the lost connection", has("edit", "live post, edited again"))
}

// countHook counts the commands named name a client sends.
type countHook struct {
	name string
	n    *atomic.Int64
}

func (countHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h countHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if cmd.Name() == h.name {
			h.n.Add(1)
		}
		return next(ctx, cmd)
	}
}

func (h countHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			if cmd.Name() == h.name {
				h.n.Add(1)
			}
		}
		return next(ctx, cmds)
	}
}

// Many hijacked streams woken by one post at once (its author's 40
// followers): each receives the post once, whether the 4 workers or the
// burst workers served it (feed_stream_burst_workers_total says how many
// started), and the next post too, once the burst workers have ended.
func TestStreamBurstOfWakeUps(t *testing.T) {
	t.Parallel()
	s := startSystem(t, streamPolicies())
	in := startInstance(t, s, api.Config{StreamsHijacked: true})
	ctx := context.Background()
	author, atok := newUserOn(t, in.system, "author")
	var clients []*sseClient
	for i := range 40 {
		_, tok := newUserOn(t, in.system, fmt.Sprint("reader", i))
		if err := in.call(ctx, http.MethodPut, fmt.Sprint("/api/following/", author), tok, "", nil, nil, http.StatusNoContent, nil); err != nil {
			t.Fatal(err)
		}
		clients = append(clients, openStream(t, in.baseURL, tok, "", "", http.StatusOK))
	}
	for round := range 2 {
		var p apiPost
		if err := in.call(ctx, http.MethodPost, "/api/posts", atok, "", map[string]string{"content": fmt.Sprint("burst ", round)}, &p, http.StatusCreated, nil); err != nil {
			t.Fatal(err)
		}
		for i, c := range clients {
			if got := streamPost(t, c.next(t, time.Minute)); got.ID != p.ID {
				t.Fatalf("round %d: reader %d's stream sent %s, want %s", round, i, got.ID, p.ID)
			}
		}
	}
	// 40 wake-ups queued within microseconds while a step takes
	// milliseconds: the backlog starts burst workers.
	if n := counter(t, in.srv.Registry(), "feed_stream_burst_workers_total", ""); n < 1 {
		t.Fatalf("%v burst workers started for 40 streams woken at once", n)
	}
}

// newUserOn registers name on s and returns its id and a token.
func newUserOn(t testing.TB, s *system, name string) (int64, string) {
	t.Helper()
	var u apiUser
	if err := s.call(context.Background(), http.MethodPost, "/api/users", "", "", map[string]string{"name": name}, &u, http.StatusCreated, nil); err != nil {
		t.Fatal(err)
	}
	id, _ := strconv.ParseInt(u.ID, 10, 64)
	return id, s.signer.Sign(id, time.Hour)
}
