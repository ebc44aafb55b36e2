package main

import (
	"bytes"
	"context"
	"net/netip"
	"slices"
	"strings"
	"testing"
)

// Trusted-header mode starts only when the API can tell the gateway's
// requests from anyone else's: a loopback HTTP_ADDR, a gateway secret or
// trusted networks. Else `feed api` and `feed dev` refuse to start with a
// usage error, before connecting to anything.
func TestTrustedHeaderRefusal(t *testing.T) {
	for _, tc := range []struct {
		name, addr, secret, networks string
		ok                           bool
	}{
		{"loopback v4", "127.0.0.1:8080", "", "", true},
		{"loopback v4 range", "127.1.2.3:8080", "", "", true},
		{"loopback v6", "[::1]:8080", "", "", true},
		{"localhost", "localhost:8080", "", "", true},
		{"every interface", ":8080", "", "", false},
		{"every v4 interface", "0.0.0.0:8080", "", "", false},
		{"every v6 interface", "[::]:8080", "", "", false},
		{"a public address", "192.0.2.7:8080", "", "", false},
		{"every interface with a secret", "0.0.0.0:8080", "0123456789abcdef-gateway", "", true},
		{"every interface with networks", "0.0.0.0:8080", "", "10.0.0.0/8, 192.168.1.0/24", true},
		{"a short secret", "127.0.0.1:8080", "short", "", false},
		{"a bad network", "0.0.0.0:8080", "", "10.0.0.0/33", false},
		{"a bad network address", "0.0.0.0:8080", "", "gateway.internal", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("FEED_AUTH", "trusted-header")
			t.Setenv("HTTP_ADDR", tc.addr)
			t.Setenv("FEED_GATEWAY_SECRET", tc.secret)
			t.Setenv("FEED_TRUSTED_NETWORKS", tc.networks)
			_, err := LoadConfig()
			if (err == nil) != tc.ok {
				t.Fatalf("LoadConfig: %v; want ok %v", err, tc.ok)
			}
			if tc.ok {
				return
			}
			for _, cmd := range []string{"api", "dev"} {
				var out, errb bytes.Buffer
				code := execute(context.Background(), []string{cmd}, &out, &errb, LoadConfig)
				if code != exitUsage || !strings.HasPrefix(errb.String(), "feed "+cmd+": ") || !strings.Contains(errb.String(), "Run 'feed "+cmd+" --help'") {
					t.Errorf("feed %s: exit %d, stderr %q; want %d and a usage error", cmd, code, errb.String(), exitUsage)
				}
			}
		})
	}
	// The refusal says what to do.
	t.Setenv("FEED_AUTH", "trusted-header")
	t.Setenv("HTTP_ADDR", "0.0.0.0:8080")
	_, err := LoadConfig()
	if err == nil || !strings.Contains(err.Error(), "FEED_GATEWAY_SECRET") || !strings.Contains(err.Error(), "FEED_TRUSTED_NETWORKS") {
		t.Fatalf("refusal %v: want it to name FEED_GATEWAY_SECRET and FEED_TRUSTED_NETWORKS", err)
	}
	// JWT mode does not care where it listens.
	t.Setenv("FEED_AUTH", "jwt")
	if _, err := LoadConfig(); err != nil {
		t.Fatalf("jwt on 0.0.0.0: %v", err)
	}
}

func TestParseNetworks(t *testing.T) {
	got, err := parseNetworks(" 10.1.2.3/8,192.168.1.0/24,,203.0.113.9, ::ffff:198.51.100.1, 2001:db8::/32")
	if err != nil {
		t.Fatal(err)
	}
	want := []netip.Prefix{
		netip.MustParsePrefix("10.0.0.0/8"),
		netip.MustParsePrefix("192.168.1.0/24"),
		netip.MustParsePrefix("203.0.113.9/32"),
		netip.MustParsePrefix("198.51.100.1/32"),
		netip.MustParsePrefix("2001:db8::/32"),
	}
	if !slices.Equal(got, want) {
		t.Fatalf("parseNetworks: %v, want %v", got, want)
	}
	if got, err := parseNetworks(""); err != nil || got != nil {
		t.Fatalf("empty: %v %v", got, err)
	}
}
