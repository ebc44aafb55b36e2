package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
)

// newConfigCommand is `feed config`: the effective configuration, one
// line per environment variable, secrets redacted.
func newConfigCommand(c *cli) *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "config [--output text|json]",
		Short: "Print the effective configuration: every variable, its value, set or default; secrets redacted",
		Long: "Prints every environment variable the roles read (those of `feed help`'s commands) with the value in effect\n" +
			"and whether it was set or is the default; an unset variable shows the value its default gives.\n" +
			"Passwords of connection strings (URL and keyword forms) and the secrets (FEED_JWT_SECRET, FEED_JWT_PREVIOUS_SECRET,\n" +
			"FEED_GATEWAY_SECRET, FEED_KAFKA_SASL_PASSWORD) are printed as " + redacted + ". It connects to nothing: the roles adopt\n" +
			"the active projection version's recorded policy for an unset FEED_CELEBRITY_THRESHOLD, FEED_INBOX_MAX and FEED_NOTIFICATIONS_MAX\n" +
			"(`feed status` shows it). An invalid configuration exits 2, naming the variable.",
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if output != "text" && output != "json" {
				return flagUsage("output", "%q: want text or json", output)
			}
			cfg, err := c.loadConfig()
			if err != nil {
				return usageError{err.Error()}
			}
			rows := configRows(cfg, os.LookupEnv)
			if output == "json" {
				enc := json.NewEncoder(c.stdout)
				enc.SetIndent("", "  ")
				return enc.Encode(rows)
			}
			return printConfig(c.stdout, rows)
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "text", "text (a table) or json (an array of {name, value, source, secret})")
	return cmd
}

// configRow is one variable of `feed config`.
type configRow struct {
	Name  string `json:"name"`
	Value string `json:"value"`
	// Source is "set" (the environment has a non-empty value) or
	// "default".
	Source string `json:"source"`
	// Secret says that Value is redacted (or would be, when set).
	Secret bool `json:"secret"`
}

// configSetting is how `feed config` shows one variable: its value in
// effect, and how it is redacted.
type configSetting struct {
	name string
	// value is the effective value; getenv is for the few variables that
	// Config does not hold.
	value func(c Config, getenv func(string) string) string
	// redact: "" none, "dsn" the password of a connection string,
	// "secret" the whole value.
	redact string
}

