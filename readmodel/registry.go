package readmodel

import (
	"context"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"
)

// Registry is the projection version registry, `projection:versions` (a
// hash: field = projection name, value = its active version, a cache of
// projection_versions in PostgreSQL that LiveVersions restores when a field
// is missing or differs; plus a dirty field per projection while keys of
// another version may exist), and the rebuild status hash, `projection:rebuild`, that a
// running `feed rebuild` describes itself in for `feed status` (the lock
// itself is in PostgreSQL, see docs/rebuild.md). Neither is versioned.
type Registry struct{ keys Keys }

// NewRegistry returns the registry operations under the namespace prefix.
func NewRegistry(prefix string) Registry { return Registry{keys: Keys{Prefix: prefix}} }

// Cached reads the versions the registry holds, for `feed status` and
// tests: a projection without a field is 0 in the result (never 1: the
// truth is in PostgreSQL, LoadVersions).
func (r Registry) Cached(ctx context.Context, rdb redis.Cmdable) (Versions, error) {
	return r.cached(ctx, rdb)
}

func (r Registry) cached(ctx context.Context, rdb redis.Cmdable) (Versions, error) {
	v, _, err := r.cachedAll(ctx, rdb)
	return v, err
}

// LostField is the registry field that records the version of projection
// whose keys Redis lost under a running system (emptied, or restarted
// without its data: LiveVersions found the registry gone while the event
// log has events). Read models that cannot tell a lost key from one never
// written (counts, the viewer's likes and reposts, an original's reposts)
// are then not trusted at that version: the query side asks PostgreSQL
// instead until `feed rebuild` moves the projection to a new version.
func LostField(projection string) string { return "lost:" + projection }

// MarkLost records that projection's keys at version were lost.
func (r Registry) MarkLost(ctx context.Context, rdb redis.Cmdable, projection string, version int) error {
	return rdb.HSet(ctx, r.keys.VersionsKey(), LostField(projection), version).Err()
}

// cachedAll is cached with the lost versions by projection (LostField).
func (r Registry) cachedAll(ctx context.Context, rdb redis.Cmdable) (Versions, map[string]int, error) {
	m, err := rdb.HGetAll(ctx, r.keys.VersionsKey()).Result()
	if err != nil {
		return Versions{}, nil, fmt.Errorf("read projection version registry: %w", err)
	}
	var lost map[string]int
	for _, p := range Projections() {
		if s, ok := m[LostField(p)]; ok {
			if n, err := strconv.Atoi(s); err == nil {
				if lost == nil {
					lost = map[string]int{}
				}
				lost[p] = n
			}
		}
	}
	var v Versions
	for _, p := range Projections() {
		s, ok := m[p]
		if !ok {
			continue
		}
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			// Unreadable: treated as missing, so it is restored.
			continue
		}
		v = v.With(p, n)
	}
	return v, lost, nil
}

// restoreScript sets each field (ARGV: field, expected, value, ...) to its
// value only if it still holds expected ("" for absent): a reader that
// restores the registry from a read of PostgreSQL never overwrites a newer
// value a switch wrote meanwhile. Returns the fields written.
var restoreScript = redis.NewScript(`
local n = 0
for i = 1, #ARGV, 3 do
  local cur = redis.call('HGET', KEYS[1], ARGV[i])
  if (cur == false and ARGV[i+1] == '') or cur == ARGV[i+1] then
    redis.call('HSET', KEYS[1], ARGV[i], ARGV[i+2])
    n = n + 1
  end
end
return n
`)

// restore rewrites the registry fields where cached (what it held) differs
// from truth (PostgreSQL's versions), each only if it is still what cached
// says. It reports whether it wrote any.
func (r Registry) restore(ctx context.Context, rdb redis.Scripter, cached, truth Versions) (bool, error) {
	var args []any
	for _, p := range Projections() {
		c, t := cached.Get(p), truth.Get(p)
		if c == t {
			continue
		}
		expected := ""
		if c > 0 {
			expected = strconv.Itoa(c)
		}
		args = append(args, p, expected, strconv.Itoa(t))
	}
	if len(args) == 0 {
		return false, nil
	}
	n, err := restoreScript.Run(ctx, rdb, []string{r.keys.VersionsKey()}, args...).Int()
	if err != nil {
		return false, fmt.Errorf("restore projection version registry: %w", err)
	}
	return n > 0, nil
}

// Dirty reports whether keys of projection other than its active version
// may exist (a rebuild started and has not cleaned up).
func (r Registry) Dirty(ctx context.Context, rdb redis.Cmdable, projection string) (bool, error) {
	ok, err := rdb.HExists(ctx, r.keys.VersionsKey(), DirtyField(projection)).Result()
	if err != nil {
		return false, fmt.Errorf("read registry: %w", err)
	}
	return ok, nil
}

