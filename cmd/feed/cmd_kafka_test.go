package main

import (
	"bytes"
	"context"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/feedco/feed/internal/kafka"
	"github.com/feedco/feed/testkit/kafkatest"
	"github.com/feedco/feed/testkit/testenv"
)

// `feed kafka --brokers 3` with SASL and TLS runs three secured brokers;
// `feed events --source kafka` replays from them with the environment's
// settings, and stops at once, naming the cause, with a wrong password or
// a wrong CA.
func TestKafkaSecuredMultiBroker(t *testing.T) {
	t.Parallel()
	files := kafkatest.NewTLSFiles(t)
	other := kafkatest.NewTLSFiles(t)
	good := kafka.Security{CAFile: files.CA, SASLMechanism: kafka.SASLScramSHA512, User: "dev", Password: "dev-password"}
	var cfg Config
	// `--brokers 3` listens on three consecutive ports; another test may
	// take one of them between the probe and the start, so a start that
	// fails to bind tries other ports.
	for attempt := 0; ; attempt++ {
		cfg = Config{KafkaAddr: freeRun(t, 3), StateDir: t.TempDir(), Topic: "secured.events", Partitions: 3, KafkaSecurity: good}
		ctx, cancel := context.WithCancel(context.Background())
		errb := &syncBuffer{}
		done := make(chan int, 1)
		go func() {
			done <- execute(ctx, []string{"kafka", "--brokers", "3", "--sasl-user", "dev", "--sasl-password", "dev-password",
				"--tls-cert", files.Cert, "--tls-key", files.Key}, io.Discard, errb, func() (Config, error) { return cfg, nil })
		}()
		// The brokers are up once a secured client gets an answer (Check
		// waits while none answers).
		checked := make(chan error, 1)
		go func() { checked <- connOf(cfg).Check(ctx) }()
		select {
		case err := <-checked:
			if err != nil {
				cancel()
				t.Fatalf("feed kafka did not come up: %v\n%s", err, errb.String())
			}
			t.Cleanup(func() {
				cancel()
				if code := <-done; code != 0 {
					t.Errorf("feed kafka exited %d: %s", code, errb.String())
				}
			})
		case code := <-done:
			cancel()
			<-checked
			if attempt < 5 && strings.Contains(errb.String(), "address already in use") {
				continue
			}
			t.Fatalf("feed kafka exited %d: %s", code, errb.String())
		}
		break
	}
	cl, err := connOf(cfg).NewClient()
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	mctx, mcancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer mcancel()
	// The topics are created right after the brokers listen.
	var md kadm.Metadata
	testenv.Eventually(t, 30*time.Second, "topic "+cfg.Topic+" created", func() bool {
		md, err = kadm.NewClient(cl).Metadata(mctx, cfg.Topic)
		return err == nil && md.Topics[cfg.Topic].Err == nil
	})
	if len(md.Brokers) != 3 {
		t.Fatalf("%d brokers, want 3", len(md.Brokers))
	}
	if len(md.Topics[cfg.Topic].Partitions) != cfg.Partitions {
		t.Fatalf("topic %s: %+v, want %d partitions", cfg.Topic, md.Topics[cfg.Topic], cfg.Partitions)
	}

	replayWith := func(sec kafka.Security) (int, string) {
		c := cfg
		c.KafkaSecurity = sec
		code, _, stderr := runCLI(t, c, "events", "--source", "kafka")
		return code, stderr
	}
	if code, stderr := replayWith(good); code != 0 {
		t.Fatalf("replay with the right settings: exit %d: %s", code, stderr)
	}
	wrongPassword := good
	wrongPassword.Password = "wrong-password"
	wrongCA := good
	wrongCA.CAFile = other.CA
	for name, c := range map[string]struct {
		sec  kafka.Security
		want string
	}{
		"wrong password": {wrongPassword, "SASL: authentication failed"},
		"wrong CA":       {wrongCA, "not signed by the configured CA"},
	} {
		code, stderr := replayWith(c.sec)
		if code == 0 || !strings.Contains(stderr, c.want) {
			t.Errorf("%s: exit %d, stderr %q, want an error saying %q", name, code, stderr, c.want)
		}
		if strings.Contains(stderr, "wrong-password") || strings.Contains(stderr, "dev-password") {
			t.Errorf("%s: stderr shows the password: %s", name, stderr)
		}
		if strings.Contains(stderr, "no answer within") {
			t.Errorf("%s: the check waited for its timeout: %s", name, stderr)
		}
	}
}

// freeRun returns 127.0.0.1:P where P and the n-1 ports after it are free
// right now.
func freeRun(t *testing.T, n int) string {
	t.Helper()
	for i := 0; i < 100; i++ {
		first, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		base := first.Addr().(*net.TCPAddr).Port
		ls := []net.Listener{first}
		for p := base + 1; p < base+n; p++ {
			l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
			if err != nil {
				break
			}
			ls = append(ls, l)
		}
		for _, l := range ls {
			l.Close()
		}
		if len(ls) == n {
			return "127.0.0.1:" + strconv.Itoa(base)
		}
	}
	t.Fatalf("no %d consecutive free ports", n)
	return ""
}

// syncBuffer is a bytes.Buffer safe for a writer and a reader goroutine.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
