package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/feedco/feed/api"
	"github.com/feedco/feed/cdc"
	"github.com/feedco/feed/homefeed"
	"github.com/feedco/feed/internal/auth"
	"github.com/feedco/feed/internal/kafka"
	"github.com/feedco/feed/projections"
	"github.com/feedco/feed/readmodel"
)

// Config is everything the binary reads from the environment. Only cmd/
// reads the environment; components take typed configs built from this.
type Config struct {
	DatabaseURL string
	// AppName is the PostgreSQL application_name of the command's
	// connections ("feed api", "feed dev", ...), so that pg_stat_activity
	// and pg_stat_statements tell the roles apart; DATABASE_URL's own
	// application_name, when it has one, wins. Not from the environment:
	// the command that runs sets it.
	AppName      string
	RedisURL     string
	KafkaBrokers []string // empty: the embedded development broker
	// KafkaSecurity is TLS and SASL for every Kafka client, from
	// FEED_KAFKA_TLS_* and FEED_KAFKA_SASL_*.
	KafkaSecurity kafka.Security
	HTTPAddr      string
	// AdminAddr (FEED_ADMIN_ADDR) is every role's admin listener: /metrics,
	// /status, /healthz and pprof ("": none).
	AdminAddr string
	JWTSecret string
	// JWTPreviousSecret (FEED_JWT_PREVIOUS_SECRET) verifies tokens during
	// a rotation; JWTIssuer and JWTAudience (FEED_JWT_ISSUER,
	// FEED_JWT_AUDIENCE), when set, are written into tokens and required
	// of them.
	JWTPreviousSecret string
	JWTIssuer         string
	JWTAudience       string
	AuthMode          string // "jwt" (default) or "trusted-header"
	// GatewaySecret (FEED_GATEWAY_SECRET) and TrustedNetworks
	// (FEED_TRUSTED_NETWORKS) tell the gateway's requests from anyone
	// else's in trusted-header mode.
	GatewaySecret      string
	TrustedNetworks    []netip.Prefix
	StateDir           string
	KafkaAddr          string // where the embedded broker listens
	Topic              string
	Partitions         int
	CelebrityThreshold int64
	// CelebrityBand is FEED_CELEBRITY_BAND (readmodel.Policy.CelebrityBand,
	// default 0).
	CelebrityBand int64
	InboxMax      int
	// NotificationsMax is FEED_NOTIFICATIONS_MAX
	// (readmodel.Policy.NotificationsMax, default 120).
	NotificationsMax int
	// PolicyExplicit says which of FEED_CELEBRITY_THRESHOLD,
	// FEED_CELEBRITY_BAND, FEED_INBOX_MAX and FEED_NOTIFICATIONS_MAX are
	// set: the others adopt the active versions' recorded values
	// (resolvePolicy).
	PolicyExplicit readmodel.PolicyExplicit
	// rebuildsInbox is set by `feed rebuild inbox` (and all): it starts
	// on an inbox version an earlier release built in sorted sets, which
	// it moves into the packed layout (resolvePolicy).
	rebuildsInbox     bool
	FollowerCacheRows int
	Slot              string
	NodeID            int64
	MaxContentChars   int
	InactiveAfter     time.Duration
	// PostHorizon is FEED_POST_CACHE_TTL (readmodel.Policy.PostHorizon,
	// default 4 days): how long a post's keys of the posts projection live.
	PostHorizon       time.Duration
	CelebrityCacheTTL time.Duration
	// RefreshSettle is FEED_REFRESH_SETTLE: how far behind the clock a
	// refresh page (after=) stops (queries.Config.RefreshSettle); it must
	// exceed the celebrity cache's TTL.
	RefreshSettle time.Duration
	// MaxReadsInFlight (FEED_MAX_READS_IN_FLIGHT), MaxWritesInFlight
	// (FEED_MAX_WRITES_IN_FLIGHT), FullHomeReads (FEED_FULL_HOME_READS,
	// the degrade point) and ReadsRunning (FEED_READS_RUNNING, the reads
	// running at once, the others waiting for a turn) are the API's
	// load-shedding bounds (api.Config); 0 turns one off.
	MaxReadsInFlight  int
	MaxWritesInFlight int
	FullHomeReads     int
	ReadsRunning      int
	// MaxConns (FEED_MAX_CONNS) and MaxIdleConns (FEED_MAX_IDLE_CONNS)
	// bound the API's open and kept-alive connections, BodyReadTimeout
	// (FEED_BODY_READ_TIMEOUT) the reading of a write's body (api.Config);
	// 0 turns a bound off.
	MaxConns        int
	MaxIdleConns    int
	BodyReadTimeout time.Duration
	// StreamsPerUser (FEED_STREAMS_PER_USER) and StreamsMax
	// (FEED_STREAMS_MAX) bound the live streams a user and the process
	// hold open (api.Config).
	StreamsPerUser int
	StreamsMax     int
	// StreamsGoroutine (FEED_STREAMS_GOROUTINE=1) serves each live stream
	// from its request's goroutine instead of hijacking its connection to
	// the shared workers (api.Config.StreamsHijacked, the default).
	StreamsGoroutine bool
	// StreamsPlainReads (FEED_STREAMS_PLAIN_READS=1) is
	// queries.Config.StreamPlainReads: each live stream's home read in a
	// pipeline of its own instead of through the shared autopipeliner.
	StreamsPlainReads bool
	// QuotaWritesPerMinute, QuotaReadsPerSecond (per user) and
	// QuotaRegistrationsPerHour (per client address) are the API's quotas
	// (FEED_QUOTA_*, api.Config); 0 turns one off.
	QuotaWritesPerMinute      int
	QuotaReadsPerSecond       int
	QuotaRegistrationsPerHour int
	LagWarnBytes              int64
	// VerifyEvery is FEED_VERIFY_EVERY: how often `feed project` and `feed
	// dev` run the verification of `feed verify` (0: never).
	VerifyEvery time.Duration
	// OnSlotLoss is FEED_CDC_ON_SLOT_LOSS: "heal" (the default) or "stop".
	OnSlotLoss string
	// ReadCacheKeys bounds the API's client-side read cache, in Redis keys
	// (FEED_READ_CACHE_KEYS); 0 turns it off.
	ReadCacheKeys int
	// ReadCacheBarrier (FEED_READ_CACHE_BARRIER=1) is queries.Config's:
	// read-your-writes across API instances with the read cache on.
	ReadCacheBarrier bool
	// RebuildConcurrency is FEED_REBUILD_CONCURRENCY: how many read models
	// the query side rebuilds from PostgreSQL at once.
	RebuildConcurrency int
	// AllowDevSecret lets `feed api` start with the built-in development
	// JWT secret (FEED_ALLOW_DEV_SECRET=1); `feed dev` always allows it.
	AllowDevSecret bool
	// KafkaFetchMinBytes (FEED_KAFKA_FETCH_MIN_BYTES) and KafkaFetchMaxWait
	// (FEED_KAFKA_FETCH_MAX_WAIT) batch the consumer groups' fetches
	// (kafka.SetFetch).
	KafkaFetchMinBytes int32
	KafkaFetchMaxWait  time.Duration
	// LogFormat is text or json (FEED_LOG_FORMAT), LogLevel the lowest
	// level logged (FEED_LOG_LEVEL: debug, info, warn or error).
	LogFormat string
	LogLevel  slog.Level
	// Policy is the feed policy, built once from the settings above,
	// resolved against the active versions' recorded one (resolvePolicy)
	// and handed to the projectors, the query side and `feed rebuild`.
	Policy readmodel.Policy
}

