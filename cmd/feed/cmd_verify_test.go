package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/feedco/feed/commands"
	"github.com/feedco/feed/homefeed"
	"github.com/feedco/feed/readmodel"
	"github.com/feedco/feed/testkit/testenv"
)

// TestVerifyCommand runs `feed dev` (embedded broker, a redis-server of
// its own, FEED_VERIFY_EVERY=10s) and `feed verify` against it: a reader's
// feed verifies clean (exit 0); with a post removed from the reader's
// inbox, `feed verify --user` exits 1 naming the post and what the inbox
// holds, and the periodic run inside `feed dev` counts a run with
// differences in feed_verify_runs_total.
func TestVerifyCommand(t *testing.T) {
	dev := startDev(t, "10s")
	redisURL, api := dev.RedisURL, dev.API
	ctx := context.Background()
	get := func(path, token string) (int, string) {
		req, _ := http.NewRequest(http.MethodGet, api+path, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}

	// Writes through the command side, streamed by feed dev's CDC.
	cmds, author, reader := dev.authorAndReader(t)
	cfg, err := LoadConfig()
	if err != nil {
		t.Fatal(err)
	}
	// feed verify talks to feed dev's embedded broker.
	cfg.KafkaBrokers = []string{dev.Broker}
	code, tok, errOut := runCLI(t, cfg, "token", "--user", strconv.FormatInt(reader.ID, 10))
	if code != 0 {
		t.Fatalf("feed token: %d %s", code, errOut)
	}
	token := strings.TrimSpace(tok)
	// The reader reads until their inbox is built (the first read is cold).
	opt, _ := redis.ParseURL(redisURL)
	rdb := redis.NewClient(opt)
	defer rdb.Close()
	keys := readmodel.Keys{Versions: readmodel.DefaultVersions()}
	pol := readmodel.Policy{}.WithDefaults()
	testenv.Eventually(t, 30*time.Second, "the reader's inbox is built", func() bool {
		if code, body := get("/api/feed", token); code != http.StatusOK {
			t.Fatalf("GET /api/feed: %d %s", code, body)
		}
		h, err := homefeed.Inspect(ctx, rdb, homefeed.NewInboxes(keys, pol), reader.ID, 1)
		return err == nil && h.Built
	})
	var posts []int64
	for i := range 3 {
		p, err := cmds.CreatePost.Handle(ctx, commands.CreatePost{AuthorID: author.ID, Content: "post " + strconv.Itoa(i)})
		if err != nil {
			t.Fatal(err)
		}
		posts = append(posts, p.ID)
	}
	user := strconv.FormatInt(reader.ID, 10)
	testenv.Eventually(t, 30*time.Second, "the posts are pushed", func() bool {
		h, err := homefeed.Inspect(ctx, rdb, homefeed.NewInboxes(keys, pol), reader.ID, posts[2])
		return err == nil && h.Holds
	})
	code, out, errOut := runCLI(t, cfg, "verify", "--user", user)
	if code != 0 || !strings.Contains(out, "verify: no difference: 1 users (0 cold), 3 posts compared") {
		t.Fatalf("feed verify of a converged system: exit %d\nstdout %s\nstderr %s", code, out, errOut)
	}

	// Corrupt the reader's inbox: the middle post goes missing.
	if err := homefeed.NewInboxes(keys, pol).Remove(ctx, rdb, reader.ID, []int64{posts[1]}); err != nil {
		t.Fatal(err)
	}
	code, out, errOut = runCLI(t, cfg, "verify", "--user", user)
	for _, want := range []string{
		fmt.Sprintf("user %d: missing: post %d (author %d", reader.ID, posts[1], author.ID),
		fmt.Sprintf("where: inbox of %d (v1): does not hold it, built", reader.ID),
		"verify: 1 DIFFERENCES",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("feed verify of a corrupt inbox: stdout lacks %q:\n%s", want, out)
		}
	}
	if code != exitFailure || !strings.Contains(errOut, "feed verify: 1 differences from the truth") {
		t.Errorf("feed verify of a corrupt inbox: exit %d, stderr %q; want %d", code, errOut, exitFailure)
	}

	// The periodic run in feed dev sees it too.
	testenv.Eventually(t, 40*time.Second, "feed dev's periodic verify counts a run with differences", func() bool {
		resp, err := http.Get(dev.Admin + "/metrics")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		body := string(b)
		return regexp.MustCompile(`(?m)^feed_verify_runs_total\{result="differences"\} [1-9]`).MatchString(body) &&
			regexp.MustCompile(`(?m)^feed_verify_differences [1-9]`).MatchString(body)
	})
}
