package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/feedco/feed/internal/auth"
)

func init() {
	register("token", "print a signed bearer token: feed token --user ID [--ttl 24h]", runToken)
}

func runToken(_ context.Context, args []string) error {
	fs := flag.NewFlagSet("token", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	user := fs.Int64("user", 0, "user id")
	ttl := fs.Duration("ttl", 24*time.Hour, "validity")
	if err := fs.Parse(args); err != nil {
		return usageError{err.Error()}
	}
	if *user <= 0 {
		return usageError{"--user ID is required (a positive integer)"}
	}
	if *ttl <= 0 {
		return usageError{"--ttl must be positive"}
	}
	cfg, err := LoadConfig()
	if err != nil {
		return usageError{err.Error()}
	}
	s, err := auth.NewSigner(cfg.JWTSecret)
	if err != nil {
		return usageError{err.Error()}
	}
	fmt.Println(s.Sign(*user, *ttl))
	return nil
}