// resolvePolicy meets cfg's feed policy with the one recorded with the
// active projection versions, by readmodel.ResolvePolicy's rule (the only
// one): a fresh deployment records cfg's; a variable left unset adopts
// the recorded value; one set to another value refuses to start, saying
// which and how to change it; an inbox version in the removed sorted-set
// layout refuses to start (the error says to run `feed rebuild inbox`)
// every role but that rebuild. Every role that reads or writes the read
// models calls it once, before it starts them.
func resolvePolicy(ctx context.Context, cfg Config, db readmodel.VersionExecQuerier, log *slog.Logger) (Config, error) {
	p, err := readmodel.ResolvePolicy(ctx, db, cfg.Policy, cfg.PolicyExplicit)
	if err != nil {
		return cfg, fmt.Errorf("feed policy: %w", err)
	}
	if err := homefeed.CheckVersions(ctx, db); err != nil {
		if !cfg.rebuildsInbox || !errors.Is(err, homefeed.ErrRemovedLayout) {
			return cfg, fmt.Errorf("feed policy: %w", err)
		}
		log.Warn("feed policy: the active inbox version is in the removed sorted-set layout; this rebuild moves it into the packed layout", "err", err)
	}
	if p.InboxMax != cfg.Policy.InboxMax || p.CelebrityThreshold != cfg.Policy.CelebrityThreshold ||
		p.CelebrityBand != cfg.Policy.CelebrityBand || p.NotificationsMax != cfg.Policy.NotificationsMax {
		log.Info("feed policy: adopted the active version's", "inbox_max", p.InboxMax,
			"celebrity_threshold", p.CelebrityThreshold, "celebrity_band", p.CelebrityBand, "notifications_max", p.NotificationsMax)
	}
	cfg.Policy = p
	cfg.CelebrityThreshold, cfg.InboxMax = p.CelebrityThreshold, p.InboxMax
	cfg.CelebrityBand = p.CelebrityBand
	cfg.NotificationsMax = p.NotificationsMax
	return cfg, nil
}

