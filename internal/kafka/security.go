package kafka

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"
)

// SASL mechanisms Security accepts.
const (
	SASLPlain       = "PLAIN"
	SASLScramSHA256 = "SCRAM-SHA-256"
	SASLScramSHA512 = "SCRAM-SHA-512"
)

// Security is how every Kafka client of the project authenticates and
// encrypts: the sarama publisher and subscribers and every franz-go client
// are built from the same value (SaramaConfig, KgoOpts), so a managed
// Kafka is reached by all of them or by none.
type Security struct {
	// TLS turns TLS on; it is implied by CAFile, CertFile and
	// InsecureSkipVerify. Without CAFile the system roots verify the broker.
	TLS bool
	// CAFile is a PEM bundle of the CAs that sign the brokers' certificates.
	CAFile string
	// CertFile and KeyFile are the client certificate and key (mutual TLS),
	// both or neither.
	CertFile, KeyFile string
	// ServerName overrides the name checked in the brokers' certificates.
	ServerName string
	// InsecureSkipVerifyBrokerCert accepts any broker certificate: for a
	// test broker only, never a real one.
	InsecureSkipVerifyBrokerCert bool
	// SASLMechanism is empty (no SASL), PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512.
	SASLMechanism string
	User          string
	Password      string
}

// TLSEnabled says whether clients speak TLS.
func (s Security) TLSEnabled() bool {
	return s.TLS || s.CAFile != "" || s.CertFile != "" || s.InsecureSkipVerifyBrokerCert
}

// Validate reports the first setting that cannot work, reading the TLS files.
func (s Security) Validate() error {
	switch s.SASLMechanism {
	case "":
		if s.User != "" || s.Password != "" {
			return errors.New("kafka SASL user or password set without a mechanism (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512)")
		}
	case SASLPlain, SASLScramSHA256, SASLScramSHA512:
		if s.User == "" || s.Password == "" {
			return fmt.Errorf("kafka SASL %s needs a user and a password", s.SASLMechanism)
		}
	default:
		return fmt.Errorf("kafka SASL mechanism %q: want PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512", s.SASLMechanism)
	}
	if (s.CertFile == "") != (s.KeyFile == "") {
		return errors.New("kafka TLS client certificate and key go together: set both or neither")
	}
	_, err := s.TLSConfig()
	return err
}

// String describes the settings with the password redacted, for logs and
// error messages.
func (s Security) String() string {
	var parts []string
	if s.TLSEnabled() {
		t := "tls"
		if s.CAFile != "" {
			t += " ca=" + s.CAFile
		}
		if s.CertFile != "" {
			t += " cert=" + s.CertFile
		}
		if s.ServerName != "" {
			t += " server-name=" + s.ServerName
		}
		if s.InsecureSkipVerifyBrokerCert {
			t += " INSECURE-skip-verify"
		}
		parts = append(parts, t)
	}
	if s.SASLMechanism != "" {
		parts = append(parts, "sasl "+s.SASLMechanism+" user="+s.User+" password=[redacted]")
	}
	if len(parts) == 0 {
		return "plaintext"
	}
	return strings.Join(parts, ", ")
}

// TLSConfig is the client TLS configuration, or nil when TLS is off.
func (s Security) TLSConfig() (*tls.Config, error) {
	if !s.TLSEnabled() {
		return nil, nil
	}
	c := &tls.Config{
		MinVersion:         tls.VersionTLS12,
		ServerName:         s.ServerName,
		InsecureSkipVerify: s.InsecureSkipVerifyBrokerCert, //nolint:gosec // named and documented as test-only
	}
	if s.CAFile != "" {
		pem, err := os.ReadFile(s.CAFile)
		if err != nil {
			return nil, fmt.Errorf("read kafka TLS CA file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("kafka TLS CA file %s: no PEM certificate in it", s.CAFile)
		}
		c.RootCAs = pool
	}
	if s.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(s.CertFile, s.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("load kafka TLS client certificate: %w", err)
		}
		c.Certificates = []tls.Certificate{cert}
	}
	return c, nil
}

// mechanism is the franz-go SASL mechanism, or nil without SASL.
func (s Security) mechanism() sasl.Mechanism {
	switch s.SASLMechanism {
	case SASLPlain:
		return plain.Auth{User: s.User, Pass: s.Password}.AsMechanism()
	case SASLScramSHA256:
		return scram.Auth{User: s.User, Pass: s.Password}.AsSha256Mechanism()
	case SASLScramSHA512:
		return scram.Auth{User: s.User, Pass: s.Password}.AsSha512Mechanism()
	}
	return nil
}

// KgoOpts are the franz-go client options that apply s.
func (s Security) KgoOpts() ([]kgo.Opt, error) {
	var opts []kgo.Opt
	tc, err := s.TLSConfig()
	if err != nil {
		return nil, err
	}
	if tc != nil {
		opts = append(opts, kgo.DialTLSConfig(tc))
	}
	if m := s.mechanism(); m != nil {
		opts = append(opts, kgo.SASL(m))
	}
	return opts, nil
}

// ApplySarama sets s on a sarama configuration.
func (s Security) ApplySarama(c *sarama.Config) error {
	tc, err := s.TLSConfig()
	if err != nil {
		return err
	}
	if tc != nil {
		c.Net.TLS.Enable = true
		c.Net.TLS.Config = tc
	}
	if s.SASLMechanism == "" {
		return nil
	}
	c.Net.SASL.Enable = true
	c.Net.SASL.Handshake = true
	c.Net.SASL.User = s.User
	c.Net.SASL.Password = s.Password
	switch s.SASLMechanism {
	case SASLPlain:
		c.Net.SASL.Mechanism = sarama.SASLTypePlaintext
	case SASLScramSHA256:
		c.Net.SASL.Mechanism = sarama.SASLTypeSCRAMSHA256
		c.Net.SASL.SCRAMClientGeneratorFunc = func() sarama.SCRAMClient { return &scramClient{mech: s.mechanism()} }
	case SASLScramSHA512:
		c.Net.SASL.Mechanism = sarama.SASLTypeSCRAMSHA512
		c.Net.SASL.SCRAMClientGeneratorFunc = func() sarama.SCRAMClient { return &scramClient{mech: s.mechanism()} }
	}
	return nil
}

