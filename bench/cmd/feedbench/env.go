package main

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/feedco/feed/cdc"
	"github.com/feedco/feed/internal/auth"
	"github.com/feedco/feed/internal/kafka"
	"github.com/feedco/feed/readmodel"
)

// config is what feedbench reads from the environment: the variables of
// the system it measures, with feed's defaults (README.md, Configuration).
type config struct {
	databaseURL, redisURL, httpAddr string
	// adminAddr is the API's admin listener (FEED_ADMIN_ADDR), for its /metrics.
	adminAddr     string
	jwt           auth.Config
	slot          string // "": cdc.DefaultSlot of the database
	brokers       []string
	kafkaSecurity kafka.Security
	topic         string
}

// envDocs are the variables loadConfig reads, for the help.
var envDocs = [][2]string{
	{"DATABASE_URL", "PostgreSQL event log, URL or keyword form (default postgres://postgres@127.0.0.1:5432/feed?sslmode=disable)"},
	{"REDIS_URL", "Redis read models; the cluster form redis://h1:p1?addr=h2:p2 for a cluster (default redis://127.0.0.1:6379/0)"},
	{"HTTP_ADDR", "the API's address, when --url is not given (default 127.0.0.1:8080)"},
	{"FEED_ADMIN_ADDR", "the API's admin listener, for its /metrics (default 127.0.0.1:9100)"},
	{"FEED_JWT_SECRET", "HS256 token secret the API verifies with (default: feed's development secret)"},
	{"FEED_JWT_ISSUER", "the iss of the tokens, when the API checks it (default: none)"},
	{"FEED_JWT_AUDIENCE", "the aud of the tokens, when the API checks it (default: none)"},
	{"FEED_SLOT", "CDC's replication slot, for its lag (default feed_cdc_<database>)"},
	{"KAFKA_BROKERS", "comma-separated Kafka brokers, for the consumer lags (default: the development broker at FEED_KAFKA_ADDR)"},
	{"FEED_KAFKA_ADDR", "the development broker's address (default 127.0.0.1:9092)"},
	{"FEED_TOPIC", "the event topic (default feed.events)"},
	{"FEED_KAFKA_TLS", "true: TLS to the brokers (default false; the TLS files imply true)"},
	{"FEED_KAFKA_TLS_CA", "PEM file of the CAs that sign the brokers' certificates (default: the system roots)"},
	{"FEED_KAFKA_TLS_CERT", "PEM client certificate for mutual TLS, with FEED_KAFKA_TLS_KEY"},
	{"FEED_KAFKA_TLS_KEY", "PEM private key of FEED_KAFKA_TLS_CERT"},
	{"FEED_KAFKA_TLS_SERVER_NAME", "the name to check in the brokers' certificates (default: each broker's host)"},
	{"FEED_KAFKA_TLS_INSECURE_SKIP_VERIFY", "true accepts any broker certificate: test brokers only"},
	{"FEED_KAFKA_SASL_MECHANISM", "PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512 (default: no SASL)"},
	{"FEED_KAFKA_SASL_USER", "the SASL user"},
	{"FEED_KAFKA_SASL_PASSWORD", "the SASL password"},
}

