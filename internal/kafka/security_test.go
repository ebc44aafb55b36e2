package kafka_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/feedco/feed/events"
	"github.com/feedco/feed/internal/kafka"
	"github.com/feedco/feed/replay"
	"github.com/feedco/feed/testkit/kafkatest"
)

const (
	testUser     = "feed-test"
	testPassword = "s3cret-Pa55word"
)

// startSecured runs a broker that requires TLS (a certificate of a test
// CA) and SASL (testUser with every mechanism).
func startSecured(t *testing.T) (*kafkatest.Broker, kafkatest.TLSFiles) {
	t.Helper()
	files := kafkatest.NewTLSFiles(t)
	b := kafkatest.StartWith(t, kafka.EmbeddedConfig{
		SASLUser: testUser, SASLPassword: testPassword,
		TLSCertFile: files.Cert, TLSKeyFile: files.Key,
		Client: kafka.Security{CAFile: files.CA, SASLMechanism: kafka.SASLScramSHA256, User: testUser, Password: testPassword},
	})
	return b, files
}

func envelope(t *testing.T, i int) events.Envelope {
	t.Helper()
	payload, err := events.Encode(events.UserRegistered{UserID: int64(i), Name: "u" + strconv.Itoa(i)})
	if err != nil {
		t.Fatal(err)
	}
	return events.Envelope{
		EventID:       fmt.Sprintf("00000000-0000-4000-8000-%012d", i),
		Position:      int64(i),
		StreamID:      "user-" + strconv.Itoa(i),
		StreamVersion: 1,
		Type:          events.UserRegistered{}.EventType(),
		Payload:       payload,
		RecordedAt:    time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC).Add(time.Duration(i) * time.Second),
		AudienceKey:   int64(i),
	}
}

// Every client of the project reaches a broker that requires TLS and SASL,
// with each SASL mechanism: the connection check, topic creation (kadm),
// the watermill publisher and a consumer group (sarama), and the replay
// of the stream (kgo).
func TestSecuredBrokerEveryClient(t *testing.T) {
	t.Parallel()
	b, files := startSecured(t)
	for _, mech := range []string{kafka.SASLScramSHA256, kafka.SASLScramSHA512, kafka.SASLPlain} {
		t.Run(mech, func(t *testing.T) {
			conn := kafka.Conn{Brokers: b.Addrs(), Security: kafka.Security{
				CAFile: files.CA, SASLMechanism: mech, User: testUser, Password: testPassword,
			}}
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			if err := conn.Check(ctx); err != nil {
				t.Fatalf("check: %v", err)
			}
			topic := "secured." + strings.ToLower(mech)
			if err := kafka.EnsureTopics(ctx, conn, map[string]int32{topic: 3}); err != nil {
				t.Fatal(err)
			}
			const n = 30
			pub, err := kafka.NewPublisher(conn, watermill.NopLogger{})
			if err != nil {
				t.Fatal(err)
			}
			for i := 1; i <= n; i++ {
				if err := pub.Publish(topic, kafkatest.EventMessage(t, envelope(t, i))); err != nil {
					t.Fatalf("publish %d: %v", i, err)
				}
			}
			if err := pub.Close(); err != nil {
				t.Fatal(err)
			}

			consumeAll(ctx, t, conn, topic, n)

			src, err := replay.NewKafka(replay.KafkaConfig{Brokers: conn.Brokers, Security: conn.Security, Topic: topic})
			if err != nil {
				t.Fatal(err)
			}
			var replayed []int64
			if err := src.Stream(ctx, func(e *events.Envelope) error {
				replayed = append(replayed, e.Position)
				return nil
			}); err != nil {
				t.Fatalf("replay: %v", err)
			}
			if len(replayed) != n {
				t.Fatalf("replayed %d events, want %d", len(replayed), n)
			}
		})
	}
}

// A wrong password or a CA that did not sign the broker's certificate is
// an error at the connection check, at once and naming the cause, and the
// password is in no error message.
func TestSecuredBrokerWrongCredentials(t *testing.T) {
	t.Parallel()
	b, files := startSecured(t)
	other := kafkatest.NewTLSFiles(t)
	const wrong = "not-the-password"
	cases := []struct {
		name string
		sec  kafka.Security
		want string
	}{
		{"wrong password scram", kafka.Security{CAFile: files.CA, SASLMechanism: kafka.SASLScramSHA256, User: testUser, Password: wrong}, "SASL: authentication failed"},
		{"wrong password plain", kafka.Security{CAFile: files.CA, SASLMechanism: kafka.SASLPlain, User: testUser, Password: wrong}, "SASL: authentication failed"},
		{"unknown user", kafka.Security{CAFile: files.CA, SASLMechanism: kafka.SASLScramSHA512, User: "nobody", Password: wrong}, "SASL: authentication failed"},
		{"wrong CA", kafka.Security{CAFile: other.CA, SASLMechanism: kafka.SASLScramSHA256, User: testUser, Password: testPassword}, "not signed by the configured CA"},
		{"plaintext client", kafka.Security{SASLMechanism: kafka.SASLScramSHA256, User: testUser, Password: testPassword}, "TLS or SASL on one side only"},
		{"no SASL", kafka.Security{CAFile: files.CA}, "TLS or SASL on one side only"},
		{"wrong server name", kafka.Security{CAFile: files.CA, ServerName: "kafka.example.com", SASLMechanism: kafka.SASLScramSHA256, User: testUser, Password: testPassword}, "does not name this host"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			conn := kafka.Conn{Brokers: b.Addrs(), Security: c.sec}
			// A context far longer than CheckTimeout: the check must not
			// use it up, it returns on the first refusal.
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
			defer cancel()
			err := conn.Check(ctx)
			if err == nil {
				t.Fatal("check succeeded")
			}
			if ctx.Err() != nil || strings.Contains(err.Error(), "no answer within") {
				t.Fatalf("check waited for its timeout instead of failing at once: %v", err)
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %q does not say %q", err, c.want)
			}
			if strings.Contains(err.Error(), wrong) || strings.Contains(err.Error(), testPassword) {
				t.Fatalf("error shows the password: %v", err)
			}
			if c.sec.Password != "" && !strings.Contains(err.Error(), "password=[redacted]") {
				t.Fatalf("error does not describe the settings: %v", err)
			}
		})
	}
}

