package readmodel

import (
	"context"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"
)

// luaSentinels writes the sentinel constants into a script's text as Lua
// string literals: scripts say $FLOOR and $BUILT, never the members
// themselves, so the Go constants are the only spelling.
var luaSentinels = strings.NewReplacer(
	"$FLOOR", "'"+SentinelFloor+"'",
	"$BUILT", "'"+SentinelBuilt+"'",
)

// lua is src with the sentinels written in (luaSentinels).
func lua(src string) string { return luaSentinels.Replace(src) }

// scripts are every script queued by SHA (EVALSHA) on a pipeline: Exec
// loads them all when the server does not know one.
var scripts = []*redis.Script{boundedAddScript, followerCountScript, followingScript, celebrityScript, editScript, newestScript, clearNewestScript, countsScript, blockFieldScript, addRepostScript}

// isNoScript reports whether Redis did not know a script's SHA.
func isNoScript(err error) bool {
	return err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT")
}

// Exec runs the commands fill queues in one pipeline. The first use of a
// script on a server (or after SCRIPT FLUSH) fails with NOSCRIPT: the
// scripts are then loaded and the whole pipeline run again, which is
// harmless because every operation of this package that a pipeline may
// hold is idempotent. fill may be called twice and must queue the same
// commands each time.
func Exec(ctx context.Context, rdb redis.UniversalClient, fill func(redis.Pipeliner)) error {
	return ExecWith(ctx, rdb, nil, fill)
}

// ExecWith is Exec for a pipeline that may also hold the scripts of an
// owner outside this package (homefeed's): on NOSCRIPT it loads those too.
func ExecWith(ctx context.Context, rdb redis.UniversalClient, more []*redis.Script, fill func(redis.Pipeliner)) error {
	pipe := rdb.Pipeline()
	fill(pipe)
	_, err := pipe.Exec(ctx)
	if err != nil && isNoScript(err) {
		if lerr := LoadScripts(ctx, rdb); lerr != nil {
			return lerr
		}
		for _, s := range more {
			if lerr := s.Load(ctx, rdb).Err(); lerr != nil {
				return fmt.Errorf("load script: %w", lerr)
			}
		}
		pipe = rdb.Pipeline()
		fill(pipe)
		_, err = pipe.Exec(ctx)
	}
	return err
}

// LoadScripts loads every script of this package into the servers' script
// caches (SCRIPT LOAD, which a cluster client sends to every node).
func LoadScripts(ctx context.Context, rdb redis.UniversalClient) error {
	for _, s := range scripts {
		if err := s.Load(ctx, rdb).Err(); err != nil {
			return fmt.Errorf("load script: %w", err)
		}
	}
	return nil
}
