package status

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/feedco/feed/cdc"
	"github.com/feedco/feed/internal/kafka"
	"github.com/feedco/feed/projections"
	"github.com/feedco/feed/rebuild"
	"github.com/feedco/feed/verify"
)

// Config is where the status is read from.
type Config struct {
	// Pool is the event log's database. Required.
	Pool *pgxpool.Pool
	// Redis holds the read models; nil with RedisErr saying why (the
	// sections that need it show that error).
	Redis    redis.UniversalClient
	RedisErr error
	// Kafka, Topic: the event topic (and its poison topic).
	Kafka kafka.Conn
	Topic string
	// Slot is CDC's replication slot.
	Slot string
	// GroupPrefix starts the projectors' consumer groups ("" in
	// production); Prefix is the read models' key namespace.
	GroupPrefix, Prefix string
	// LagWarnBytes is FEED_LAG_WARN_BYTES.
	LagWarnBytes int64
	// Timeout bounds each section (default 10 s).
	Timeout time.Duration
}

func (c Config) redis() (redis.UniversalClient, error) {
	if c.Redis != nil {
		return c.Redis, nil
	}
	return nil, cmp.Or(c.RedisErr, errors.New("no Redis configured"))
}

// Gather reads every section, at once.
func Gather(ctx context.Context, cfg Config) Report {
	r := Report{GeneratedAt: time.Now().UTC()}
	var wg sync.WaitGroup
	for _, f := range []func(){
		func() { r.CDC = GatherCDC(ctx, cfg) },
		func() { r.Projections = GatherProjections(ctx, cfg) },
		func() { r.Poison = GatherPoison(ctx, cfg) },
		func() { r.Verify = GatherVerify(ctx, cfg) },
		func() { r.Redis = GatherRedis(ctx, cfg) },
	} {
		wg.Go(f)
	}
	wg.Wait()
	return r
}

func (c Config) section(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, cmp.Or(c.Timeout, 10*time.Second))
}

// GatherCDC reads the slot's lag and CDC's progress.
func GatherCDC(ctx context.Context, cfg Config) CDC {
	ctx, cancel := cfg.section(ctx)
	defer cancel()
	out := CDC{Slot: cfg.Slot, Topic: cfg.Topic, LagWarnBytes: cfg.LagWarnBytes}
	st, err := cdc.Status(ctx, cfg.Pool, cfg.Slot)
	if err != nil {
		out.Error = err.Error()
		return out
	}
	out.Exists, out.Active = st.Exists, st.Active
	out.ConfirmedLSN, out.CurrentLSN = st.ConfirmedLSN, st.CurrentLSN
	out.LagBytes, out.LagSeconds, out.WALStatus = st.LagBytes, st.LagSeconds, st.WALStatus
	out.LagOverWarn = st.LagBytes > cfg.LagWarnBytes
	out.EventsPublished = st.EventsPublished
	out.ProgressSavedAt, out.NewestCommitAt = timePtr(st.UpdatedAt), timePtr(st.LastCommitAt)
	out.SlotLoss = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(st.SlotLossLine()), "slot loss"))
	out.SlotLosses, out.HealPending = st.SlotLosses, st.HealPending
	return out
}

func timePtr(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	t = t.UTC()
	return &t
}

// GatherProjections reads the active versions, their groups' lag and the
// running rebuild.
func GatherProjections(ctx context.Context, cfg Config) Projections {
	ctx, cancel := cfg.section(ctx)
	defer cancel()
	var out Projections
	rdb, err := cfg.redis()
	if err != nil {
		out.Error = err.Error()
		return out
	}
	rc := projections.RunnerConfig{Brokers: cfg.Kafka.Brokers, Security: cfg.Kafka.Security, Topic: cfg.Topic, GroupPrefix: cfg.GroupPrefix}
	st, err := rebuild.ReadStatus(ctx, cfg.Pool, rdb, rc, cfg.Prefix)
	if len(st.Projections) == 0 {
		out.Error = fmt.Sprintf("projection status: %v", err)
		return out
	}
	if err != nil {
		out.Error = fmt.Sprintf("projection lag: %v", err)
	}
	for _, p := range st.Projections {
		v := Projection{Name: p.Name, Version: p.Version, RegistryVersion: p.Cached, Group: p.Group, Dirty: p.Dirty,
			Policy: Policy{CelebrityThreshold: p.CelebrityThreshold, CelebrityBand: p.CelebrityBand, InboxMax: p.InboxMax, InboxLayout: p.InboxLayout}}
		if p.Lag >= 0 {
			lag := p.Lag
			v.Lag = &lag
		}
		out.Versions = append(out.Versions, v)
	}
	out.Rebuild.Running = st.Running
	if st.Running {
		out.Rebuild = rebuildOf(st.Info)
	}
	return out
}