// DirtyAll reports Dirty for every projection, in one read.
func (r Registry) DirtyAll(ctx context.Context, rdb redis.Cmdable) (map[string]bool, error) {
	reg, err := rdb.HGetAll(ctx, r.keys.VersionsKey()).Result()
	if err != nil {
		return nil, fmt.Errorf("read registry: %w", err)
	}
	out := make(map[string]bool, len(Projections()))
	for _, p := range Projections() {
		_, out[p] = reg[DirtyField(p)]
	}
	return out, nil
}

// MarkDirty records that keys of projection at version may exist besides
// the active version's.
func (r Registry) MarkDirty(ctx context.Context, rdb redis.Cmdable, projection string, version int) error {
	return rdb.HSet(ctx, r.keys.VersionsKey(), DirtyField(projection), version).Err()
}

// ClearDirty records that only the active version's keys of projection
// exist.
func (r Registry) ClearDirty(ctx context.Context, rdb redis.Cmdable, projection string) error {
	return rdb.HDel(ctx, r.keys.VersionsKey(), DirtyField(projection)).Err()
}

// Activate mirrors a switch of projection to version into the registry:
// one HSET, after ActivateVersion committed it in PostgreSQL. The query
// side's LiveVersions and the projectors' Supervisor see the registry
// change and follow PostgreSQL's version.
func (r Registry) Activate(ctx context.Context, rdb redis.Cmdable, projection string, version int) error {
	return r.ActivateAll(ctx, rdb, Switch{Projection: projection, To: version})
}

// ActivateAll mirrors the switches ActivateVersions committed together:
// one HSET of every projection's field, so a reader of the registry sees
// all the new versions or none (and LiveVersions then loads them from
// PostgreSQL, where they were committed in one transaction).
func (r Registry) ActivateAll(ctx context.Context, rdb redis.Cmdable, sw ...Switch) error {
	fields := make([]any, 0, 2*len(sw))
	for _, s := range sw {
		fields = append(fields, s.Projection, s.To)
	}
	return rdb.HSet(ctx, r.keys.VersionsKey(), fields...).Err()
}

// RebuildInfo reads what the running rebuild says about itself
// (projection, version, phase, started, updated).
func (r Registry) RebuildInfo(ctx context.Context, rdb redis.Cmdable) (map[string]string, error) {
	return rdb.HGetAll(ctx, r.keys.RebuildKey()).Result()
}

// SetRebuildInfo records fields (name, value, ...) of the running
// rebuild's self-description.
func (r Registry) SetRebuildInfo(ctx context.Context, rdb redis.Cmdable, fields ...any) error {
	return rdb.HSet(ctx, r.keys.RebuildKey(), fields...).Err()
}

// ClearRebuildInfo deletes the self-description when the rebuild ends.
func (r Registry) ClearRebuildInfo(ctx context.Context, rdb redis.Cmdable) error {
	return rdb.Del(ctx, r.keys.RebuildKey()).Err()
}

// Sweep deletes every key of projection whose version is not keep: SCAN
// of the namespace on every node (every master of a cluster: eachNode),
// Classify (which tells `feed:{` from `v2:feed:{`), and UNLINK in batches
// of 1000: one command on a single node, one per key in a pipeline on a
// cluster (the keys of a batch are of many slots).
func (r Registry) Sweep(ctx context.Context, rdb redis.UniversalClient, projection string, keep int) error {
	cluster := IsCluster(rdb)
	return eachNode(ctx, rdb, func(ctx context.Context, node redis.UniversalClient) error {
		var cursor uint64
		batch := make([]string, 0, 1000)
		flush := func() error {
			if len(batch) == 0 {
				return nil
			}
			var err error
			if cluster {
				pipe := node.Pipeline()
				for _, k := range batch {
					pipe.Unlink(ctx, k)
				}
				_, err = pipe.Exec(ctx)
			} else {
				err = node.Unlink(ctx, batch...).Err()
			}
			if err != nil {
				return fmt.Errorf("delete old keys of %s: %w", projection, err)
			}
			batch = batch[:0]
			return nil
		}
		for {
			keys, next, err := node.Scan(ctx, cursor, r.keys.Pattern(), 5000).Result()
			if err != nil {
				return fmt.Errorf("scan keys of %s: %w", projection, err)
			}
			for _, k := range keys {
				if p, v, ok := r.keys.Classify(k); ok && p == projection && v != keep {
					batch = append(batch, k)
					if len(batch) == cap(batch) {
						if err := flush(); err != nil {
							return err
						}
					}
				}
			}
			if cursor = next; cursor == 0 {
				return flush()
			}
		}
	})
}

// escapeGlob quotes the glob characters of a SCAN MATCH pattern.
func escapeGlob(s string) string {
	var b []byte
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '*', '?', '[', ']', '\\':
			b = append(b, '\\')
		}
		b = append(b, s[i])
	}
	return string(b)
}
