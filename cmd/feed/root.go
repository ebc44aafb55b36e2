package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"
)

// newRootCommand builds the command tree: every subcommand is added here.
func newRootCommand(c *cli) *cobra.Command {
	root := &cobra.Command{
		Use:   "feed",
		Short: "The feed backend: one binary, one subcommand per role",
		Long: "The feed backend: one binary, one subcommand per role.\n" +
			"Configuration comes from the environment (see README.md); each command's help lists what it reads." +
			envHelp("FEED_LOG_FORMAT", "FEED_LOG_LEVEL", "FEED_PPROF_ADDR"),
		Version:       buildVersion(),
		Args:          unknownCommand,
		SilenceErrors: true, // execute prints them, naming the command once
		SilenceUsage:  true,
		RunE: func(*cobra.Command, []string) error {
			return usageError{"a command is required"}
		},
		SuggestionsMinimumDistance: 2,
		// Every command's PostgreSQL connections carry its name.
		PersistentPreRun: func(cmd *cobra.Command, _ []string) { c.command = cmd.CommandPath() },
	}
	cobra.AddTemplateFunc("description", func(long string) string { d, _, _ := strings.Cut(long, envHeading); return d })
	cobra.AddTemplateFunc("environment", func(long string) string {
		if _, env, ok := strings.Cut(long, envHeading); ok {
			return "Environment:\n" + env
		}
		return ""
	})
	root.SetHelpTemplate(helpTemplate)
	root.SetOut(c.stdout)
	root.SetErr(c.stderr)
	root.SetVersionTemplate("{{.Version}}")
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err.Error()} })
	root.SetHelpCommand(&cobra.Command{
		Use:   "help [command]",
		Short: "Help about any command",
		RunE: func(_ *cobra.Command, args []string) error {
			target, rest, err := root.Find(args)
			if err != nil || len(rest) > 0 {
				return usageError{fmt.Sprintf("unknown help topic %q", strings.Join(args, " "))}
			}
			target.InitDefaultHelpFlag() // as cobra's own help command does
			target.InitDefaultVersionFlag()
			return target.Help()
		},
	})
	root.AddCommand(
		newDevCommand(c),
		newMigrateCommand(c),
		newAPICommand(c),
		newCDCCommand(c),
		newProjectCommand(c),
		newKafkaCommand(c),
		newTokenCommand(c),
		newEventsCommand(c),
		newPoisonCommand(c),
		newRebuildCommand(c),
		newSeedCommand(c),
		newStatusCommand(c),
		newVerifyCommand(c),
		newConfigCommand(c),
		newHealthcheckCommand(c),
		newVersionCommand(c),
	)
	return root
}

// unknownCommand refuses any argument of the root command.
func unknownCommand(cmd *cobra.Command, args []string) error {
	if len(args) == 0 {
		return nil
	}
	msg := fmt.Sprintf("unknown command %q", args[0])
	if s := cmd.SuggestionsFor(args[0]); len(s) > 0 {
		msg += fmt.Sprintf(" (did you mean %q?)", s[0])
	}
	return usageError{msg}
}

// noArgs refuses positional arguments: the command takes flags only.
func noArgs(_ *cobra.Command, args []string) error {
	if len(args) > 0 {
		return usageError{fmt.Sprintf("unexpected argument %q", args[0])}
	}
	return nil
}

// flagUsage adds the usage error a flag's value check found, naming it.
func flagUsage(name, format string, a ...any) error {
	return usageError{fmt.Sprintf("--%s: %s", name, fmt.Sprintf(format, a...))}
}

func newVersionCommand(c *cli) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the build: module version, VCS revision and time, Go version",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, err := io.WriteString(c.stdout, buildVersion())
			return err
		},
	}
}

// buildVersion describes the binary from the build information Go embeds:
// the module version, the VCS revision and its time (when built from a
// checkout with VCS stamping), and the Go version.
func buildVersion() string {
	bi, ok := readBuild()
	if !ok {
		return "feed (no build information)\n"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "feed %s\n", bi.Version)
	fmt.Fprintf(&b, "  module   %s\n", bi.Module)
	fmt.Fprintf(&b, "  revision %s\n", bi.Revision)
	fmt.Fprintf(&b, "  time     %s\n", bi.Time)
	fmt.Fprintf(&b, "  go       %s\n", bi.GoVersion)
	return b.String()
}

