package projections

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	wk "github.com/ThreeDotsLabs/watermill-kafka/v3/pkg/kafka"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/feedco/feed/events"
	"github.com/feedco/feed/internal/kafka"
	"github.com/feedco/feed/readmodel"
)

// The states of a poisoned record (PoisonEntry.State).
const (
	PoisonPending   = "pending"
	PoisonReplayed  = "replayed"
	PoisonDiscarded = "discarded"
)

// ErrPoisonNotFound means no record of the poison topic has the id asked for.
var ErrPoisonNotFound = errors.New("no such poisoned message")

// PoisonEntry is one record of the poison topic with what became of it.
type PoisonEntry struct {
	// ID is the record's place in the poison topic, "partition:offset":
	// unique and stable (an event poisoned in two groups is two entries).
	ID        string
	Partition int32
	Offset    int64
	// Group is the consumer group that could not handle the message.
	Group  string
	Reason string
	// Type, Key (the Kafka key: the audience owner) and Position are the
	// event's, from the record's metadata (Position 0 when it had none).
	Type     string
	Key      string
	Position int64
	// UUID is the original message's id (the event id for CDC's messages).
	UUID       string
	PoisonedAt time.Time
	Payload    []byte
	Metadata   map[string]string
	// State is PoisonPending, PoisonReplayed or PoisonDiscarded, and
	// ResolvedAt when it stopped being pending.
	State      string
	ResolvedAt time.Time
}

// PoisonCounts are one group's poisoned records by state.
type PoisonCounts struct {
	Pending, Replayed, Discarded int
}