// envHelp is the "Environment:" section of the help.
func envHelp() string {
	var b strings.Builder
	b.WriteString("Environment:\n")
	for _, e := range envDocs {
		fmt.Fprintf(&b, "  %-36s %s\n", e[0], e[1])
	}
	return strings.TrimRight(b.String(), "\n")
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

// loadConfig reads the environment.
func loadConfig() (config, error) {
	c := config{
		databaseURL: envOr("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/feed?sslmode=disable"),
		redisURL:    envOr("REDIS_URL", "redis://127.0.0.1:6379/0"),
		httpAddr:    envOr("HTTP_ADDR", "127.0.0.1:8080"),
		adminAddr:   envOr("FEED_ADMIN_ADDR", "127.0.0.1:9100"),
		jwt: auth.Config{
			Secret:   envOr("FEED_JWT_SECRET", auth.DevSecret),
			Issuer:   os.Getenv("FEED_JWT_ISSUER"),
			Audience: os.Getenv("FEED_JWT_AUDIENCE"),
		},
		slot:  os.Getenv("FEED_SLOT"),
		topic: envOr("FEED_TOPIC", "feed.events"),
		kafkaSecurity: kafka.Security{
			CAFile:        os.Getenv("FEED_KAFKA_TLS_CA"),
			CertFile:      os.Getenv("FEED_KAFKA_TLS_CERT"),
			KeyFile:       os.Getenv("FEED_KAFKA_TLS_KEY"),
			ServerName:    os.Getenv("FEED_KAFKA_TLS_SERVER_NAME"),
			SASLMechanism: strings.ToUpper(strings.TrimSpace(os.Getenv("FEED_KAFKA_SASL_MECHANISM"))),
			User:          os.Getenv("FEED_KAFKA_SASL_USER"),
			Password:      os.Getenv("FEED_KAFKA_SASL_PASSWORD"),
		},
	}
	for _, b := range strings.Split(os.Getenv("KAFKA_BROKERS"), ",") {
		if b = strings.TrimSpace(b); b != "" {
			c.brokers = append(c.brokers, b)
		}
	}
	if len(c.brokers) == 0 {
		c.brokers = []string{envOr("FEED_KAFKA_ADDR", "127.0.0.1:9092")}
	}
	for key, dst := range map[string]*bool{"FEED_KAFKA_TLS": &c.kafkaSecurity.TLS, "FEED_KAFKA_TLS_INSECURE_SKIP_VERIFY": &c.kafkaSecurity.InsecureSkipVerifyBrokerCert} {
		if v := os.Getenv(key); v != "" {
			b, err := strconv.ParseBool(v)
			if err != nil {
				return c, fmt.Errorf("%s=%q: want true or false", key, v)
			}
			*dst = b
		}
	}
	if err := c.kafkaSecurity.Validate(); err != nil {
		return c, fmt.Errorf("FEED_KAFKA_TLS_* / FEED_KAFKA_SASL_*: %w", err)
	}
	return c, nil
}

// system is the connections to the system under test and what its
// PostgreSQL records: the active versions and the inbox version's policy.
type system struct {
	pool     *pgxpool.Pool
	redis    redis.UniversalClient
	slot     string
	versions readmodel.Versions
	policy   readmodel.Policy
}

func (s *system) close() {
	if s.redis != nil {
		_ = s.redis.Close()
	}
	s.pool.Close()
}

// open connects to PostgreSQL (64 connections) and Redis (256 per node),
// reads the active versions and their policy, and checks the brokers.
func open(ctx context.Context, cfg config) (*system, error) {
	pc, err := pgxpool.ParseConfig(cfg.databaseURL)
	if err != nil {
		return nil, usageError{fmt.Sprintf("DATABASE_URL: %v", err)}
	}
	pc.MaxConns = 64
	if _, set := pc.ConnConfig.RuntimeParams["application_name"]; !set {
		pc.ConnConfig.RuntimeParams["application_name"] = "feedbench"
	}
	s := &system{slot: cfg.slot}
	if s.slot == "" {
		s.slot = cdc.DefaultSlot(pc.ConnConfig.Database)
	}
	if s.pool, err = pgxpool.NewWithConfig(ctx, pc); err != nil {
		return nil, fmt.Errorf("connect to PostgreSQL: %w", err)
	}
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := s.pool.Ping(pctx); err != nil {
		s.close()
		return nil, fmt.Errorf("connect to PostgreSQL: %w", err)
	}
	if err := s.openRedis(ctx, cfg.redisURL); err != nil {
		s.close()
		return nil, err
	}
	recs, err := readmodel.LoadVersionRecords(ctx, s.pool)
	if err != nil {
		s.close()
		return nil, err
	}
	s.policy = readmodel.DefaultPolicy()
	for _, r := range recs {
		s.versions = s.versions.With(r.Projection, r.Version)
		if r.Projection == readmodel.ProjectionInbox {
			s.policy = r.Apply(s.policy).WithDefaults()
		}
	}
	if err := (kafka.Conn{Brokers: cfg.brokers, Security: cfg.kafkaSecurity}).Check(ctx); err != nil {
		s.close()
		return nil, fmt.Errorf("check the Kafka connection: %w", err)
	}
	return s, nil
}

// openRedis connects to raw, a single server's URL or go-redis's cluster
// form (a seed node in the host and more in addr query parameters).
func (s *system) openRedis(ctx context.Context, raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		// net/url's message quotes the URL, password included.
		return usageError{"REDIS_URL: not a valid URL"}
	}
	if u.Query().Has("addr") {
		opt, err := redis.ParseClusterURL(raw)
		if err != nil {
			return usageError{fmt.Sprintf("REDIS_URL: %v", err)}
		}
		opt.PoolSize = 256
		s.redis = redis.NewClusterClient(opt)
	} else {
		opt, err := redis.ParseURL(raw)
		if err != nil {
			return usageError{fmt.Sprintf("REDIS_URL: %v", err)}
		}
		opt.PoolSize = 256
		s.redis = redis.NewClient(opt)
	}
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := s.redis.Ping(pctx).Err(); err != nil {
		return fmt.Errorf("connect to Redis: %w", err)
	}
	if cc, ok := s.redis.(*redis.ClusterClient); ok {
		// Load the slot map and reach every master before the run.
		if err := cc.ForEachMaster(pctx, func(ctx context.Context, n *redis.Client) error { return n.Ping(ctx).Err() }); err != nil {
			return fmt.Errorf("connect to Redis: %w", err)
		}
	}
	return nil
}
