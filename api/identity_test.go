package api_test

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"log/slog"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/feedco/feed/api"
	"github.com/feedco/feed/commands"
	"github.com/feedco/feed/internal/auth"
	"github.com/feedco/feed/internal/snowflake"
)

const gatewaySecret = "0123456789abcdef-gateway"

// serve sends one request straight to the handler, from remote (the
// connection's address), with header values exactly as given (the wire
// would trim spaces). headers alternate name, value.
func (e *env) serve(t *testing.T, method, path, remote string, headers ...string) response {
	t.Helper()
	req := httptest.NewRequest(method, path, nil)
	req.RemoteAddr = remote
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Add(headers[i], headers[i+1])
	}
	rec := httptest.NewRecorder()
	e.srv.Handler().ServeHTTP(rec, req)
	return response{Status: rec.Code, Header: rec.Header(), Body: rec.Body.Bytes()}
}

func trustedHeader(cfg api.Config) options {
	cfg.AuthMode = api.AuthTrustedHeader
	return options{cfg: cfg, tweak: func(d *api.Deps) { d.Tokens = nil }}
}

// Trusted-header mode takes X-User-Id only from the gateway: from a trusted
// network (the connection's address, never X-Forwarded-For), with the
// gateway secret, or both; with neither configured, from loopback only.
func TestTrustedHeaderGateway(t *testing.T) {
	t.Parallel()
	nets := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("2001:db8::/32")}
	for _, tc := range []struct {
		name    string
		cfg     api.Config
		remote  string
		headers []string
		status  int
	}{
		{"loopback only: from loopback", api.Config{}, "127.0.0.1:5000", nil, 200},
		{"loopback only: from ::1", api.Config{}, "[::1]:5000", nil, 200},
		{"loopback only: from elsewhere", api.Config{}, "10.1.2.3:5000", nil, 401},
		{"loopback only: forwarded-for loopback", api.Config{}, "10.1.2.3:5000", []string{"X-Forwarded-For", "127.0.0.1"}, 401},
		{"networks: from inside", api.Config{Addr: "0.0.0.0:8080", TrustedNetworks: nets}, "10.1.2.3:5000", nil, 200},
		{"networks: v4-mapped", api.Config{Addr: "0.0.0.0:8080", TrustedNetworks: nets}, "[::ffff:10.1.2.3]:5000", nil, 200},
		{"networks: v6 inside", api.Config{Addr: "0.0.0.0:8080", TrustedNetworks: nets}, "[2001:db8::7]:5000", nil, 200},
		{"networks: from outside", api.Config{Addr: "0.0.0.0:8080", TrustedNetworks: nets}, "192.0.2.1:5000", nil, 401},
		{"networks: loopback is outside", api.Config{Addr: "0.0.0.0:8080", TrustedNetworks: nets}, "127.0.0.1:5000", nil, 401},
		{"networks: forwarded-for inside", api.Config{Addr: "0.0.0.0:8080", TrustedNetworks: nets}, "192.0.2.1:5000", []string{"X-Forwarded-For", "10.1.2.3"}, 401},
		{"networks: no remote address", api.Config{Addr: "0.0.0.0:8080", TrustedNetworks: nets}, "", nil, 401},
		{"secret: right", api.Config{Addr: "0.0.0.0:8080", GatewaySecret: gatewaySecret}, "192.0.2.1:5000", []string{"X-Gateway-Secret", gatewaySecret}, 200},
		{"secret: missing", api.Config{Addr: "0.0.0.0:8080", GatewaySecret: gatewaySecret}, "192.0.2.1:5000", nil, 401},
		{"secret: wrong", api.Config{Addr: "0.0.0.0:8080", GatewaySecret: gatewaySecret}, "192.0.2.1:5000", []string{"X-Gateway-Secret", gatewaySecret + "x"}, 401},
		{"secret: a prefix", api.Config{Addr: "0.0.0.0:8080", GatewaySecret: gatewaySecret}, "192.0.2.1:5000", []string{"X-Gateway-Secret", gatewaySecret[:16]}, 401},
		{"secret: empty", api.Config{Addr: "0.0.0.0:8080", GatewaySecret: gatewaySecret}, "192.0.2.1:5000", []string{"X-Gateway-Secret", ""}, 401},
		{"secret: twice", api.Config{Addr: "0.0.0.0:8080", GatewaySecret: gatewaySecret}, "192.0.2.1:5000", []string{"X-Gateway-Secret", gatewaySecret, "X-Gateway-Secret", gatewaySecret}, 401},
		{"both: both right", api.Config{Addr: "0.0.0.0:8080", GatewaySecret: gatewaySecret, TrustedNetworks: nets}, "10.1.2.3:5000", []string{"X-Gateway-Secret", gatewaySecret}, 200},
		{"both: no secret", api.Config{Addr: "0.0.0.0:8080", GatewaySecret: gatewaySecret, TrustedNetworks: nets}, "10.1.2.3:5000", nil, 401},
		{"both: from outside", api.Config{Addr: "0.0.0.0:8080", GatewaySecret: gatewaySecret, TrustedNetworks: nets}, "192.0.2.1:5000", []string{"X-Gateway-Secret", gatewaySecret}, 401},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := setup(t, trustedHeader(tc.cfg))
			e.user(t, 1)
			r := e.serve(t, "GET", "/api/users/1", tc.remote, append([]string{"X-User-Id", "1"}, tc.headers...)...)
			if tc.status == 200 {
				if r.Status != 200 {
					t.Fatalf("status %d, want 200; body %s", r.Status, r.Body)
				}
				return
			}
			wantProblem(t, r, tc.status, "unauthorized")
		})
	}
}

