package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/feedco/feed/internal/kafka"
)

func init() {
	register("kafka", "the development Kafka-protocol broker on its own (FEED_KAFKA_ADDR, data in FEED_STATE_DIR)", runKafka)
	// `feed dev` starts the embedded broker when KAFKA_BROKERS is empty,
	// and otherwise makes sure the topics exist on the configured brokers.
	devHooks = append(devHooks, func(ctx context.Context, a *App) (func(), error) {
		if len(a.Cfg.KafkaBrokers) > 0 {
			return nil, kafka.EnsureTopics(ctx, a.Cfg.KafkaBrokers, topicsOf(a.Cfg))
		}
		e, err := startEmbedded(ctx, a.Cfg)
		if err != nil {
			return nil, err
		}
		a.Cfg.KafkaBrokers = e.Addrs()
		fmt.Fprintf(os.Stderr, "dev: embedded Kafka broker on %s (data in %s)\n", e.Addrs()[0], brokerDir(a.Cfg))
		return e.Close, nil
	})
}

func topicsOf(cfg Config) map[string]int32 {
	return map[string]int32{cfg.Topic: int32(cfg.Partitions), kafka.PoisonTopic(cfg.Topic): 1}
}

func brokerDir(cfg Config) string { return filepath.Join(cfg.StateDir, "kafka") }

func startEmbedded(ctx context.Context, cfg Config) (*kafka.Embedded, error) {
	return kafka.StartEmbedded(ctx, kafka.EmbeddedConfig{Addr: cfg.KafkaAddr, DataDir: brokerDir(cfg), Topics: topicsOf(cfg)})
}

func runKafka(ctx context.Context, args []string) error {
	if len(args) > 0 {
		return usageError{"kafka takes no arguments (FEED_KAFKA_ADDR, FEED_STATE_DIR, FEED_TOPIC, FEED_PARTITIONS)"}
	}
	cfg, err := LoadConfig()
	if err != nil {
		return usageError{err.Error()}
	}
	e, err := startEmbedded(ctx, cfg)
	if err != nil {
		return err
	}
	defer e.Close()
	fmt.Printf("kafka: listening on %s, data in %s, topic %s (%d partitions)\n", e.Addrs()[0], brokerDir(cfg), cfg.Topic, cfg.Partitions)
	<-ctx.Done()
	fmt.Println("kafka: stopping")
	return nil
}
