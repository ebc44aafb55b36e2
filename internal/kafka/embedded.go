// Package kafka is the Kafka plumbing shared by CDC, the projectors and the
// tools: the embedded development broker, explicit topic creation, and the
// sarama/watermill configurations that keep per-key order and lose nothing.
package kafka

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"os"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
)

// EmbeddedConfig configures the development broker.
type EmbeddedConfig struct {
	// Addr is host:port to listen on; kfake binds 127.0.0.1 only.
	Addr string
	// DataDir keeps the log across restarts. Required: a broker without one
	// loses everything when the process ends.
	DataDir string
	// Topics are created at start when missing, with their partition count.
	Topics map[string]int32
	// Brokers is how many brokers the cluster runs (default 1), on Addr's
	// port and the ones after it.
	Brokers int
	// SASLUser and SASLPassword, when set, make the brokers require SASL
	// and accept that user with PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512.
	SASLUser, SASLPassword string
	// TLSCertFile and TLSKeyFile, when set, make the brokers speak TLS only,
	// with this certificate.
	TLSCertFile, TLSKeyFile string
	// Client is how the broker's own admin client (topic creation)
	// connects, and what Conn returns: the security a client of these
	// brokers needs.
	Client Security
}

// Embedded is a running kfake broker.
type Embedded struct {
	cluster *kfake.Cluster
	addrs   []string
	client  Security
}

// StartEmbedded starts a Kafka-protocol cluster (one broker by default) with persistent
// state, and creates the configured topics explicitly (an auto-created topic
// does not survive a crash of kfake).
func StartEmbedded(ctx context.Context, cfg EmbeddedConfig) (*Embedded, error) {
	if cfg.DataDir == "" {
		return nil, fmt.Errorf("embedded broker: DataDir is required")
	}
	host, portStr, err := net.SplitHostPort(cfg.Addr)
	if err != nil {
		return nil, fmt.Errorf("embedded broker address %q: %w", cfg.Addr, err)
	}
	if host != "127.0.0.1" && host != "localhost" && host != "" {
		return nil, fmt.Errorf("embedded broker address %q: kfake listens on 127.0.0.1 only", cfg.Addr)
	}
	port, err := strconv.Atoi(portStr)
	if err != nil {
		return nil, fmt.Errorf("embedded broker port %q: %w", portStr, err)
	}
	if err := os.MkdirAll(cfg.DataDir, 0o755); err != nil {
		return nil, fmt.Errorf("create broker data dir: %w", err)
	}
	n := max(cfg.Brokers, 1)
	if port != 0 && port+n-1 > 65535 {
		return nil, fmt.Errorf("embedded broker ports %d..%d: past 65535", port, port+n-1)
	}
	ports := make([]int, n)
	for i := range ports {
		if port != 0 {
			ports[i] = port + i
		}
	}
	opts := []kfake.Opt{
		kfake.NumBrokers(n),
		kfake.Ports(ports...),
		kfake.DataDir(cfg.DataDir),
		kfake.ClusterID("feed-dev"),
		// Consumers that die are noticed within seconds.
		kfake.GroupMinSessionTimeout(time.Second),
	}
	if (cfg.SASLUser == "") != (cfg.SASLPassword == "") {
		return nil, fmt.Errorf("embedded broker: SASL user and password go together")
	}
	if cfg.SASLUser != "" {
		opts = append(opts, kfake.EnableSASL())
		for _, m := range []string{SASLPlain, SASLScramSHA256, SASLScramSHA512} {
			opts = append(opts, kfake.Superuser(m, cfg.SASLUser, cfg.SASLPassword))
		}
	}
	if (cfg.TLSCertFile == "") != (cfg.TLSKeyFile == "") {
		return nil, fmt.Errorf("embedded broker: TLS certificate and key go together")
	}
	if cfg.TLSCertFile != "" {
		cert, err := tls.LoadX509KeyPair(cfg.TLSCertFile, cfg.TLSKeyFile)
		if err != nil {
			return nil, fmt.Errorf("embedded broker TLS certificate: %w", err)
		}
		opts = append(opts, kfake.TLS(&tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}))
	}
	cluster, err := kfake.NewCluster(opts...)
	if err != nil {
		return nil, fmt.Errorf("start embedded broker on %s: %w", cfg.Addr, err)
	}
	e := &Embedded{cluster: cluster, addrs: cluster.ListenAddrs(), client: cfg.Client}
	if len(cfg.Topics) > 0 {
		tctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		if err := EnsureTopics(tctx, e.Conn(), cfg.Topics); err != nil {
			e.Close()
			return nil, err
		}
	}
	return e, nil
}

// Addrs are the broker addresses to give clients.
func (e *Embedded) Addrs() []string { return e.addrs }

// Conn is how a client reaches these brokers: their addresses and the
// configured client security (EmbeddedConfig.Client).
func (e *Embedded) Conn() Conn { return Conn{Brokers: e.addrs, Security: e.client} }

// Close stops the broker and flushes its state to the data directory.
func (e *Embedded) Close() { e.cluster.Close() }
