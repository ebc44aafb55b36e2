package main

import (
	"context"
	"fmt"
	"time"

	"github.com/feedco/feed/migrations"
)

func init() {
	register("migrate", "apply the embedded database migrations", runMigrate)
}

func runMigrate(ctx context.Context, args []string) error {
	if len(args) > 0 {
		return usageError{"migrate takes no arguments"}
	}
	cfg, err := LoadConfig()
	if err != nil {
		return usageError{err.Error()}
	}
	pool, err := openPostgres(ctx, cfg, 2, true)
	if err != nil {
		return err
	}
	defer pool.Close()
	mctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	applied, err := migrations.Up(mctx, pool)
	if err != nil {
		return err
	}
	if len(applied) == 0 {
		fmt.Println("migrate: schema is up to date")
	}
	for _, v := range applied {
		fmt.Printf("migrate: applied %03d\n", v)
	}
	return nil
}
