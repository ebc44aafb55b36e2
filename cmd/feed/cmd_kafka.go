package main

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/feedco/feed/internal/kafka"
)

func newKafkaCommand(c *cli) *cobra.Command {
	return &cobra.Command{
		Use:   "kafka",
		Short: "The development Kafka-protocol broker on its own",
		Long: longHelp("Runs the embedded Kafka-protocol broker (franz-go's kfake) that `feed dev` runs when KAFKA_BROKERS is empty,\n"+
			"with the topics created and its data under FEED_STATE_DIR.",
			[]string{"FEED_KAFKA_ADDR", "FEED_STATE_DIR", "FEED_TOPIC", "FEED_PARTITIONS"}),
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, log, err := c.config()
			if err != nil {
				return err
			}
			return runKafka(cmd.Context(), cfg, log)
		},
	}
}

// runKafka is `feed kafka`: the embedded broker until ctx ends.
func runKafka(ctx context.Context, cfg Config, log *slog.Logger) error {
	e, err := startEmbedded(ctx, cfg)
	if err != nil {
		return err
	}
	defer e.Close()
	log.Info("kafka: starting", "kafka", e.Addrs()[0], "data", brokerDir(cfg), "topic", cfg.Topic, "partitions", cfg.Partitions)
	return runTasks(ctx, log, "kafka", task{name: "kafka", run: func(ctx context.Context) error {
		<-ctx.Done()
		return nil
	}})
}

func topicsOf(cfg Config) map[string]int32 {
	return map[string]int32{cfg.Topic: int32(cfg.Partitions), kafka.PoisonTopic(cfg.Topic): 1}
}

func brokerDir(cfg Config) string { return filepath.Join(cfg.StateDir, "kafka") }

// startEmbedded starts the development broker on FEED_KAFKA_ADDR with the
// topics created; Close stops it.
func startEmbedded(ctx context.Context, cfg Config) (*kafka.Embedded, error) {
	e, err := kafka.StartEmbedded(ctx, kafka.EmbeddedConfig{Addr: cfg.KafkaAddr, DataDir: brokerDir(cfg), Topics: topicsOf(cfg)})
	if err != nil {
		return nil, fmt.Errorf("start the embedded broker: %w", err)
	}
	return e, nil
}