// PoisonDB is what the poison queue needs of PostgreSQL: the resolutions
// table (migration 011) and the event log; *pgxpool.Pool has it.
type PoisonDB interface {
	Querier
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// PoisonQueue is the lifecycle of the poison topic (PoisonTopic of the
// event topic): list, show, replay, discard. The topic stays append-only
// and is read with a throwaway client (no consumer group, nothing
// committed); what became of each record is kept in PostgreSQL
// (poison_resolutions), keyed by the record's place in the topic.
type PoisonQueue struct {
	conn  kafka.Conn
	topic string // the event topic
	db    PoisonDB
	// afterApply, when set (tests), runs after a key's events were applied
	// and before they are recorded as replayed; an error stops there, as a
	// crash between the two steps would.
	afterApply func(key string) error
}

// NewPoisonQueue returns the poison queue of the event topic topic.
func NewPoisonQueue(conn kafka.Conn, topic string, db PoisonDB) (*PoisonQueue, error) {
	switch {
	case len(conn.Brokers) == 0:
		return nil, errors.New("poison queue: no Kafka brokers")
	case topic == "":
		return nil, errors.New("poison queue: no topic")
	case db == nil:
		return nil, errors.New("poison queue: nil PostgreSQL")
	}
	return &PoisonQueue{conn: conn, topic: topic, db: db}, nil
}

// Topic is the poison topic's name.
func (q *PoisonQueue) Topic() string { return kafka.PoisonTopic(q.topic) }

// ParsePoisonID parses an entry id, "partition:offset".
func ParsePoisonID(id string) (int32, int64, error) {
	p, o, ok := strings.Cut(id, ":")
	part, perr := strconv.ParseInt(p, 10, 32)
	off, oerr := strconv.ParseInt(o, 10, 64)
	if !ok || perr != nil || oerr != nil || part < 0 || off < 0 {
		return 0, 0, fmt.Errorf("poison id %q: want partition:offset, e.g. 0:17", id)
	}
	return int32(part), off, nil
}

func poisonID(part int32, off int64) string {
	return strconv.FormatInt(int64(part), 10) + ":" + strconv.FormatInt(off, 10)
}

// List returns the records of the poison topic in (partition, offset)
// order, of group only when it is not empty, with their states; pending
// ones only unless all.
func (q *PoisonQueue) List(ctx context.Context, group string, all bool) ([]PoisonEntry, error) {
	es, err := q.read(ctx)
	if err != nil {
		return nil, err
	}
	out := es[:0]
	for _, e := range es {
		if (group == "" || e.Group == group) && (all || e.State == PoisonPending) {
			out = append(out, e)
		}
	}
	return out, nil
}

// Get returns the record with id, in any state (ErrPoisonNotFound when
// there is none).
func (q *PoisonQueue) Get(ctx context.Context, id string) (PoisonEntry, error) {
	part, off, err := ParsePoisonID(id)
	if err != nil {
		return PoisonEntry{}, err
	}
	es, err := q.read(ctx)
	if err != nil {
		return PoisonEntry{}, err
	}
	for _, e := range es {
		if e.Partition == part && e.Offset == off {
			return e, nil
		}
	}
	return PoisonEntry{}, fmt.Errorf("%s in %s: %w", id, q.Topic(), ErrPoisonNotFound)
}

// Counts returns every group's records by state.
func (q *PoisonQueue) Counts(ctx context.Context) (map[string]PoisonCounts, error) {
	es, err := q.read(ctx)
	if err != nil {
		return nil, err
	}
	out := map[string]PoisonCounts{}
	for _, e := range es {
		c := out[e.Group]
		switch e.State {
		case PoisonReplayed:
			c.Replayed++
		case PoisonDiscarded:
			c.Discarded++
		default:
			c.Pending++
		}
		out[e.Group] = c
	}
	return out, nil
}

// read returns every record of the poison topic up to the end offsets of
// the moment, with their states. A topic that does not exist yet (nothing
// was ever poisoned) has none.
func (q *PoisonQueue) read(ctx context.Context) ([]PoisonEntry, error) {
	topic := q.Topic()
	cl, err := q.conn.NewClient()
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	ends, err := adm.ListEndOffsets(ctx, topic)
	if err == nil {
		err = ends.Error()
	}
	if errors.Is(err, kerr.UnknownTopicOrPartition) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list end offsets of %s: %w", topic, err)
	}
	starts, err := adm.ListStartOffsets(ctx, topic)
	if err == nil {
		err = starts.Error()
	}
	if err != nil {
		return nil, fmt.Errorf("list start offsets of %s: %w", topic, err)
	}
	want := map[int32]int64{}
	offsets := map[int32]kgo.Offset{}
	ends.Each(func(o kadm.ListedOffset) {
		from := int64(0)
		if s, ok := starts.Lookup(o.Topic, o.Partition); ok {
			from = s.Offset
		}
		if o.Offset > from {
			want[o.Partition] = o.Offset
			offsets[o.Partition] = kgo.NewOffset().At(from)
		}
	})
	var es []PoisonEntry
	if len(want) > 0 {
		rc, err := q.conn.NewClient(kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: offsets}),
			kgo.FetchMaxWait(200*time.Millisecond))
		if err != nil {
			return nil, err
		}
		defer rc.Close()
		for len(want) > 0 {
			fs := rc.PollFetches(ctx)
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			var ferr error
			fs.EachError(func(t string, p int32, err error) {
				ferr = cmp.Or(ferr, fmt.Errorf("fetch %s[%d]: %w", t, p, err))
			})
			if ferr != nil {
				return nil, ferr
			}
			fs.EachRecord(func(r *kgo.Record) {
				end, ok := want[r.Partition]
				if !ok || r.Offset >= end {
					return
				}
				es = append(es, entryOf(r))
				if r.Offset+1 >= end {
					delete(want, r.Partition)
				}
			})
		}
	}
	slices.SortFunc(es, func(a, b PoisonEntry) int {
		return cmp.Or(cmp.Compare(a.Partition, b.Partition), cmp.Compare(a.Offset, b.Offset))
	})
	if err := q.states(ctx, es); err != nil {
		return nil, err
	}
	return es, nil
}

// entryOf decodes a poison record (the message watermill published, with
// its metadata as headers).
func entryOf(r *kgo.Record) PoisonEntry {
	e := PoisonEntry{ID: poisonID(r.Partition, r.Offset), Partition: r.Partition, Offset: r.Offset,
		PoisonedAt: r.Timestamp.UTC(), Payload: r.Value, Metadata: map[string]string{}, State: PoisonPending,
		Key: string(r.Key)}
	for _, h := range r.Headers {
		if h.Key == wk.UUIDHeaderKey {
			e.UUID = string(h.Value)
			continue
		}
		e.Metadata[h.Key] = string(h.Value)
	}
	e.Group = e.Metadata[kafka.MetaPoisonGroup]
	e.Reason = e.Metadata[kafka.MetaPoisonReason]
	e.Type = e.Metadata[kafka.MetaName]
	e.Key = cmp.Or(e.Metadata[kafka.MetaPartitionKey], e.Key)
	e.Position, _ = strconv.ParseInt(e.Metadata[kafka.MetaPosition], 10, 64)
	return e
}

