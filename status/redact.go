package status

import (
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// Redacted replaces what Redact hides.
const Redacted = "xxxxx"

var (
	// pgSettings are the user and database settings pgx writes into its
	// connection errors ("failed to connect to `user=u database=d`").
	pgSettings = regexp.MustCompile(`\b(user|database|dbname|host|password)=[^\s` + "`" + `'",;)]+`)
	// redactedPort is a redacted host's port.
	redactedPort = regexp.MustCompile(Redacted + `:\d+`)
	// ipPorts are IPv4 and bracketed IPv6 addresses, with a port or not.
	ipPorts = regexp.MustCompile(`\b\d{1,3}(\.\d{1,3}){3}(:\d+)?\b|\[[0-9A-Fa-f:.]+\](:\d+)?`)
)

// Redact returns r fit for a page anyone on the operators' network may
// read, with what `feed config` hides hidden too: the Redis nodes'
// addresses become "node 1", "node 2", ...; every error and detail string
// loses the given secrets (host names, addresses, user and database
// names, passwords: cmd/feed passes those of DATABASE_URL, REDIS_URL and
// KAFKA_BROKERS), any IP address with its port, and the user, database,
// host and password settings of a PostgreSQL connection error. The slot,
// topic, LSNs, counts and policies are kept: they are what the page is
// for.
func Redact(r Report, secrets ...string) Report {
	secrets = slices.DeleteFunc(slices.Clone(secrets), func(s string) bool { return len(s) < 2 })
	// The longest first, so that a host:port goes before its host.
	slices.SortFunc(secrets, func(a, b string) int { return len(b) - len(a) })
	clean := func(s string) string {
		if s == "" {
			return s
		}
		for _, sec := range secrets {
			s = strings.ReplaceAll(s, sec, Redacted)
		}
		s = pgSettings.ReplaceAllString(s, "${1}="+Redacted)
		s = ipPorts.ReplaceAllString(s, Redacted)
		return redactedPort.ReplaceAllString(s, Redacted)
	}
	r.CDC.Error = clean(r.CDC.Error)
	r.CDC.SlotLoss = clean(r.CDC.SlotLoss)
	r.Projections.Error = clean(r.Projections.Error)
	r.Poison.Error = clean(r.Poison.Error)
	r.Verify.Error = clean(r.Verify.Error)
	r.Verify.Results = slices.Clone(r.Verify.Results)
	for i := range r.Verify.Results {
		r.Verify.Results[i].Detail = clean(r.Verify.Results[i].Detail)
	}
	r.Redis.Error = clean(r.Redis.Error)
	r.Redis.Nodes = slices.Clone(r.Redis.Nodes)
	for i := range r.Redis.Nodes {
		r.Redis.Nodes[i].Addr = "node " + strconv.Itoa(i+1)
	}
	return r
}