// scramClient drives franz-go's SCRAM implementation through sarama's
// SCRAMClient interface, so both client libraries share one SCRAM code path
// (the credentials are already in mech; Begin's are the same ones).
type scramClient struct {
	mech sasl.Mechanism
	sess sasl.Session
	done bool
}

func (c *scramClient) Begin(_, _, _ string) error { return nil }

func (c *scramClient) Step(challenge string) (string, error) {
	if c.sess == nil {
		sess, first, err := c.mech.Authenticate(context.Background(), "")
		if err != nil {
			return "", err
		}
		c.sess = sess
		return string(first), nil
	}
	done, msg, err := c.sess.Challenge([]byte(challenge))
	if err != nil {
		return "", err
	}
	c.done = done
	return string(msg), nil
}

func (c *scramClient) Done() bool { return c.done }

// Conn is where the brokers are and how to reach them: what every Kafka
// client of the project is built from.
type Conn struct {
	Brokers  []string
	Security Security
}

// String names the brokers and the security settings, never the password.
func (c Conn) String() string { return fmt.Sprintf("%v (%s)", c.Brokers, c.Security) }

// NewClient returns a franz-go client for c with opts added.
func (c Conn) NewClient(opts ...kgo.Opt) (*kgo.Client, error) {
	sec, err := c.Security.KgoOpts()
	if err != nil {
		return nil, err
	}
	all := append([]kgo.Opt{kgo.SeedBrokers(c.Brokers...)}, sec...)
	cl, err := kgo.NewClient(append(all, opts...)...)
	if err != nil {
		return nil, fmt.Errorf("connect to Kafka %s: %w", c, err)
	}
	return cl, nil
}

// CheckTimeout bounds Check while no broker answers (as long as topic
// creation waits at start-up).
const CheckTimeout = 30 * time.Second

// Check makes a metadata request to the brokers, retried within
// CheckTimeout only while no broker answers, so that a wrong address, CA or
// password stops a role at start-up with the cause named, instead of the
// retry loop the clients would otherwise sit in.
func (c Conn) Check(ctx context.Context) error {
	var hook saslHook
	cl, err := c.NewClient(kgo.RequestRetries(0), kgo.WithHooks(&hook))
	if err != nil {
		return err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(ctx, CheckTimeout)
	defer cancel()
	for {
		_, err := kmsg.NewPtrMetadataRequest().RequestWith(ctx, cl)
		if err == nil {
			return nil
		}
		if hook.failed.Load() {
			// Some brokers (kfake among them) close the connection on a
			// failed exchange instead of answering with the error code.
			err = fmt.Errorf("%w: %v", kerr.SaslAuthenticationFailed, err)
		}
		d := describe(err)
		if d != err || ctx.Err() != nil { // a named cause does not heal
			if ctx.Err() != nil {
				d = fmt.Errorf("%w (last error: %v)", describe(ctx.Err()), err)
			}
			return fmt.Errorf("kafka %s: %w", c, d)
		}
		select {
		case <-ctx.Done():
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// saslHook notes a SASL exchange that ended in a failed read.
type saslHook struct{ failed atomic.Bool }

// OnBrokerRead implements kgo.HookBrokerRead.
func (h *saslHook) OnBrokerRead(_ kgo.BrokerMetadata, key int16, _ int, _, _ time.Duration, err error) {
	if err != nil && key == kmsg.SASLAuthenticate.Int16() {
		h.failed.Store(true)
	}
}

// describe names the likely cause of a failed connection check.
func describe(err error) error {
	var unk x509.UnknownAuthorityError
	var host x509.HostnameError
	var inv x509.CertificateInvalidError
	var rec tls.RecordHeaderError
	s := err.Error()
	switch {
	case errors.As(err, &unk):
		return fmt.Errorf("TLS: the broker's certificate is not signed by the configured CA: %w", err)
	case errors.As(err, &host):
		return fmt.Errorf("TLS: the broker's certificate does not name this host (set the server name): %w", err)
	case errors.As(err, &inv):
		return fmt.Errorf("TLS: the broker's certificate is invalid: %w", err)
	case errors.As(err, new(*kgo.ErrFirstReadEOF)):
		return fmt.Errorf("the broker closed the connection at once (TLS or SASL on one side only?): %w", err)
	case errors.As(err, &rec):
		return fmt.Errorf("TLS: the broker does not speak TLS here: %w", err)
	case errors.Is(err, kerr.SaslAuthenticationFailed) || strings.Contains(s, "SASL_AUTHENTICATION_FAILED") || strings.Contains(s, "SaslAuthenticationFailed") || strings.Contains(s, "authentication failed"):
		return fmt.Errorf("SASL: authentication failed (wrong user, password or mechanism): %w", err)
	case strings.Contains(s, "UNSUPPORTED_SASL_MECHANISM") || strings.Contains(s, "ILLEGAL_SASL_STATE"):
		return fmt.Errorf("SASL: the broker does not accept this mechanism: %w", err)
	case errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("no answer within %v (a broker that needs TLS or SASL may drop a plaintext client): %w", CheckTimeout, err)
	}
	return err
}