// states fills in the state of each entry from poison_resolutions.
func (q *PoisonQueue) states(ctx context.Context, es []PoisonEntry) error {
	if len(es) == 0 {
		return nil
	}
	rows, err := q.db.Query(ctx, `SELECT kafka_partition, kafka_offset, state, resolved_at
		FROM poison_resolutions WHERE topic = $1`, q.Topic())
	if err != nil {
		return fmt.Errorf("read poison resolutions: %w", err)
	}
	defer rows.Close()
	type place struct {
		p int32
		o int64
	}
	idx := make(map[place]int, len(es))
	for i, e := range es {
		idx[place{e.Partition, e.Offset}] = i
	}
	for rows.Next() {
		var (
			p     int32
			o     int64
			state string
			at    time.Time
		)
		if err := rows.Scan(&p, &o, &state, &at); err != nil {
			return fmt.Errorf("read poison resolutions: %w", err)
		}
		if i, ok := idx[place{p, o}]; ok {
			es[i].State, es[i].ResolvedAt = state, at.UTC()
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("read poison resolutions: %w", err)
	}
	return nil
}

// resolve records state for the entries es.
func (q *PoisonQueue) resolve(ctx context.Context, es []PoisonEntry, state string) error {
	for _, e := range es {
		if _, err := q.db.Exec(ctx, `INSERT INTO poison_resolutions (topic, kafka_partition, kafka_offset, consumer_group, state)
			VALUES ($1, $2, $3, $4, $5)
			ON CONFLICT (topic, kafka_partition, kafka_offset) DO UPDATE SET state = EXCLUDED.state, resolved_at = now()`,
			q.Topic(), e.Partition, e.Offset, e.Group, state); err != nil {
			return fmt.Errorf("record poison %s as %s: %w", e.ID, state, err)
		}
	}
	return nil
}

// PoisonSelect chooses the entries of a replay or a discard: one entry by
// ID (in any state), or the pending entries of Group, or with All every
// pending entry.
type PoisonSelect struct {
	Group string
	ID    string
	All   bool
}

func (s PoisonSelect) validate() error {
	if s.ID == "" && s.Group == "" && !s.All {
		return errors.New("poison: choose a group, an id, or all")
	}
	return nil
}

func (q *PoisonQueue) selectEntries(ctx context.Context, sel PoisonSelect) ([]PoisonEntry, error) {
	if err := sel.validate(); err != nil {
		return nil, err
	}
	if sel.ID != "" {
		e, err := q.Get(ctx, sel.ID)
		if err != nil {
			return nil, err
		}
		if sel.Group != "" && e.Group != sel.Group {
			return nil, fmt.Errorf("poison %s belongs to group %s, not %s", sel.ID, e.Group, sel.Group)
		}
		return []PoisonEntry{e}, nil
	}
	return q.List(ctx, sel.Group, false)
}

// Discard records the selected entries as discarded (they leave the
// pending list; the records stay in the topic) and returns them.
func (q *PoisonQueue) Discard(ctx context.Context, sel PoisonSelect) ([]PoisonEntry, error) {
	es, err := q.selectEntries(ctx, sel)
	if err != nil {
		return nil, err
	}
	return es, q.resolve(ctx, es, PoisonDiscarded)
}

// ReplayResult is what one key's replay did.
type ReplayResult struct {
	Group string
	Key   string
	// Entries are the poisoned records of the key in that group, replayed
	// together.
	Entries []PoisonEntry
	// Applied is how many events went through the projector: the first
	// poisoned one and every later event of the key in the event log.
	Applied int
	// Err is why the key was not replayed (its entries stay pending).
	Err error
}

// Replay puts the selected entries back into their groups' handling.
// projectorFor returns the projector that handles a group's messages (see
// ProjectorForGroup).
//
// Per group and Kafka key, the earliest poisoned event (by log position)
// is applied, then every later event of the same key from the event log
// (below the safe horizon, in position order, which is commit order for
// one key), the later poisoned ones among them: the read model ends as if
// the key's events had been handled in order, however far it moved on
// meanwhile (a replayed post whose deletion was handled already is
// removed again by the deletion). Projectors are idempotent under
// redelivery, so the re-applied events change nothing else, and a replay
// is safe to repeat, also after a crash between applying and recording.
// The suffix is read again until a pass finds nothing new, so events the
// running projector handled meanwhile are applied after the replayed one
// too. A key whose events fail stays pending with its error in its
// result; the others go on.
func (q *PoisonQueue) Replay(ctx context.Context, sel PoisonSelect, projectorFor func(ctx context.Context, group string) (Projector, error)) ([]ReplayResult, error) {
	es, err := q.selectEntries(ctx, sel)
	if err != nil {
		return nil, err
	}
	type gk struct{ group, key string }
	byKey := map[gk][]PoisonEntry{}
	var order []gk
	for _, e := range es {
		k := gk{e.Group, e.Key}
		if _, ok := byKey[k]; !ok {
			order = append(order, k)
		}
		byKey[k] = append(byKey[k], e)
	}
	projectors := map[string]Projector{}
	var out []ReplayResult
	for _, k := range order {
		res := ReplayResult{Group: k.group, Key: k.key, Entries: byKey[k]}
		p, ok := projectors[k.group]
		if !ok {
			if p, err = projectorFor(ctx, k.group); err != nil {
				if ctx.Err() != nil {
					return out, ctx.Err()
				}
				res.Err = err
				out = append(out, res)
				continue
			}
			projectors[k.group] = p
		}
		res.Applied, res.Err = q.replayKey(ctx, p, res.Entries)
		if res.Err == nil && q.afterApply != nil {
			res.Err = q.afterApply(k.key)
		}
		if res.Err == nil {
			res.Err = q.resolve(ctx, res.Entries, PoisonReplayed)
		}
		if ctx.Err() != nil {
			return append(out, res), ctx.Err()
		}
		out = append(out, res)
	}
	return out, nil
}

// replayKey applies the earliest of es (one group's entries of one key)
// and then every later event of the key in the log.
func (q *PoisonQueue) replayKey(ctx context.Context, p Projector, es []PoisonEntry) (int, error) {
	slices.SortFunc(es, func(a, b PoisonEntry) int {
		return cmp.Or(cmp.Compare(a.Position, b.Position), cmp.Compare(a.Partition, b.Partition), cmp.Compare(a.Offset, b.Offset))
	})
	first := es[0]
	env, ev, err := events.DefaultCodec.DecodeEnvelopeJSON(first.Type, first.Payload)
	if err != nil {
		return 0, fmt.Errorf("decode %s: %v (a binary that knows it can replay it; else discard it)", first.ID, err)
	}
	key, err := strconv.ParseInt(first.Key, 10, 64)
	if err != nil || env.Position <= 0 {
		return 0, fmt.Errorf("%s carries no key or log position: replay by hand, or discard it", first.ID)
	}
	if err := p.Apply(ctx, env, ev); err != nil {
		return 0, fmt.Errorf("apply %s (%s %s): %w", first.ID, env.Type, env.EventID, err)
	}
	applied := 1
	after := env.Position
	for pass := 0; pass < 3; pass++ {
		n, last, err := q.applySuffix(ctx, p, key, after)
		applied += n
		if err != nil {
			return applied, err
		}
		if n == 0 {
			break
		}
		after = last
	}
	return applied, nil
}

// applySuffix applies, in position order, every event of audience key key
// above position after whose transaction (and every older one) has
// finished, and returns how many and the last position applied.
func (q *PoisonQueue) applySuffix(ctx context.Context, p Projector, key, after int64) (int, int64, error) {
	x, err := q.horizon(ctx)
	if err != nil {
		return 0, after, err
	}
	n := 0
	for {
		rows, err := q.db.Query(ctx, `SELECT position, event_id::text, stream_id, stream_version, type, payload::text,
			coalesce(metadata->>'correlationId', ''), coalesce(metadata->>'causationId', ''),
			coalesce(metadata->>'actor', ''), recorded_at
			FROM events WHERE position > $1 AND tx_id < $2::text::xid8 ORDER BY position LIMIT 5000`, after, x)
		if err != nil {
			return n, after, fmt.Errorf("read events: %w", err)
		}
		var batch []events.Envelope
		read := 0
		for rows.Next() {
			var e events.Envelope
			var payload string
			if err := rows.Scan(&e.Position, &e.EventID, &e.StreamID, &e.StreamVersion, &e.Type, &payload,
				&e.Metadata.CorrelationID, &e.Metadata.CausationID, &e.Metadata.Actor, &e.RecordedAt); err != nil {
				rows.Close()
				return n, after, fmt.Errorf("read events: %w", err)
			}
			read++
			after = e.Position
			e.Payload = []byte(payload)
			e.RecordedAt = e.RecordedAt.UTC()
			k, err := events.DefaultCodec.AudienceKeyOf(e.Type, e.Payload)
			if err != nil {
				// CDC cannot key it either: it is no event of this key.
				continue
			}
			if k == key {
				e.AudienceKey = k
				batch = append(batch, e)
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return n, after, fmt.Errorf("read events: %w", err)
		}
		for _, e := range batch {
			ev, err := events.DefaultCodec.DecodeEnvelope(e)
			if err != nil {
				return n, after, fmt.Errorf("decode event %d (%s) of key %d: %w", e.Position, e.Type, key, err)
			}
			if err := p.Apply(ctx, e, ev); err != nil {
				return n, after, fmt.Errorf("apply event %d (%s) of key %d: %w", e.Position, e.Type, key, err)
			}
			n++
		}
		if read < 5000 {
			return n, after, nil
		}
	}
}

// horizon returns the id the next transaction gets (the snapshot's xmax)
// once every transaction below it has finished: every event committed
// before the call has a tx_id below it, and no event below it is still to
// come. The wait is normally milliseconds (the horizon is cluster-wide:
// a long transaction in another database delays it too).
func (q *PoisonQueue) horizon(ctx context.Context) (string, error) {
	var target uint64
	if err := q.db.QueryRow(ctx, `SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint`).Scan(&target); err != nil {
		return "", fmt.Errorf("read snapshot: %w", err)
	}
	for wait := 5 * time.Millisecond; ; wait = min(wait*2, 200*time.Millisecond) {
		var xmin uint64
		if err := q.db.QueryRow(ctx, `SELECT pg_snapshot_xmin(pg_current_snapshot())::text::bigint`).Scan(&xmin); err != nil {
			return "", fmt.Errorf("read snapshot horizon: %w", err)
		}
		if xmin >= target {
			return strconv.FormatUint(target, 10), nil
		}
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(wait):
		}
	}
}

// ParseGroup splits a consumer group name made by GroupFor (after prefix)
// into its projector and version.
func ParseGroup(prefix, group string) (name string, version int, err error) {
	rest, ok := strings.CutPrefix(group, prefix+"feed.projection.")
	if ok {
		n, v, ok2 := strings.Cut(rest, ".v")
		ver, verr := strconv.Atoi(v)
		if ok2 && verr == nil && ver >= 1 && slices.Contains(Names(), n) {
			return n, ver, nil
		}
	}
	return "", 0, fmt.Errorf("consumer group %q is no projector's (want %sfeed.projection.<%s>.v<N>)", group, prefix, strings.Join(Names(), "|"))
}

// ProjectorForGroup returns the projector that handles group's messages
// (groupPrefix is the runner's GroupPrefix, "" in production): the
// projector and version the group name says, with the policy that
// version was recorded with (as the supervisor runs it). A group of a
// version that is no longer active is refused: its keys are not read, and
// the rebuild that replaced it read the topic again.
func ProjectorForGroup(ctx context.Context, cfg Config, groupPrefix string, pg Querier, rdb redis.UniversalClient, group string) (Projector, error) {
	name, v, err := ParseGroup(groupPrefix, group)
	if err != nil {
		return nil, err
	}
	recs, err := readmodel.LoadVersionRecords(ctx, pg)
	if err != nil {
		return nil, err
	}
	act := readmodel.Active{Records: recs}
	for _, r := range recs {
		act.Versions = act.Versions.With(r.Projection, r.Version)
	}
	if cur := act.Versions.Version(name); cur != v {
		return nil, fmt.Errorf("group %s is version %d of %s, whose active version is %d: nothing reads its keys (discard it)", group, v, name, cur)
	}
	pcfg := cfg.WithPolicy(policyAt(act, name, cfg.Policy()))
	pcfg.Keys = readmodel.Keys{Prefix: cfg.Keys.Prefix, Versions: readmodel.Versions{}.With(name, v)}
	ps, err := New(pcfg, pg, rdb, nil, name)
	if err != nil {
		return nil, err
	}
	return ps[0], nil
}