// rebuildOf reads the running rebuild's self-description (readmodel's
// projection:rebuild hash).
func rebuildOf(info map[string]string) Rebuild {
	b := Rebuild{Running: true, Projection: info["projection"], Phase: info["phase"], Stage: info["stage"], Unit: info["unit"]}
	b.Version, _ = strconv.Atoi(info["version"])
	b.Done, _ = strconv.ParseInt(info["done"], 10, 64)
	b.Total, _ = strconv.ParseInt(info["total"], 10, 64)
	if lag, err := strconv.ParseInt(info["lag"], 10, 64); err == nil && lag >= 0 && b.Phase == "catch-up" {
		b.CatchUpLag = &lag
	}
	for _, f := range []struct {
		dst **time.Time
		key string
	}{{&b.Started, "started"}, {&b.Updated, "updated"}} {
		if t, err := time.Parse(time.RFC3339, info[f.key]); err == nil {
			*f.dst = timePtr(t)
		}
	}
	return b
}

// GatherPoison counts the poison queue's records per group and state.
func GatherPoison(ctx context.Context, cfg Config) Poison {
	ctx, cancel := cfg.section(ctx)
	defer cancel()
	out := Poison{Topic: kafka.PoisonTopic(cfg.Topic)}
	q, err := projections.NewPoisonQueue(cfg.Kafka, cfg.Topic, cfg.Pool)
	if err != nil {
		out.Error = err.Error()
		return out
	}
	counts, err := q.Counts(ctx)
	if err != nil {
		out.Error = err.Error()
		return out
	}
	out.Groups = []PoisonGroup{}
	for g, c := range counts {
		out.Groups = append(out.Groups, PoisonGroup{Group: g, Pending: c.Pending, Replayed: c.Replayed, Discarded: c.Discarded})
	}
	sort.Slice(out.Groups, func(i, j int) bool { return out.Groups[i].Group < out.Groups[j].Group })
	return out
}

// GatherVerify reads the last verification results.
func GatherVerify(ctx context.Context, cfg Config) Verify {
	ctx, cancel := cfg.section(ctx)
	defer cancel()
	out := Verify{Results: []VerifyResult{}}
	rs, err := verify.LastResults(ctx, cfg.Pool)
	if err != nil {
		out.Error = err.Error()
		return out
	}
	for _, r := range rs {
		out.Results = append(out.Results, VerifyResult{Source: r.Source, Result: r.Result, FinishedAt: r.FinishedAt.UTC(),
			TookSeconds: r.Took.Seconds(), Users: r.Users, Cold: r.Cold, Posts: r.Posts, Differences: r.Differences, Detail: r.Detail})
	}
	return out
}

// GatherRedis reads the figures of Redis's node, or of every master of a
// cluster, sorted by address.
func GatherRedis(ctx context.Context, cfg Config) Redis {
	ctx, cancel := cfg.section(ctx)
	defer cancel()
	out := Redis{Mode: "single"}
	rdb, err := cfg.redis()
	if err != nil {
		out.Error = err.Error()
		return out
	}
	var mu sync.Mutex
	read := func(ctx context.Context, c *redis.Client) error {
		n := RedisNode{Addr: c.Options().Addr}
		var err error
		if n.Keys, err = c.DBSize(ctx).Result(); err != nil {
			return err
		}
		info, err := c.Info(ctx, "memory", "stats").Result()
		if err != nil {
			return err
		}
		n.MemoryBytes = infoInt(info, "used_memory")
		n.Commands = infoInt(info, "total_commands_processed")
		mu.Lock()
		out.Nodes = append(out.Nodes, n)
		mu.Unlock()
		return nil
	}
	switch c := rdb.(type) {
	case *redis.ClusterClient:
		out.Mode = "cluster"
		err = c.ForEachMaster(ctx, read)
	case *redis.Client:
		err = read(ctx, c)
	default:
		err = fmt.Errorf("redis client %T: no per-node figures", rdb)
	}
	if err != nil {
		out.Error = err.Error()
	}
	sort.Slice(out.Nodes, func(i, j int) bool { return out.Nodes[i].Addr < out.Nodes[j].Addr })
	return out
}

// infoInt is field's integer in an INFO reply (0 when absent).
func infoInt(info, field string) int64 {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), field+":"); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	return 0
}