// envDocs describes the environment variables, for the commands' help.
var envDocs = map[string]string{
	"DATABASE_URL":                        "PostgreSQL event log, URL or keyword form (default postgres://postgres@127.0.0.1:5432/feed?sslmode=disable)",
	"REDIS_URL":                           "Redis read models (default redis://127.0.0.1:6379/0)",
	"KAFKA_BROKERS":                       "comma-separated Kafka brokers (default: the development broker at FEED_KAFKA_ADDR)",
	"HTTP_ADDR":                           "where the API listens (default 127.0.0.1:8080)",
	"FEED_JWT_SECRET":                     "HS256 token secret, at least 16 bytes (default: a development secret)",
	"FEED_JWT_PREVIOUS_SECRET":            "the secret being rotated out: still verifies tokens, never signs (default: none)",
	"FEED_JWT_ISSUER":                     "set: tokens are issued with this iss and only tokens with it are accepted (default: iss not checked)",
	"FEED_JWT_AUDIENCE":                   "set: tokens are issued with this aud and only tokens whose aud has it are accepted (default: aud not checked)",
	"FEED_AUTH":                           "jwt (default) or trusted-header (X-User-Id from a gateway; needs a loopback HTTP_ADDR, FEED_GATEWAY_SECRET or FEED_TRUSTED_NETWORKS)",
	"FEED_GATEWAY_SECRET":                 "trusted-header: the secret the gateway sends in X-Gateway-Secret, at least 16 bytes (default: none)",
	"FEED_TRUSTED_NETWORKS":               "trusted-header: comma-separated networks the gateway connects from, e.g. 10.0.0.0/8 (default: none)",
	"FEED_ALLOW_DEV_SECRET":               "1 accepts the built-in development secret",
	"FEED_STATE_DIR":                      "local state, e.g. the embedded broker's data (default ./.feed)",
	"FEED_KAFKA_ADDR":                     "the development broker's address (default 127.0.0.1:9092)",
	"FEED_TOPIC":                          "the event topic (default feed.events)",
	"FEED_KAFKA_TLS":                      "true: Kafka clients speak TLS, verified with the system roots unless FEED_KAFKA_TLS_CA (default false; the TLS files imply true)",
	"FEED_KAFKA_TLS_CA":                   "PEM file of the CAs that sign the brokers' certificates (default: the system roots)",
	"FEED_KAFKA_TLS_CERT":                 "PEM client certificate for mutual TLS, with FEED_KAFKA_TLS_KEY (default: none)",
	"FEED_KAFKA_TLS_KEY":                  "PEM private key of FEED_KAFKA_TLS_CERT (default: none)",
	"FEED_KAFKA_TLS_SERVER_NAME":          "the name to check in the brokers' certificates (default: each broker's host)",
	"FEED_KAFKA_TLS_INSECURE_SKIP_VERIFY": "true accepts any broker certificate: test brokers only (default false)",
	"FEED_KAFKA_SASL_MECHANISM":           "PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512 (default: no SASL)",
	"FEED_KAFKA_SASL_USER":                "the SASL user (default: none)",
	"FEED_KAFKA_SASL_PASSWORD":            "the SASL password, never logged (default: none)",
	"FEED_PARTITIONS":                     "partitions of the topic when created (default 12)",
	"FEED_SLOT":                           "logical replication slot (default feed_cdc_<database>)",
	"FEED_CELEBRITY_THRESHOLD":            "followers from which posts are pulled, not pushed (default 10000)",
	"FEED_CELEBRITY_BAND":                 "a celebrity stops being one only below FEED_CELEBRITY_THRESHOLD minus this (default 0)",
	"FEED_INBOX_MAX":                      "inbox bound (default 500)",
	"FEED_NOTIFICATIONS_MAX":              "notifications kept in Redis per user, the newest inside the post horizon (default 120)",
	"FEED_READ_CACHE_KEYS":                "the API's read cache bound in Redis keys, 0 off (default 40000)",
	"FEED_REBUILD_CONCURRENCY":            "read models the API rebuilds from PostgreSQL at once when it finds them not built (default 4)",
	"FEED_FOLLOWER_CACHE_ROWS":            "the inbox projector's follower cache bound, 0 off (default 16777216)",
	"FEED_VERIFY_EVERY":                   "run `feed verify`'s check of 20 sampled users this often inside the role, with feed_verify_* metrics (default: never; at least 10s)",
	"FEED_INACTIVE_AFTER":                 "users not reading for this long get no pushes (default 720h)",
	"FEED_POST_CACHE_TTL":                 "a post's body, counts and likes stay in Redis this long after its creation; older posts are read from PostgreSQL (default 96h)",
	"FEED_CELEBRITY_CACHE_TTL":            "in-process cache of celebrities and their timelines (default 3s)",
	"FEED_REFRESH_SETTLE":                 "a refresh (after=) shows only posts at least this old; more than FEED_CELEBRITY_CACHE_TTL (default 8s)",
	"FEED_MAX_READS_IN_FLIGHT":            "reads served at once; more are 429 at once, 0 no bound (default 256)",
	"FEED_MAX_WRITES_IN_FLIGHT":           "writes served at once; more are 429 at once, 0 no bound (default 32)",
	"FEED_FULL_HOME_READS":                "home reads doing the full merge at once; more are degraded (inbox and own posts), 0 never (default 128)",
	"FEED_READS_RUNNING":                  "admitted reads running at once; the others wait their turn within the request timeout, 0 no bound (default 32)",
	"FEED_QUOTA_WRITES_PER_MINUTE":        "writes per minute per user, shared by every API process through Redis; more are 429, 0 no quota (default 60)",
	"FEED_QUOTA_READS_PER_SECOND":         "reads per second per user, likewise (default 20)",
	"FEED_QUOTA_REGISTRATIONS_PER_HOUR":   "registrations per hour per client address, likewise (default 20)",
	"FEED_MAX_CONNS":                      "connections the API holds open; more wait in the listen backlog, 0 no bound (default 10000)",
	"FEED_MAX_IDLE_CONNS":                 "kept-alive connections the API holds between requests; more are closed as they go idle, 0 no bound (default 1000)",
	"FEED_STREAMS_PER_USER":               "live streams (GET /api/feed/stream) one user holds open in a process; one more ends the oldest (default 4)",
	"FEED_STREAMS_MAX":                    "live streams a process holds open; more are 503 with Retry-After (default 10000)",
	"FEED_STREAMS_GOROUTINE":              "1: serve each live stream from its request's goroutine (about 42 KB an idle stream) instead of the shared workers over hijacked connections (about 5 KB; HTTP/1)",
	"FEED_STREAMS_PLAIN_READS":            "1: send every live stream's home read in a Redis pipeline of its own; by default the reads made while others are under way share pipelines through go-redis's AsyncAutoPipeline",
	"FEED_BODY_READ_TIMEOUT":              "a write's body must arrive within this, else 408 and the connection closed (default 5s)",
	"FEED_MAX_CONTENT_CHARS":              "post length limit in characters (default 2000)",
	"FEED_NODE_ID":                        "Snowflake node id 0..1023, leased in PostgreSQL; refused while another live process holds it (default: lease a free one)",
	"FEED_LAG_WARN_BYTES":                 "CDC warns when the slot lags more (default 268435456)",
	"FEED_CDC_ON_SLOT_LOSS":               "what CDC does when its slot is gone: heal (republish from the event log; default) or stop",
	"FEED_LOG_FORMAT":                     "log lines as text (default) or json",
	"FEED_LOG_LEVEL":                      "lowest level logged: debug, info (default), warn or error",
	"FEED_KAFKA_CLIENT_METRICS":           "1 turns on sarama's go-metrics meters and histograms (default off: nothing reads them)",
	"FEED_KAFKA_FETCH_MIN_BYTES":          "a consumer group's fetch waits for this many bytes (default 16384) ...",
	"FEED_KAFKA_FETCH_MAX_WAIT":           "... or this long (default 20ms; longer: less CPU while idle, a lone event waits longer)",
	"FEED_READ_CACHE_BARRIER":             "1: a cached read first waits for a shared PING, so another API instance's acknowledged write is never served stale (set it with several API instances behind a balancer without affinity)",
	"FEED_ADMIN_ADDR":                     "the roles' admin listener: /metrics, /status, /healthz, /debug/pprof/; keep it off public interfaces (default 127.0.0.1:9100)",
	"FEED_PPROF_ADDR":                     "serve Go's profiles (/debug/pprof/) on this address (default: off)",
	"GOGC":                                "Go's GC target (feed cdc sets 400 unless set)",
}