// New refuses a trusted-header configuration any client could use, and
// says at start-up what it trusts.
func TestTrustedHeaderConfig(t *testing.T) {
	t.Parallel()
	e := setup(t, options{})
	deps := func(log *slog.Logger) api.Deps {
		users, _ := auth.NewUsers(e.pool, 0)
		ids, _ := snowflake.New(2)
		cmds, err := commands.New(e.pool, ids, commands.Config{})
		if err != nil {
			t.Fatal(err)
		}
		return api.Deps{Commands: cmds, Users: users, Logger: log}
	}
	for _, addr := range []string{"0.0.0.0:8080", ":8080", "[::]:8080", "192.0.2.7:8080", "feed.internal:8080"} {
		if _, err := api.New(api.Config{AuthMode: api.AuthTrustedHeader, Addr: addr}, deps(nil)); err == nil {
			t.Errorf("trusted-header on %s with no gateway check accepted", addr)
		}
	}
	if _, err := api.New(api.Config{AuthMode: api.AuthTrustedHeader, Addr: "127.0.0.1:8080", GatewaySecret: "short"}, deps(nil)); err == nil {
		t.Error("a short gateway secret accepted")
	}
	for _, tc := range []struct {
		cfg  api.Config
		want []string
	}{
		{api.Config{Addr: "127.0.0.1:8080"}, []string{"127.0.0.0/8", "::1/128"}},
		{api.Config{Addr: "localhost:8080"}, []string{"127.0.0.0/8"}},
		{api.Config{Addr: "0.0.0.0:8080", TrustedNetworks: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}}, []string{"10.0.0.0/8"}},
		{api.Config{Addr: "0.0.0.0:8080", GatewaySecret: gatewaySecret}, []string{"X-Gateway-Secret"}},
	} {
		var buf bytes.Buffer
		tc.cfg.AuthMode = api.AuthTrustedHeader
		if _, err := api.New(tc.cfg, deps(slog.New(slog.NewTextHandler(&buf, nil)))); err != nil {
			t.Errorf("%+v: %v", tc.cfg, err)
			continue
		}
		log := buf.String()
		if !strings.Contains(log, "level=WARN") || !strings.Contains(log, "trusted-header") || strings.Contains(log, gatewaySecret) {
			t.Errorf("%+v: start-up log %q: want a WARN about trusted-header, without the secret", tc.cfg, log)
		}
		for _, w := range tc.want {
			if !strings.Contains(log, w) {
				t.Errorf("%+v: start-up log %q does not name %s", tc.cfg, log, w)
			}
		}
	}
	var buf bytes.Buffer
	signer, _ := auth.NewSigner(secret)
	d := deps(slog.New(slog.NewTextHandler(&buf, nil)))
	d.Tokens = signer
	if _, err := api.New(api.Config{Addr: "0.0.0.0:8080"}, d); err != nil || buf.Len() != 0 {
		t.Errorf("jwt mode: %v, log %q", err, buf.String())
	}
}

// An identity is given once: two X-User-Id headers, one with a list, or
// two Authorization headers are 400, not one of them picked.
func TestRepeatedIdentityHeaders(t *testing.T) {
	t.Parallel()
	th := setup(t, trustedHeader(api.Config{}))
	th.user(t, 1)
	th.user(t, 2)
	for _, h := range [][]string{
		{"X-User-Id", "1", "X-User-Id", "2"},
		{"X-User-Id", "1", "X-User-Id", "1"},
		{"X-User-Id", "1,2"},
		{"X-User-Id", "1, 2"},
		{"X-User-Id", "1,"},
	} {
		wantProblem(t, th.serve(t, "GET", "/api/users/1", "127.0.0.1:5000", h...), 400, "bad-request")
	}
	// Over the wire too.
	wantProblem(t, th.do(t, "GET", "/api/users/1", "", "X-User-Id", "1", "X-User-Id", "2"), 400, "bad-request")

	jwt := setup(t, options{})
	ana := jwt.register(t, "ana")
	bo := jwt.register(t, "bo")
	for _, h := range [][]string{
		{"Authorization", jwt.bearer(ana), "Authorization", jwt.bearer(bo)},
		{"Authorization", jwt.bearer(ana), "Authorization", jwt.bearer(ana)},
		{"Authorization", jwt.bearer(ana), "Authorization", ""},
	} {
		wantProblem(t, jwt.do(t, "GET", "/api/users/"+strconv.FormatInt(ana, 10), "", h...), 400, "bad-request")
	}
	if r := jwt.do(t, "GET", "/api/users/"+strconv.FormatInt(ana, 10), "", "Authorization", jwt.bearer(ana)); r.Status != 200 {
		t.Fatalf("one Authorization: %d %s", r.Status, r.Body)
	}
}

