// Package kafka is the Kafka plumbing shared by CDC, the projectors and the
// tools: the embedded development broker, explicit topic creation, and the
// sarama/watermill configurations that keep per-key order and lose nothing.
package kafka

import (
	"context"
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
}

// Embedded is a running kfake broker.
type Embedded struct {
	cluster *kfake.Cluster
	addrs   []string
}

// StartEmbedded starts a single-node Kafka-protocol broker with persistent
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
	cluster, err := kfake.NewCluster(
		kfake.Ports(port),
		kfake.DataDir(cfg.DataDir),
		kfake.ClusterID("feed-dev"),
		// Consumers that die are noticed within seconds.
		kfake.GroupMinSessionTimeout(time.Second),
	)
	if err != nil {
		return nil, fmt.Errorf("start embedded broker on %s: %w", cfg.Addr, err)
	}
	e := &Embedded{cluster: cluster, addrs: cluster.ListenAddrs()}
	if len(cfg.Topics) > 0 {
		tctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		if err := EnsureTopics(tctx, e.addrs, cfg.Topics); err != nil {
			e.Close()
			return nil, err
		}
	}
	return e, nil
}

// Addrs are the broker addresses to give clients.
func (e *Embedded) Addrs() []string { return e.addrs }

// Close stops the broker and flushes its state to the data directory.
func (e *Embedded) Close() { e.cluster.Close() }