func envOr(key, def string) string {
	if v, ok := os.LookupEnv(key); ok && v != "" {
		return v
	}
	return def
}

func envInt(key string, def int64) (int64, error) {
	v := os.Getenv(key)
	if v == "" {
		return def, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%s=%q: not an integer", key, v)
	}
	return n, nil
}

func envDuration(key string, def time.Duration) (time.Duration, error) {
	v := os.Getenv(key)
	if v == "" {
		return def, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		return 0, fmt.Errorf("%s=%q: %v", key, v, err)
	}
	return d, nil
}

// devSecret is used when FEED_JWT_SECRET is unset, and only then; `feed api`
// refuses to start with it unless FEED_ALLOW_DEV_SECRET=1, and `feed dev`
// passes the permission to the API it runs.
const devSecret = auth.DevSecret

// JWT is the token settings, for auth.New.
func (c Config) JWT() auth.Config {
	return auth.Config{Secret: c.JWTSecret, PreviousSecret: c.JWTPreviousSecret, Issuer: c.JWTIssuer, Audience: c.JWTAudience}
}

// LoadConfig reads the environment and validates it.
func LoadConfig() (Config, error) {
	c := Config{
		DatabaseURL:       envOr("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/feed?sslmode=disable"),
		RedisURL:          envOr("REDIS_URL", "redis://127.0.0.1:6379/0"),
		HTTPAddr:          envOr("HTTP_ADDR", "127.0.0.1:8080"),
		AdminAddr:         envOr("FEED_ADMIN_ADDR", "127.0.0.1:9100"),
		JWTSecret:         envOr("FEED_JWT_SECRET", devSecret),
		AuthMode:          envOr("FEED_AUTH", "jwt"),
		JWTPreviousSecret: os.Getenv("FEED_JWT_PREVIOUS_SECRET"),
		JWTIssuer:         os.Getenv("FEED_JWT_ISSUER"),
		JWTAudience:       os.Getenv("FEED_JWT_AUDIENCE"),
		GatewaySecret:     os.Getenv("FEED_GATEWAY_SECRET"),
		StateDir:          envOr("FEED_STATE_DIR", "./.feed"),
		KafkaAddr:         envOr("FEED_KAFKA_ADDR", "127.0.0.1:9092"),
		Topic:             envOr("FEED_TOPIC", "feed.events"),
		Slot:              os.Getenv("FEED_SLOT"),
		LogFormat:         envOr("FEED_LOG_FORMAT", "text"),
		OnSlotLoss:        os.Getenv("FEED_CDC_ON_SLOT_LOSS"),

		AllowDevSecret:    os.Getenv("FEED_ALLOW_DEV_SECRET") == "1",
		ReadCacheBarrier:  os.Getenv("FEED_READ_CACHE_BARRIER") == "1",
		StreamsGoroutine:  os.Getenv("FEED_STREAMS_GOROUTINE") == "1",
		StreamsPlainReads: os.Getenv("FEED_STREAMS_PLAIN_READS") == "1",
	}
	if b := strings.TrimSpace(os.Getenv("KAFKA_BROKERS")); b != "" {
		for _, s := range strings.Split(b, ",") {
			if s = strings.TrimSpace(s); s != "" {
				c.KafkaBrokers = append(c.KafkaBrokers, s)
			}
		}
	}
	var err error
	if c.KafkaSecurity, err = kafkaSecurityFromEnv(); err != nil {
		return c, err
	}
	if c.TrustedNetworks, err = parseNetworks(os.Getenv("FEED_TRUSTED_NETWORKS")); err != nil {
		return c, fmt.Errorf("FEED_TRUSTED_NETWORKS: %w", err)
	}
	ints := []struct {
		key string
		def int64
		dst func(int64)
	}{
		{"FEED_PARTITIONS", 12, func(v int64) { c.Partitions = int(v) }},
		{"FEED_CELEBRITY_THRESHOLD", 10000, func(v int64) { c.CelebrityThreshold = v }},
		{"FEED_CELEBRITY_BAND", 0, func(v int64) { c.CelebrityBand = v }},
		{"FEED_INBOX_MAX", 500, func(v int64) { c.InboxMax = int(v) }},
		{"FEED_NOTIFICATIONS_MAX", readmodel.DefaultNotificationsMax, func(v int64) { c.NotificationsMax = int(v) }},
		{"FEED_FOLLOWER_CACHE_ROWS", int64(projections.DefaultConfig().FollowerCacheRows), func(v int64) { c.FollowerCacheRows = int(v) }},
		{"FEED_NODE_ID", -1, func(v int64) { c.NodeID = v }},
		{"FEED_MAX_CONTENT_CHARS", 2000, func(v int64) { c.MaxContentChars = int(v) }},
		{"FEED_LAG_WARN_BYTES", 256 << 20, func(v int64) { c.LagWarnBytes = v }},
		{"FEED_READ_CACHE_KEYS", 40_000, func(v int64) { c.ReadCacheKeys = int(v) }},
		{"FEED_REBUILD_CONCURRENCY", 4, func(v int64) { c.RebuildConcurrency = int(v) }},
		{"FEED_MAX_READS_IN_FLIGHT", api.DefaultMaxReadsInFlight, func(v int64) { c.MaxReadsInFlight = int(v) }},
		{"FEED_MAX_WRITES_IN_FLIGHT", api.DefaultMaxWritesInFlight, func(v int64) { c.MaxWritesInFlight = int(v) }},
		{"FEED_FULL_HOME_READS", api.DefaultFullHomeReads, func(v int64) { c.FullHomeReads = int(v) }},
		{"FEED_READS_RUNNING", api.DefaultReadsRunning, func(v int64) { c.ReadsRunning = int(v) }},
		{"FEED_MAX_CONNS", api.DefaultMaxConns, func(v int64) { c.MaxConns = int(v) }},
		{"FEED_QUOTA_WRITES_PER_MINUTE", 60, func(v int64) { c.QuotaWritesPerMinute = int(v) }},
		{"FEED_QUOTA_READS_PER_SECOND", 20, func(v int64) { c.QuotaReadsPerSecond = int(v) }},
		{"FEED_QUOTA_REGISTRATIONS_PER_HOUR", 20, func(v int64) { c.QuotaRegistrationsPerHour = int(v) }},
		{"FEED_MAX_IDLE_CONNS", api.DefaultMaxIdleConns, func(v int64) { c.MaxIdleConns = int(v) }},
		{"FEED_STREAMS_PER_USER", api.DefaultStreamsPerUser, func(v int64) { c.StreamsPerUser = int(v) }},
		{"FEED_STREAMS_MAX", api.DefaultStreamsMax, func(v int64) { c.StreamsMax = int(v) }},
		{"FEED_KAFKA_FETCH_MIN_BYTES", kafka.FetchMinBytes, func(v int64) { c.KafkaFetchMinBytes = int32(min(v, math.MaxInt32)) }},
	}
	for _, i := range ints {
		v, err := envInt(i.key, i.def)
		if err != nil {
			return c, err
		}
		i.dst(v)
	}
	if c.InactiveAfter, err = envDuration("FEED_INACTIVE_AFTER", 30*24*time.Hour); err != nil {
		return c, err
	}
	if c.PostHorizon, err = envDuration("FEED_POST_CACHE_TTL", 4*24*time.Hour); err != nil {
		return c, err
	}
	if c.CelebrityCacheTTL, err = envDuration("FEED_CELEBRITY_CACHE_TTL", 3*time.Second); err != nil {
		return c, err
	}
	if c.BodyReadTimeout, err = envDuration("FEED_BODY_READ_TIMEOUT", 5*time.Second); err != nil {
		return c, err
	}
	if c.VerifyEvery, err = envDuration("FEED_VERIFY_EVERY", 0); err != nil {
		return c, err
	}
	if c.VerifyEvery != 0 && c.VerifyEvery < 10*time.Second {
		return c, fmt.Errorf("FEED_VERIFY_EVERY=%v: want at least 10s (or unset)", c.VerifyEvery)
	}
	if c.RefreshSettle, err = envDuration("FEED_REFRESH_SETTLE", 8*time.Second); err != nil {
		return c, err
	}
	if c.KafkaFetchMaxWait, err = envDuration("FEED_KAFKA_FETCH_MAX_WAIT", kafka.FetchMaxWait); err != nil {
		return c, err
	}
	if c.KafkaFetchMaxWait < time.Millisecond || c.KafkaFetchMaxWait > 10*time.Second {
		return c, fmt.Errorf("FEED_KAFKA_FETCH_MAX_WAIT=%v: want 1ms..10s", c.KafkaFetchMaxWait)
	}
	if c.KafkaFetchMinBytes < 1 || c.KafkaFetchMinBytes > 1<<20 {
		return c, fmt.Errorf("FEED_KAFKA_FETCH_MIN_BYTES=%d: want 1..1048576", c.KafkaFetchMinBytes)
	}
	if err := c.LogLevel.UnmarshalText([]byte(envOr("FEED_LOG_LEVEL", "info"))); err != nil {
		return c, fmt.Errorf("FEED_LOG_LEVEL=%q: want debug, info, warn or error", os.Getenv("FEED_LOG_LEVEL"))
	}
	c.PolicyExplicit = readmodel.PolicyExplicit{
		CelebrityThreshold: os.Getenv("FEED_CELEBRITY_THRESHOLD") != "",
		CelebrityBand:      os.Getenv("FEED_CELEBRITY_BAND") != "",
		InboxMax:           os.Getenv("FEED_INBOX_MAX") != "",
		NotificationsMax:   os.Getenv("FEED_NOTIFICATIONS_MAX") != "",
	}
	c.Policy = readmodel.Policy{
		CelebrityThreshold: c.CelebrityThreshold,
		CelebrityBand:      c.CelebrityBand,
		InboxMax:           c.InboxMax,
		InactiveAfter:      c.InactiveAfter,
		PostHorizon:        c.PostHorizon,
		NotificationsMax:   c.NotificationsMax,
	}.WithDefaults()
	if c.Slot == "" {
		c.Slot, err = slotFromDSN(c.DatabaseURL)
		if err != nil {
			return c, err
		}
	}
	return c, c.Validate()
}

