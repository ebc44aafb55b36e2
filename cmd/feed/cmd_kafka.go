package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/feedco/feed/internal/kafka"
	"github.com/feedco/feed/internal/service"
)

func newKafkaCommand(c *cli) *cobra.Command {
	var o kafkaOptions
	cmd := &cobra.Command{
		Use:   "kafka",
		Short: "The development Kafka-protocol broker on its own",
		Long: longHelp("Runs the embedded Kafka-protocol broker (franz-go's kfake) that `feed dev` runs when KAFKA_BROKERS is empty,\n"+
			"with the topics created and its data under FEED_STATE_DIR. --brokers runs several brokers on consecutive ports\n"+
			"from FEED_KAFKA_ADDR's; --sasl-user/--sasl-password require SASL (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512) and\n"+
			"--tls-cert/--tls-key TLS, so that clients' FEED_KAFKA_TLS_* and FEED_KAFKA_SASL_* settings can be tried locally.",
			[]string{"FEED_KAFKA_ADDR", "FEED_STATE_DIR", "FEED_TOPIC", "FEED_PARTITIONS", "FEED_KAFKA_SASL_PASSWORD"}),
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, log, err := c.config()
			if err != nil {
				return err
			}
			if o.brokers < 1 || o.brokers > 16 {
				return flagUsage("brokers", "%d: want 1..16", o.brokers)
			}
			if o.saslPassword == "" && o.saslUser != "" {
				o.saslPassword = os.Getenv("FEED_KAFKA_SASL_PASSWORD")
			}
			if (o.saslUser == "") != (o.saslPassword == "") {
				return flagUsage("sasl-user", "needs --sasl-password or FEED_KAFKA_SASL_PASSWORD")
			}
			if (o.tlsCert == "") != (o.tlsKey == "") {
				return flagUsage("tls-cert", "needs --tls-key, and the other way round")
			}
			return runKafka(cmd.Context(), cfg, log, o)
		},
	}
	f := cmd.Flags()
	f.IntVar(&o.brokers, "brokers", 1, "how many brokers to run, on consecutive ports from FEED_KAFKA_ADDR's")
	f.StringVar(&o.saslUser, "sasl-user", "", "require SASL and accept this user (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512)")
	f.StringVar(&o.saslPassword, "sasl-password", "", "the SASL user's password (default FEED_KAFKA_SASL_PASSWORD, which stays out of the process list)")
	f.StringVar(&o.tlsCert, "tls-cert", "", "PEM certificate: the brokers speak TLS only")
	f.StringVar(&o.tlsKey, "tls-key", "", "PEM private key of --tls-cert")
	return cmd
}

// kafkaOptions are `feed kafka`'s flags.
type kafkaOptions struct {
	brokers                int
	saslUser, saslPassword string
	tlsCert, tlsKey        string
}

// runKafka is `feed kafka`: the embedded broker until ctx ends.
func runKafka(ctx context.Context, cfg Config, log *slog.Logger, o kafkaOptions) error {
	e, err := startEmbedded(ctx, cfg, o)
	if err != nil {
		return err
	}
	defer e.Close()
	log.Info("kafka: starting", "kafka", strings.Join(e.Addrs(), ","), "data", brokerDir(cfg), "topic", cfg.Topic,
		"partitions", cfg.Partitions, "sasl", o.saslUser != "", "tls", o.tlsCert != "")
	// The broker runs from StartEmbedded to Close: its service only holds
	// the role until the end of ctx.
	return service.Run(ctx, log, "kafka", service.New("kafka", func(ctx context.Context) error {
		<-ctx.Done()
		return nil
	}))
}

func topicsOf(cfg Config) map[string]int32 {
	return map[string]int32{cfg.Topic: int32(cfg.Partitions), kafka.PoisonTopic(cfg.Topic): 1}
}

func brokerDir(cfg Config) string { return filepath.Join(cfg.StateDir, "kafka") }

// startEmbedded starts the development broker on FEED_KAFKA_ADDR with the
// topics created; Close stops it. Its own admin client uses the
// environment's Kafka security, or, where that sets none, the broker's own
// user (SCRAM-SHA-256) and its certificate as the CA.
func startEmbedded(ctx context.Context, cfg Config, o kafkaOptions) (*kafka.Embedded, error) {
	client := cfg.KafkaSecurity
	if o.saslUser != "" && client.SASLMechanism == "" {
		client.SASLMechanism, client.User, client.Password = kafka.SASLScramSHA256, o.saslUser, o.saslPassword
	}
	if o.tlsCert != "" && !client.TLSEnabled() {
		client.CAFile = o.tlsCert
	}
	e, err := kafka.StartEmbedded(ctx, kafka.EmbeddedConfig{
		Addr: cfg.KafkaAddr, DataDir: brokerDir(cfg), Topics: topicsOf(cfg), Brokers: o.brokers,
		SASLUser: o.saslUser, SASLPassword: o.saslPassword, TLSCertFile: o.tlsCert, TLSKeyFile: o.tlsKey,
		Client: client,
	})
	if err != nil {
		return nil, fmt.Errorf("start the embedded broker: %w", err)
	}
	return e, nil
}

// connOf is the brokers of brokersOf with the security settings of the
// environment (FEED_KAFKA_TLS_*, FEED_KAFKA_SASL_*).
func connOf(cfg Config) kafka.Conn {
	return kafka.Conn{Brokers: brokersOf(cfg), Security: cfg.KafkaSecurity}
}

// checkKafka fails at once, naming the cause, when the brokers cannot be
// reached with the configured security (a wrong CA or password), instead of
// leaving a role in its clients' retry loops.
func checkKafka(ctx context.Context, cfg Config) error {
	if err := connOf(cfg).Check(ctx); err != nil {
		return fmt.Errorf("check the Kafka connection: %w", err)
	}
	return nil
}