// configSettings lists every variable of envDocs, in the order `feed
// config` prints them. TestConfigCommand checks that none is missing.
var configSettings = []configSetting{
	{"DATABASE_URL", func(c Config, _ func(string) string) string { return c.DatabaseURL }, "dsn"},
	{"REDIS_URL", func(c Config, _ func(string) string) string { return c.RedisURL }, "dsn"},
	{"KAFKA_BROKERS", func(c Config, _ func(string) string) string { return strings.Join(c.KafkaBrokers, ",") }, ""},
	{"FEED_KAFKA_ADDR", func(c Config, _ func(string) string) string { return c.KafkaAddr }, ""},
	{"FEED_TOPIC", func(c Config, _ func(string) string) string { return c.Topic }, ""},
	{"FEED_PARTITIONS", func(c Config, _ func(string) string) string { return strconv.Itoa(c.Partitions) }, ""},
	{"FEED_KAFKA_TLS", func(c Config, _ func(string) string) string { return strconv.FormatBool(c.KafkaSecurity.TLSEnabled()) }, ""},
	{"FEED_KAFKA_TLS_CA", func(c Config, _ func(string) string) string { return c.KafkaSecurity.CAFile }, ""},
	{"FEED_KAFKA_TLS_CERT", func(c Config, _ func(string) string) string { return c.KafkaSecurity.CertFile }, ""},
	{"FEED_KAFKA_TLS_KEY", func(c Config, _ func(string) string) string { return c.KafkaSecurity.KeyFile }, ""},
	{"FEED_KAFKA_TLS_SERVER_NAME", func(c Config, _ func(string) string) string { return c.KafkaSecurity.ServerName }, ""},
	{"FEED_KAFKA_TLS_INSECURE_SKIP_VERIFY", func(c Config, _ func(string) string) string {
		return strconv.FormatBool(c.KafkaSecurity.InsecureSkipVerifyBrokerCert)
	}, ""},
	{"FEED_KAFKA_SASL_MECHANISM", func(c Config, _ func(string) string) string { return c.KafkaSecurity.SASLMechanism }, ""},
	{"FEED_KAFKA_SASL_USER", func(c Config, _ func(string) string) string { return c.KafkaSecurity.User }, ""},
	{"FEED_KAFKA_SASL_PASSWORD", func(c Config, _ func(string) string) string { return c.KafkaSecurity.Password }, "secret"},
	{"FEED_KAFKA_CLIENT_METRICS", func(_ Config, getenv func(string) string) string {
		return strconv.FormatBool(getenv("FEED_KAFKA_CLIENT_METRICS") == "1")
	}, ""},
	{"FEED_KAFKA_FETCH_MIN_BYTES", func(c Config, _ func(string) string) string { return strconv.Itoa(int(c.KafkaFetchMinBytes)) }, ""},
	{"FEED_KAFKA_FETCH_MAX_WAIT", func(c Config, _ func(string) string) string { return c.KafkaFetchMaxWait.String() }, ""},
	{"HTTP_ADDR", func(c Config, _ func(string) string) string { return c.HTTPAddr }, ""},
	{"FEED_ADMIN_ADDR", func(c Config, _ func(string) string) string { return c.AdminAddr }, ""},
	{"FEED_AUTH", func(c Config, _ func(string) string) string { return c.AuthMode }, ""},
	{"FEED_JWT_SECRET", func(c Config, _ func(string) string) string { return c.JWTSecret }, "secret"},
	{"FEED_JWT_PREVIOUS_SECRET", func(c Config, _ func(string) string) string { return c.JWTPreviousSecret }, "secret"},
	{"FEED_JWT_ISSUER", func(c Config, _ func(string) string) string { return c.JWTIssuer }, ""},
	{"FEED_JWT_AUDIENCE", func(c Config, _ func(string) string) string { return c.JWTAudience }, ""},
	{"FEED_ALLOW_DEV_SECRET", func(c Config, _ func(string) string) string { return strconv.FormatBool(c.AllowDevSecret) }, ""},
	{"FEED_GATEWAY_SECRET", func(c Config, _ func(string) string) string { return c.GatewaySecret }, "secret"},
	{"FEED_TRUSTED_NETWORKS", func(c Config, _ func(string) string) string {
		nets := make([]string, len(c.TrustedNetworks))
		for i, p := range c.TrustedNetworks {
			nets[i] = p.String()
		}
		return strings.Join(nets, ",")
	}, ""},
	{"FEED_NODE_ID", func(c Config, _ func(string) string) string {
		if c.NodeID < 0 {
			return "(a free one, leased at start)"
		}
		return strconv.FormatInt(c.NodeID, 10)
	}, ""},
	{"FEED_MAX_CONTENT_CHARS", func(c Config, _ func(string) string) string { return strconv.Itoa(c.MaxContentChars) }, ""},
	{"FEED_MAX_READS_IN_FLIGHT", func(c Config, _ func(string) string) string { return strconv.Itoa(c.MaxReadsInFlight) }, ""},
	{"FEED_MAX_WRITES_IN_FLIGHT", func(c Config, _ func(string) string) string { return strconv.Itoa(c.MaxWritesInFlight) }, ""},
	{"FEED_FULL_HOME_READS", func(c Config, _ func(string) string) string { return strconv.Itoa(c.FullHomeReads) }, ""},
	{"FEED_READS_RUNNING", func(c Config, _ func(string) string) string { return strconv.Itoa(c.ReadsRunning) }, ""},
	{"FEED_QUOTA_WRITES_PER_MINUTE", func(c Config, _ func(string) string) string { return strconv.Itoa(c.QuotaWritesPerMinute) }, ""},
	{"FEED_QUOTA_READS_PER_SECOND", func(c Config, _ func(string) string) string { return strconv.Itoa(c.QuotaReadsPerSecond) }, ""},
	{"FEED_QUOTA_REGISTRATIONS_PER_HOUR", func(c Config, _ func(string) string) string {
		return strconv.Itoa(c.QuotaRegistrationsPerHour)
	}, ""},
	{"FEED_MAX_CONNS", func(c Config, _ func(string) string) string { return strconv.Itoa(c.MaxConns) }, ""},
	{"FEED_MAX_IDLE_CONNS", func(c Config, _ func(string) string) string { return strconv.Itoa(c.MaxIdleConns) }, ""},
	{"FEED_STREAMS_PER_USER", func(c Config, _ func(string) string) string { return strconv.Itoa(c.StreamsPerUser) }, ""},
	{"FEED_STREAMS_MAX", func(c Config, _ func(string) string) string { return strconv.Itoa(c.StreamsMax) }, ""},
	{"FEED_BODY_READ_TIMEOUT", func(c Config, _ func(string) string) string { return c.BodyReadTimeout.String() }, ""},
	{"FEED_READ_CACHE_BARRIER", func(c Config, _ func(string) string) string { return strconv.FormatBool(c.ReadCacheBarrier) }, ""},
	{"FEED_STREAMS_GOROUTINE", func(c Config, _ func(string) string) string { return strconv.FormatBool(c.StreamsGoroutine) }, ""},
	{"FEED_STREAMS_PLAIN_READS", func(c Config, _ func(string) string) string { return strconv.FormatBool(c.StreamsPlainReads) }, ""},
	{"FEED_READ_CACHE_KEYS", func(c Config, _ func(string) string) string { return strconv.Itoa(c.ReadCacheKeys) }, ""},
	{"FEED_REBUILD_CONCURRENCY", func(c Config, _ func(string) string) string { return strconv.Itoa(c.RebuildConcurrency) }, ""},
	{"FEED_CELEBRITY_CACHE_TTL", func(c Config, _ func(string) string) string { return c.CelebrityCacheTTL.String() }, ""},
	{"FEED_REFRESH_SETTLE", func(c Config, _ func(string) string) string { return c.RefreshSettle.String() }, ""},
	{"FEED_CELEBRITY_THRESHOLD", func(c Config, _ func(string) string) string {
		return strconv.FormatInt(c.Policy.CelebrityThreshold, 10)
	}, ""},
	{"FEED_CELEBRITY_BAND", func(c Config, _ func(string) string) string {
		return strconv.FormatInt(c.Policy.CelebrityBand, 10)
	}, ""},
	{"FEED_INBOX_MAX", func(c Config, _ func(string) string) string { return strconv.Itoa(c.Policy.InboxMax) }, ""},
	{"FEED_NOTIFICATIONS_MAX", func(c Config, _ func(string) string) string { return strconv.Itoa(c.Policy.NotificationsMax) }, ""},
	{"FEED_INACTIVE_AFTER", func(c Config, _ func(string) string) string { return c.Policy.InactiveAfter.String() }, ""},
	{"FEED_POST_CACHE_TTL", func(c Config, _ func(string) string) string { return c.Policy.PostHorizon.String() }, ""},
	{"FEED_FOLLOWER_CACHE_ROWS", func(c Config, _ func(string) string) string { return strconv.Itoa(c.FollowerCacheRows) }, ""},
	{"FEED_SLOT", func(c Config, _ func(string) string) string { return c.Slot }, ""},
	{"FEED_LAG_WARN_BYTES", func(c Config, _ func(string) string) string { return strconv.FormatInt(c.LagWarnBytes, 10) }, ""},
	{"FEED_CDC_ON_SLOT_LOSS", func(c Config, _ func(string) string) string {
		if c.OnSlotLoss == "" {
			return "heal"
		}
		return c.OnSlotLoss
	}, ""},
	{"FEED_VERIFY_EVERY", func(c Config, _ func(string) string) string {
		if c.VerifyEvery == 0 {
			return "0 (never)"
		}
		return c.VerifyEvery.String()
	}, ""},
	{"FEED_STATE_DIR", func(c Config, _ func(string) string) string { return c.StateDir }, ""},
	{"FEED_LOG_FORMAT", func(c Config, _ func(string) string) string { return c.LogFormat }, ""},
	{"FEED_LOG_LEVEL", func(c Config, _ func(string) string) string { return strings.ToLower(c.LogLevel.String()) }, ""},
	{"FEED_PPROF_ADDR", func(_ Config, getenv func(string) string) string { return getenv("FEED_PPROF_ADDR") }, ""},
	{"GOGC", func(_ Config, getenv func(string) string) string {
		if v := getenv("GOGC"); v != "" {
			return v
		}
		return "100 (400 for feed cdc)"
	}, ""},
}

// configRows is what `feed config` prints of cfg, with lookup the
// environment it was read from.
func configRows(cfg Config, lookup func(string) (string, bool)) []configRow {
	getenv := func(k string) string { v, _ := lookup(k); return v }
	rows := make([]configRow, 0, len(configSettings))
	for _, s := range configSettings {
		r := configRow{Name: s.name, Value: s.value(cfg, getenv), Source: "default", Secret: s.redact != ""}
		if v, ok := lookup(s.name); ok && v != "" {
			r.Source = "set"
		}
		switch {
		case s.redact == "dsn":
			r.Value = redactDSN(r.Value)
		case s.redact == "secret" && s.name == "FEED_JWT_SECRET" && r.Value == devSecret:
			r.Value = "(the built-in development secret)"
		case s.redact == "secret" && r.Value != "":
			r.Value = redacted
		}
		rows = append(rows, r)
	}
	return rows
}

func printConfig(w io.Writer, rows []configRow) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "VARIABLE\tVALUE\tSOURCE")
	for _, r := range rows {
		v := r.Value
		if v == "" {
			v = "(none)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", r.Name, v, r.Source)
	}
	return tw.Flush()
}