// kafkaSecurityFromEnv reads FEED_KAFKA_TLS* and FEED_KAFKA_SASL_*.
func kafkaSecurityFromEnv() (kafka.Security, error) {
	s := kafka.Security{
		CAFile:        os.Getenv("FEED_KAFKA_TLS_CA"),
		CertFile:      os.Getenv("FEED_KAFKA_TLS_CERT"),
		KeyFile:       os.Getenv("FEED_KAFKA_TLS_KEY"),
		ServerName:    os.Getenv("FEED_KAFKA_TLS_SERVER_NAME"),
		SASLMechanism: strings.ToUpper(strings.TrimSpace(os.Getenv("FEED_KAFKA_SASL_MECHANISM"))),
		User:          os.Getenv("FEED_KAFKA_SASL_USER"),
		Password:      os.Getenv("FEED_KAFKA_SASL_PASSWORD"),
	}
	for key, dst := range map[string]*bool{"FEED_KAFKA_TLS": &s.TLS, "FEED_KAFKA_TLS_INSECURE_SKIP_VERIFY": &s.InsecureSkipVerifyBrokerCert} {
		if v := os.Getenv(key); v != "" {
			b, err := strconv.ParseBool(v)
			if err != nil {
				return s, fmt.Errorf("%s=%q: want true or false", key, v)
			}
			*dst = b
		}
	}
	if err := s.Validate(); err != nil {
		return s, fmt.Errorf("FEED_KAFKA_TLS_* / FEED_KAFKA_SASL_*: %w", err)
	}
	return s, nil
}