// The settings print without the password.
func TestSecurityStringRedactsPassword(t *testing.T) {
	s := kafka.Security{TLS: true, SASLMechanism: kafka.SASLScramSHA512, User: "u", Password: "hunter2"}
	got := s.String()
	if strings.Contains(got, "hunter2") || !strings.Contains(got, "user=u") || !strings.Contains(got, "[redacted]") {
		t.Fatalf("String() = %q", got)
	}
	if got := fmt.Sprint(kafka.Conn{Brokers: []string{"b:9092"}, Security: s}); strings.Contains(got, "hunter2") {
		t.Fatalf("Conn prints the password: %q", got)
	}
}

// Settings that cannot work are refused before any connection.
func TestSecurityValidate(t *testing.T) {
	files := kafkatest.NewTLSFiles(t)
	cases := []struct {
		name string
		sec  kafka.Security
		ok   bool
	}{
		{"none", kafka.Security{}, true},
		{"tls with system roots", kafka.Security{TLS: true}, true},
		{"scram", kafka.Security{SASLMechanism: kafka.SASLScramSHA256, User: "u", Password: "p"}, true},
		{"mutual tls", kafka.Security{CAFile: files.CA, CertFile: files.Cert, KeyFile: files.Key}, true},
		{"unknown mechanism", kafka.Security{SASLMechanism: "GSSAPI", User: "u", Password: "p"}, false},
		{"mechanism without password", kafka.Security{SASLMechanism: kafka.SASLPlain, User: "u"}, false},
		{"password without mechanism", kafka.Security{User: "u", Password: "p"}, false},
		{"cert without key", kafka.Security{CertFile: files.Cert}, false},
		{"missing CA file", kafka.Security{CAFile: files.CA + ".missing"}, false},
		{"CA file not PEM", kafka.Security{CAFile: files.Key + "x"}, false},
	}
	for _, c := range cases {
		if err := c.sec.Validate(); (err == nil) != c.ok {
			t.Errorf("%s: Validate() = %v", c.name, err)
		}
	}
}

// Several brokers: the partitions' leaders spread over them, and messages
// published through any of them are consumed in full. kfake picks each
// partition's leader at random: with 24 partitions all on one of the 3
// brokers has odds of 3^-23, where 6 partitions made it 1 in 243.
func TestMultiBroker(t *testing.T) {
	t.Parallel()
	b := kafkatest.StartWith(t, kafka.EmbeddedConfig{Brokers: 3})
	if got := len(b.Addrs()); got != 3 {
		t.Fatalf("%d broker addresses, want 3", got)
	}
	topic := b.Topic(t, 24)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cl, err := b.Conn().NewClient()
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	md, err := kadm.NewClient(cl).Metadata(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	if len(md.Brokers) != 3 {
		t.Fatalf("metadata lists %d brokers, want 3", len(md.Brokers))
	}
	leaders := map[int32]bool{}
	for _, p := range md.Topics[topic].Partitions {
		leaders[p.Leader] = true
	}
	if len(leaders) < 2 {
		t.Fatalf("all partitions led by %v", leaders)
	}
	const n = 60
	var msgs []*message.Message
	for i := 0; i < n; i++ {
		m := message.NewMessage(strconv.Itoa(i), []byte(strconv.Itoa(i)))
		m.Metadata.Set(kafka.MetaPartitionKey, strconv.Itoa(i))
		msgs = append(msgs, m)
	}
	b.Publish(t, topic, msgs...)
	consumeAll(ctx, t, b.Conn(), topic, n)
}

// consumeAll reads topic through a subscriber of a fresh group until n
// distinct messages arrived, failing when ctx ends first.
func consumeAll(ctx context.Context, t *testing.T, conn kafka.Conn, topic string, n int) {
	t.Helper()
	sub, err := kafka.NewSubscriber(conn, "g-"+topic, watermill.NopLogger{})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	ch, err := sub.Subscribe(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for len(seen) < n {
		select {
		case m := <-ch:
			seen[m.UUID] = true
			m.Ack()
		case <-ctx.Done():
			t.Fatalf("consumed %d of %d messages", len(seen), n)
		}
	}
}
