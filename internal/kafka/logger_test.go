package kafka

import (
	"bytes"
	"io"
	"log/slog"
	"strings"
	"testing"

	"github.com/ThreeDotsLabs/watermill"
)

// The gated logger logs what the adapter alone logs, at every level and
// through With: watermill's Info as Debug, Trace below Debug, errors as
// they are.
func TestLoggerGatesLikeTheAdapter(t *testing.T) {
	for _, level := range []slog.Level{watermill.LevelTrace, slog.LevelDebug, slog.LevelInfo, slog.LevelError} {
		var gated, plain bytes.Buffer
		opts := &slog.HandlerOptions{Level: level, ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey {
				return slog.Attr{}
			}
			return a
		}}
		loggers := []watermill.LoggerAdapter{
			Logger(slog.New(slog.NewTextHandler(&gated, opts))),
			PlainLogger(slog.New(slog.NewTextHandler(&plain, opts))),
		}
		for _, l := range loggers {
			l = l.With(watermill.LogFields{"subscriber": "s1"})
			l.Trace("trace", watermill.LogFields{"k": 1})
			l.Debug("debug", watermill.LogFields{"k": 2})
			l.Info("info", watermill.LogFields{"k": 3})
			l.Error("error", io.EOF, watermill.LogFields{"k": 4})
		}
		if gated.String() != plain.String() {
			t.Errorf("level %v: gated logged\n%s\nthe adapter alone\n%s", level, gated.String(), plain.String())
		}
		lines := strings.Count(plain.String(), "\n")
		want := map[slog.Level]int{watermill.LevelTrace: 4, slog.LevelDebug: 3, slog.LevelInfo: 1, slog.LevelError: 1}[level]
		if lines != want {
			t.Errorf("level %v: %d lines, want %d:\n%s", level, lines, want, plain.String())
		}
	}
}

// BenchmarkLoggerTrace is one of the router's per-message Trace calls at
// the Info level: the adapter alone against the gated logger.
//
//	go test -run '^$' -bench LoggerTrace -benchmem ./internal/kafka/
func BenchmarkLoggerTrace(b *testing.B) {
	l := slog.New(slog.NewTextHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelInfo}))
	for _, c := range []struct {
		name string
		l    watermill.LoggerAdapter
	}{{"adapter", PlainLogger(l)}, {"gated", Logger(l)}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				c.l.Trace("Received message", watermill.LogFields{"message_uuid": "0f3c", "topic": "feed.events", "handler": "inbox"})
			}
		})
	}
}