// Validate reports the first setting that cannot work.
func (c Config) Validate() error {
	switch {
	case c.AuthMode != "jwt" && c.AuthMode != "trusted-header":
		return fmt.Errorf("FEED_AUTH=%q: want jwt or trusted-header", c.AuthMode)
	case c.Partitions < 1 || c.Partitions > 1000:
		return fmt.Errorf("FEED_PARTITIONS=%d: want 1..1000", c.Partitions)
	case c.CelebrityThreshold < 1:
		return fmt.Errorf("FEED_CELEBRITY_THRESHOLD=%d: want at least 1", c.CelebrityThreshold)
	case c.CelebrityBand < 0 || c.CelebrityBand >= c.CelebrityThreshold:
		return fmt.Errorf("FEED_CELEBRITY_BAND=%d: want 0..FEED_CELEBRITY_THRESHOLD-1 (%d)", c.CelebrityBand, c.CelebrityThreshold-1)
	case c.InboxMax < 20:
		return fmt.Errorf("FEED_INBOX_MAX=%d: want at least 20", c.InboxMax)
	case c.NotificationsMax < 1 || c.NotificationsMax > readmodel.MaxNotificationsMax:
		return fmt.Errorf("FEED_NOTIFICATIONS_MAX=%d: want 1..%d", c.NotificationsMax, readmodel.MaxNotificationsMax)
	case c.NodeID < -1 || c.NodeID > 1023:
		return fmt.Errorf("FEED_NODE_ID=%d: want 0..1023 (or unset: a free one is leased)", c.NodeID)
	case c.MaxContentChars < 1:
		return fmt.Errorf("FEED_MAX_CONTENT_CHARS=%d: want at least 1", c.MaxContentChars)
	case c.CelebrityCacheTTL < 0:
		return fmt.Errorf("FEED_CELEBRITY_CACHE_TTL must not be negative")
	case c.RefreshSettle <= cmp.Or(c.CelebrityCacheTTL, 3*time.Second):
		return fmt.Errorf("FEED_REFRESH_SETTLE=%v: want more than the celebrity cache TTL (FEED_CELEBRITY_CACHE_TTL, %v), "+
			"so that a celebrity's post is in the cache before a refresh moves past it", c.RefreshSettle, cmp.Or(c.CelebrityCacheTTL, 3*time.Second))
	case c.MaxReadsInFlight < 0 || c.MaxReadsInFlight > 1_000_000:
		return fmt.Errorf("FEED_MAX_READS_IN_FLIGHT=%d: want 0 (no bound) to 1000000", c.MaxReadsInFlight)
	case c.MaxWritesInFlight < 0 || c.MaxWritesInFlight > 1_000_000:
		return fmt.Errorf("FEED_MAX_WRITES_IN_FLIGHT=%d: want 0 (no bound) to 1000000", c.MaxWritesInFlight)
	case c.FullHomeReads < 0 || (c.MaxReadsInFlight > 0 && c.FullHomeReads > c.MaxReadsInFlight):
		return fmt.Errorf("FEED_FULL_HOME_READS=%d: want 0 (never degrade) to FEED_MAX_READS_IN_FLIGHT (%d): "+
			"home reads degrade before reads are shed", c.FullHomeReads, c.MaxReadsInFlight)
	case c.ReadsRunning < 0 || c.ReadsRunning > 1_000_000:
		return fmt.Errorf("FEED_READS_RUNNING=%d: want 0 (no bound) to 1000000", c.ReadsRunning)
	case c.MaxConns < 0 || c.MaxConns > 1_000_000:
		return fmt.Errorf("FEED_MAX_CONNS=%d: want 0 (no bound) to 1000000", c.MaxConns)
	case c.MaxIdleConns < 0 || (c.MaxConns > 0 && c.MaxIdleConns > c.MaxConns):
		return fmt.Errorf("FEED_MAX_IDLE_CONNS=%d: want 0 (no bound) to FEED_MAX_CONNS (%d)", c.MaxIdleConns, c.MaxConns)
	case c.QuotaWritesPerMinute < 0 || c.QuotaWritesPerMinute > 1_000_000:
		return fmt.Errorf("FEED_QUOTA_WRITES_PER_MINUTE=%d: want 0 (no quota) to 1000000", c.QuotaWritesPerMinute)
	case c.QuotaReadsPerSecond < 0 || c.QuotaReadsPerSecond > 1_000_000:
		return fmt.Errorf("FEED_QUOTA_READS_PER_SECOND=%d: want 0 (no quota) to 1000000", c.QuotaReadsPerSecond)
	case c.QuotaRegistrationsPerHour < 0 || c.QuotaRegistrationsPerHour > 1_000_000:
		return fmt.Errorf("FEED_QUOTA_REGISTRATIONS_PER_HOUR=%d: want 0 (no quota) to 1000000", c.QuotaRegistrationsPerHour)
	case c.BodyReadTimeout <= 0 || c.BodyReadTimeout > time.Minute:
		return fmt.Errorf("FEED_BODY_READ_TIMEOUT=%v: want more than 0, at most 1m", c.BodyReadTimeout)
	case c.RebuildConcurrency < 1 || c.RebuildConcurrency > 1000:
		return fmt.Errorf("FEED_REBUILD_CONCURRENCY=%d: want 1..1000", c.RebuildConcurrency)
	case c.ReadCacheKeys < 0:
		return fmt.Errorf("FEED_READ_CACHE_KEYS=%d: want a number of keys, 0 for off", c.ReadCacheKeys)
	case c.LogFormat != "text" && c.LogFormat != "json":
		return fmt.Errorf("FEED_LOG_FORMAT=%q: want text or json", c.LogFormat)
	case c.AuthMode == api.AuthTrustedHeader && c.GatewaySecret == "" && len(c.TrustedNetworks) == 0 && !api.LoopbackAddr(c.HTTPAddr):
		return fmt.Errorf("FEED_AUTH=trusted-header on HTTP_ADDR=%s would let any client that reaches it act as any user: "+
			"listen on a loopback address, or set FEED_GATEWAY_SECRET or FEED_TRUSTED_NETWORKS", c.HTTPAddr)
	case c.GatewaySecret != "" && len(c.GatewaySecret) < 16:
		return fmt.Errorf("FEED_GATEWAY_SECRET must be at least 16 bytes, got %d", len(c.GatewaySecret))
	}
	if err := c.Policy.Validate(); err != nil {
		return fmt.Errorf("feed policy: %w", err)
	}
	return nil
}

// parseNetworks parses FEED_TRUSTED_NETWORKS: comma-separated CIDR
// prefixes, or single addresses.
func parseNetworks(v string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s == "" {
			continue
		}
		if !strings.Contains(s, "/") {
			a, err := netip.ParseAddr(s)
			if err != nil {
				return nil, fmt.Errorf("%q: want a CIDR prefix (10.0.0.0/8) or an address", s)
			}
			out = append(out, netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen()))
			continue
		}
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return nil, fmt.Errorf("%q: want a CIDR prefix (10.0.0.0/8) or an address", s)
		}
		out = append(out, p.Masked())
	}
	return out, nil
}

// slotFromDSN derives the replication slot name from the database that
// DATABASE_URL names, in URL or keyword form (so that writing the same
// connection differently keeps the slot): slot names are cluster-wide, so
// two databases on one server need two.
func slotFromDSN(dsn string) (string, error) {
	pc, err := pgconn.ParseConfig(dsn)
	if err != nil {
		return "", fmt.Errorf("DATABASE_URL %s: %s", redactDSN(dsn), dsnReason(dsn, err))
	}
	return cdc.DefaultSlot(pc.Database), nil
}