// signSub is an HS256 token with any sub, signed with the test secret.
func signSub(sub string) string {
	b64 := base64.RawURLEncoding
	signing := b64.EncodeToString([]byte(`{"alg":"HS256","typ":"JWT"}`)) + "." + b64.EncodeToString([]byte(`{"sub":"`+sub+`","exp":9999999999}`))
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte(signing))
	return signing + "." + b64.EncodeToString(m.Sum(nil))
}

// Ids are canonical decimal, in tokens and in the header: "+1" or "0001"
// is not user 1.
func TestCanonicalIdentity(t *testing.T) {
	t.Parallel()
	bad := []string{"+1", "0001", "01", "0", "-1", " 1", "1 ", "1\t", "1.0", "1e0", "0x1", "١", "9223372036854775808", "99999999999999999999", "abc", ""}

	jwt := setup(t, options{})
	jwt.user(t, 1)
	if r := jwt.do(t, "GET", "/api/users/1", "", "Authorization", "Bearer "+signSub("1")); r.Status != 200 {
		t.Fatalf("sub 1: %d %s", r.Status, r.Body)
	}
	th := setup(t, trustedHeader(api.Config{}))
	th.user(t, 1)
	if r := th.serve(t, "GET", "/api/users/1", "127.0.0.1:5000", "X-User-Id", "1"); r.Status != 200 {
		t.Fatalf("X-User-Id 1: %d %s", r.Status, r.Body)
	}
	for _, id := range bad {
		t.Run(strconv.Quote(id), func(t *testing.T) {
			wantProblem(t, jwt.do(t, "GET", "/api/users/1", "", "Authorization", "Bearer "+signSub(id)), 401, "unauthorized")
			wantProblem(t, th.serve(t, "GET", "/api/users/1", "127.0.0.1:5000", "X-User-Id", id), 401, "unauthorized")
		})
	}
}

// countingDB counts the queries that reach PostgreSQL.
type countingDB struct {
	auth.RowQuerier
	n atomic.Int64
}

func (c *countingDB) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	c.n.Add(1)
	return c.RowQuerier.QueryRow(ctx, sql, args...)
}

// The caller must be a registered user: a valid token or header for an id
// nobody registered is 401, a user who registers is known at once, and a
// known caller's requests after the first add no query.
func TestUnknownUser(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{api.AuthJWT, api.AuthTrustedHeader} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			var cdb *countingDB
			opt := options{cfg: api.Config{AuthMode: mode}, usersDB: func(db auth.RowQuerier) auth.RowQuerier {
				cdb = &countingDB{RowQuerier: db}
				return cdb
			}}
			e := setup(t, opt)
			as := func(id int64) []string {
				if mode == api.AuthJWT {
					return []string{"Authorization", e.bearer(id)}
				}
				return []string{"X-User-Id", strconv.FormatInt(id, 10)}
			}
			// Registration needs no identity.
			ana := e.register(t, "ana")
			next := ana + 1
			for range 2 { // never remembered as unknown
				wantProblem(t, e.do(t, "GET", "/api/users/"+strconv.FormatInt(ana, 10), "", as(next)...), 401, "unauthorized")
				wantProblem(t, e.do(t, "POST", "/api/posts", `{"content":"x"}`, as(next)...), 401, "unauthorized")
			}
			if bo := e.register(t, "bo"); bo != next {
				t.Fatalf("bo is %d, want %d", bo, next)
			}
			before := cdb.n.Load()
			for range 5 {
				if r := e.do(t, "GET", "/api/users/"+strconv.FormatInt(ana, 10), "", as(next)...); r.Status != 200 {
					t.Fatalf("bo after registering: %d %s", r.Status, r.Body)
				}
			}
			if n := cdb.n.Load() - before; n != 1 {
				t.Fatalf("%d user lookups in PostgreSQL for five requests of one caller; want 1", n)
			}
		})
	}
}