// helpTemplate is cobra's, with the environment a command reads (the end of
// its Long, from envHeading) after its flags.
const helpTemplate = `{{with (or .Long .Short)}}{{description . | trimTrailingWhitespaces}}

{{end}}{{if or .Runnable .HasSubCommands}}{{.UsageString}}{{end}}{{with environment .Long}}
{{.}}
{{end}}`

const envHeading = "\n\nEnvironment:\n"

// envHelp is the "Environment:" section of a command's help.
func envHelp(names ...string) string {
	var b strings.Builder
	b.WriteString(envHeading)
	for _, n := range names {
		fmt.Fprintf(&b, "  %-25s %s\n", n, envDocs[n])
	}
	return strings.TrimRight(b.String(), "\n")
}

// Variables every role reads, for envHelp.
var (
	envPostgres = []string{"DATABASE_URL"}
	envRedis    = []string{"REDIS_URL"}
	envKafka    = []string{"KAFKA_BROKERS", "FEED_KAFKA_ADDR", "FEED_TOPIC", "FEED_KAFKA_CLIENT_METRICS", "FEED_KAFKA_FETCH_MIN_BYTES", "FEED_KAFKA_FETCH_MAX_WAIT", "FEED_KAFKA_TLS", "FEED_KAFKA_TLS_CA", "FEED_KAFKA_TLS_CERT", "FEED_KAFKA_TLS_KEY",
		"FEED_KAFKA_TLS_SERVER_NAME", "FEED_KAFKA_TLS_INSECURE_SKIP_VERIFY", "FEED_KAFKA_SASL_MECHANISM", "FEED_KAFKA_SASL_USER", "FEED_KAFKA_SASL_PASSWORD"}
	envAPI = []string{"HTTP_ADDR", "FEED_ADMIN_ADDR", "FEED_AUTH", "FEED_GATEWAY_SECRET", "FEED_TRUSTED_NETWORKS", "FEED_JWT_SECRET", "FEED_JWT_PREVIOUS_SECRET", "FEED_JWT_ISSUER", "FEED_JWT_AUDIENCE",
		"FEED_ALLOW_DEV_SECRET", "FEED_NODE_ID",
		"FEED_MAX_CONTENT_CHARS", "FEED_INBOX_MAX", "FEED_NOTIFICATIONS_MAX", "FEED_CELEBRITY_CACHE_TTL", "FEED_REFRESH_SETTLE", "FEED_INACTIVE_AFTER", "FEED_POST_CACHE_TTL", "FEED_READ_CACHE_KEYS", "FEED_READ_CACHE_BARRIER", "FEED_REBUILD_CONCURRENCY",
		"FEED_MAX_READS_IN_FLIGHT", "FEED_MAX_WRITES_IN_FLIGHT", "FEED_FULL_HOME_READS", "FEED_READS_RUNNING",
		"FEED_MAX_CONNS", "FEED_MAX_IDLE_CONNS", "FEED_BODY_READ_TIMEOUT", "FEED_STREAMS_PER_USER", "FEED_STREAMS_MAX", "FEED_STREAMS_GOROUTINE", "FEED_STREAMS_PLAIN_READS",
		"FEED_QUOTA_WRITES_PER_MINUTE", "FEED_QUOTA_READS_PER_SECOND", "FEED_QUOTA_REGISTRATIONS_PER_HOUR"}
	envProjections = []string{"FEED_ADMIN_ADDR", "FEED_CELEBRITY_THRESHOLD", "FEED_CELEBRITY_BAND", "FEED_INBOX_MAX", "FEED_NOTIFICATIONS_MAX", "FEED_INACTIVE_AFTER", "FEED_POST_CACHE_TTL", "FEED_FOLLOWER_CACHE_ROWS"}
	envCDC         = []string{"FEED_ADMIN_ADDR", "FEED_PARTITIONS", "FEED_SLOT", "FEED_LAG_WARN_BYTES", "FEED_CDC_ON_SLOT_LOSS"}
)

// joinEnv concatenates variable lists, without repeats, for envHelp.
func joinEnv(lists ...[]string) []string {
	var out []string
	seen := map[string]bool{}
	for _, l := range lists {
		for _, n := range l {
			if !seen[n] {
				seen[n] = true
				out = append(out, n)
			}
		}
	}
	return out
}

// longHelp is a command's long help: what it does and what it reads.
func longHelp(what string, env ...[]string) string {
	return what + envHelp(joinEnv(env...)...)
}
