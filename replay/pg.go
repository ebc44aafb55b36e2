package replay

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/feedco/feed/events"
)

// Querier is what the PostgreSQL source needs: *pgxpool.Pool or *pgx.Conn.
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// PGConfig configures the PostgreSQL source. Zero fields take defaults.
type PGConfig struct {
	// Filter selects the events; a commit LSN bound is refused (the log
	// does not record commit LSNs: use the Kafka source).
	Filter Filter
	// Follow keeps polling for new events until ctx ends.
	Follow bool
	// PageSize is the number of rows per keyset page (bounded memory).
	// Default 5000.
	PageSize int
	// PollInterval is the pause between polls when following and caught up.
	// Default 200ms.
	PollInterval time.Duration
	// Logf, if set, receives notices for the user (a replay waiting for a
	// long transaction to finish).
	Logf func(format string, args ...any)
	// Resume, when set, continues a replay exactly where the one that
	// took the token (PG.Token) left off: no event it emitted again, none
	// it had not emitted missed. Not with a --from bound.
	Resume *Token
}

func (c PGConfig) withDefaults() PGConfig {
	c.PageSize = cmp.Or(c.PageSize, 5000)
	c.PollInterval = cmp.Or(c.PollInterval, 200*time.Millisecond)
	return c
}

// Validate reports a configuration the PostgreSQL source cannot serve.
func (c PGConfig) Validate() error {
	if err := c.Filter.Validate(); err != nil {
		return err
	}
	if c.Filter.From.Kind == BoundLSN || c.Filter.To.Kind == BoundLSN {
		return invalidf("the PostgreSQL source does not know commit LSNs (only CDC does): use --source kafka for an LSN range, or a position or timestamp")
	}
	if c.Follow && c.Filter.To.Kind != BoundNone {
		return invalidf("--to cannot be combined with --follow")
	}
	if c.Resume != nil && c.Filter.From.Kind != BoundNone {
		return invalidf("--resume continues where the token says: not with --from")
	}
	if c.PageSize < 1 {
		return invalidf("page size %d: want at least 1", c.PageSize)
	}
	if c.PollInterval < 0 {
		return invalidf("poll interval must not be negative")
	}
	return nil
}

// PG streams the event log from PostgreSQL in position order, reading only
// events whose transaction, and every transaction older than it, has
// finished: tx_id < pg_snapshot_xmin(pg_current_snapshot()), the "safe
// horizon". An event of a transaction still running cannot appear later
// among what was already printed without being seen: when following, each
// poll also picks up the events at or below the printed position whose
// transaction has just crossed the horizon (see docs/replay.md, Ordering).
type PG struct {
	db    Querier
	cfg   PGConfig
	tok   Token // what has been emitted so far (Token)
	floor int64 // no event at or below this position is emitted
}

// NewPG returns the PostgreSQL source; it refuses a nil db and an invalid
// configuration (an error wrapping ErrInvalid).
func NewPG(db Querier, cfg PGConfig) (*PG, error) {
	if db == nil {
		return nil, errors.New("replay: NewPG needs a database")
	}
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &PG{db: db, cfg: cfg}, nil
}

// pgState is how far a PostgreSQL replay got: every event with position <=
// covered and tx_id < horizon that the filter selects has been emitted, and
// no other.
type pgState struct {
	covered int64
	horizon uint64
}

// Token is how far a PostgreSQL replay got, exactly: the events it has
// emitted are those the filter selects among
//
//	Floor < position <= Covered and tx_id < Horizon, and, when LateTo > 0,
//	Floor < position <= LateAt and Horizon <= tx_id < LateTo
//
// Floor is the replay's --from position minus one (0 without), kept so
// that a resumed replay never goes below it; the second part is there
// while a poll prints the late events of the transactions that crossed
// the horizon since the previous one. Because
// tx_id < Horizon means that transaction and every older one had
// finished, nothing can join that set later: a replay resumed from the
// token (PGConfig.Resume) prints exactly the rest.
type Token struct {
	Floor   int64
	Covered int64
	Horizon uint64
	LateTo  uint64
	LateAt  int64
}

// tokenPrefix versions the token's text form.
const tokenPrefix = "pg1."

// String is the token's text form, FLOOR.COVERED.HORIZON[.LATETO.LATEAT]
// after "pg1.": e.g. "pg1.0.1200.7345" or, mid-poll, "pg1.0.1200.7345.7351.880".
func (t Token) String() string {
	s := tokenPrefix + strconv.FormatInt(t.Floor, 10) + "." + strconv.FormatInt(t.Covered, 10) + "." + strconv.FormatUint(t.Horizon, 10)
	if t.LateTo > 0 {
		s += "." + strconv.FormatUint(t.LateTo, 10) + "." + strconv.FormatInt(t.LateAt, 10)
	}
	return s
}

// ParseToken reads a token's text form (surrounding white space, such as
// a checkpoint file's newline, is ignored).
func ParseToken(s string) (Token, error) {
	rest, ok := strings.CutPrefix(strings.TrimSpace(s), tokenPrefix)
	parts := strings.Split(rest, ".")
	if !ok || (len(parts) != 3 && len(parts) != 5) {
		return Token{}, invalidf("resume token %q: want pg1.FLOOR.COVERED.HORIZON[.LATETO.LATEAT], as --checkpoint writes it", s)
	}
	var t Token
	var errs [5]error
	t.Floor, errs[0] = strconv.ParseInt(parts[0], 10, 64)
	t.Covered, errs[1] = strconv.ParseInt(parts[1], 10, 64)
	t.Horizon, errs[2] = strconv.ParseUint(parts[2], 10, 64)
	if len(parts) == 5 {
		t.LateTo, errs[3] = strconv.ParseUint(parts[3], 10, 64)
		t.LateAt, errs[4] = strconv.ParseInt(parts[4], 10, 64)
	}
	if errors.Join(errs[:]...) != nil || t.Floor < 0 || t.Covered < t.Floor || t.LateAt < 0 ||
		(len(parts) == 5 && (t.LateTo <= t.Horizon || t.LateAt > t.Covered)) {
		return Token{}, invalidf("resume token %q is damaged", s)
	}
	return t, nil
}

// Token returns how far the replay got: what emit has accepted so far (an
// event whose emit failed is not included; one whose emit ended the
// replay by a limit is). Call it from emit or after Stream returned.
func (s *PG) Token() Token { return s.tok }

// Stream implements Source.
func (s *PG) Stream(ctx context.Context, emit func(*events.Envelope) error) error {
	st := pgState{}
	resumed := s.cfg.Resume != nil
	if resumed {
		r := *s.cfg.Resume
		s.floor = r.Floor
		s.tok = r
		st = pgState{covered: r.Covered, horizon: r.Horizon}
		if r.LateTo > 0 {
			// Finish the late scan the token was taken in.
			if err := s.scan(ctx, emit, r.LateAt, st, r.LateTo); err != nil {
				return err
			}
			st.horizon = r.LateTo
		}
	} else if b := s.cfg.Filter.From; b.Kind == BoundPosition && b.Position > 0 {
		s.floor = b.Position - 1
		st.covered = s.floor
	}
	s.tok = Token{Floor: s.floor, Covered: st.covered, Horizon: st.horizon}
	first := true
	for {
		var xmin uint64
		var err error
		if first {
			xmin, err = s.startHorizon(ctx)
		} else {
			xmin, err = s.horizon(ctx)
		}
		if err != nil {
			return err
		}
		// The horizon never moves down (every transaction below the last
		// one has finished); max keeps the token's rectangle exact anyway.
		xmin = max(xmin, st.horizon)
		if (resumed || !first) && xmin > st.horizon {
			// Events at or below the covered position whose transaction
			// finished since the previous poll (it was older than the
			// events printed then, or ran concurrently with them).
			if err := s.scan(ctx, emit, s.floor, st, xmin); err != nil {
				return err
			}
		}
		s.tok = Token{Floor: s.floor, Covered: st.covered, Horizon: xmin}
		covered, err := s.scanNew(ctx, emit, st, xmin)
		if err != nil {
			return err
		}
		st = pgState{covered: covered, horizon: xmin}
		s.tok = Token{Floor: s.floor, Covered: covered, Horizon: xmin}
		first = false
		if !s.cfg.Follow {
			return nil
		}
		if err := emit(nil); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(s.cfg.PollInterval):
		}
	}
}

// startHorizon waits until every transaction that had an id when the
// replay started has finished, and returns the id the next transaction got
// then (the snapshot's xmax): all that was committed before the start is
// below it. Waiting matters because the horizon is cluster-wide: a write
// running in another database holds it back too (normally for
// milliseconds).
func (s *PG) startHorizon(ctx context.Context) (uint64, error) {
	target, err := s.snapshotXid(ctx, `SELECT pg_snapshot_xmax(pg_current_snapshot())::text`)
	if err != nil {
		return 0, fmt.Errorf("read snapshot: %w", err)
	}
	start, told := time.Now(), false
	wait := 5 * time.Millisecond
	for {
		xmin, err := s.horizon(ctx)
		if err != nil {
			return 0, err
		}
		if xmin >= target {
			return target, nil
		}
		if !told && time.Since(start) > 2*time.Second && s.cfg.Logf != nil {
			told = true
			s.cfg.Logf("waiting for transaction %d (and any older one still running) to finish before replaying", xmin)
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(wait):
		}
		wait = min(wait*2, s.cfg.PollInterval)
	}
}

// horizon returns the safe horizon: every transaction id below it has
// finished (committed or rolled back).
func (s *PG) horizon(ctx context.Context) (uint64, error) {
	v, err := s.snapshotXid(ctx, `SELECT pg_snapshot_xmin(pg_current_snapshot())::text`)
	if err != nil {
		return 0, fmt.Errorf("read snapshot horizon: %w", err)
	}
	return v, nil
}

// snapshotXid runs query, which selects one transaction id as text, and
// parses it.
func (s *PG) snapshotXid(ctx context.Context, query string) (uint64, error) {
	var x string
	if err := s.db.QueryRow(ctx, query).Scan(&x); err != nil {
		return 0, err
	}
	v, err := strconv.ParseUint(x, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("transaction id %q: %w", x, err)
	}
	return v, nil
}

// scanNew emits the events above st.covered with tx_id < xmin, page by
// page, and returns the new covered position.
func (s *PG) scanNew(ctx context.Context, emit func(*events.Envelope) error, st pgState, xmin uint64) (int64, error) {
	covered := st.covered
	at := func(pos int64) Token { return Token{Floor: s.floor, Covered: pos, Horizon: xmin} }
	for {
		last, n, err := s.page(ctx, emit, at, covered, -1, 0, xmin)
		if err != nil {
			return covered, err
		}
		if n > 0 {
			covered = last
		}
		if n < s.cfg.PageSize {
			return covered, nil
		}
	}
}

// scan emits the late events: position in (after, st.covered], tx_id
// in [st.horizon, xmin).
func (s *PG) scan(ctx context.Context, emit func(*events.Envelope) error, after int64, st pgState, xmin uint64) error {
	at := func(pos int64) Token {
		return Token{Floor: s.floor, Covered: st.covered, Horizon: st.horizon, LateTo: xmin, LateAt: pos}
	}
	for {
		last, n, err := s.page(ctx, emit, at, after, st.covered, st.horizon, xmin)
		if err != nil {
			return err
		}
		if n < s.cfg.PageSize {
			return nil
		}
		after = last
	}
}

// page reads one keyset page: position > after (and <= upTo when upTo >=
// 0), txFrom <= tx_id < txTo, plus the filter's SQL conditions, in position
// order. It returns the last position read and the number of rows read
// (before the filters applied in Go). After each row it sets the token to
// at(the row's position), before emitting it; an emit that fails (other
// than by the limit) takes the row back out.
func (s *PG) page(ctx context.Context, emit func(*events.Envelope) error, at func(int64) Token, after, upTo int64, txFrom, txTo uint64) (int64, int, error) {
	var q strings.Builder
	q.WriteString(`SELECT position, event_id::text, stream_id, stream_version, type, payload::text,
		coalesce(metadata->>'correlationId', ''), coalesce(metadata->>'causationId', ''),
		coalesce(metadata->>'actor', ''), recorded_at
	FROM events WHERE position > $1 AND tx_id < $2::text::xid8`)
	args := []any{after, strconv.FormatUint(txTo, 10)}
	arg := func(v any) string {
		args = append(args, v)
		return "$" + strconv.Itoa(len(args))
	}
	if upTo >= 0 {
		q.WriteString(" AND position <= " + arg(upTo))
	}
	if txFrom > 0 {
		q.WriteString(" AND tx_id >= " + arg(strconv.FormatUint(txFrom, 10)) + "::text::xid8")
	}
	f := s.cfg.Filter
	if f.To.Kind == BoundPosition {
		q.WriteString(" AND position <= " + arg(f.To.Position))
	}
	if f.From.Kind == BoundTime {
		q.WriteString(" AND recorded_at >= " + arg(f.From.Time))
	}
	if f.To.Kind == BoundTime {
		// Microsecond rounding in PostgreSQL: the exact test is in Go.
		q.WriteString(" AND recorded_at <= " + arg(f.To.Time.Add(time.Microsecond)))
	}
	if len(f.Types) > 0 {
		q.WriteString(" AND type = ANY(" + arg(f.Types) + ")")
	}
	if f.Stream != "" {
		q.WriteString(" AND stream_id = " + arg(f.Stream))
	}
	q.WriteString(" ORDER BY position LIMIT " + arg(s.cfg.PageSize))

	rows, err := s.db.Query(ctx, q.String(), args...)
	if err != nil {
		return 0, 0, fmt.Errorf("read events: %w", err)
	}
	defer rows.Close()
	var (
		n       int
		last    int64
		e       events.Envelope
		payload []byte
	)
	for rows.Next() {
		if err := rows.Scan(&e.Position, &e.EventID, &e.StreamID, &e.StreamVersion, &e.Type, &payload,
			&e.Metadata.CorrelationID, &e.Metadata.CausationID, &e.Metadata.Actor, &e.RecordedAt); err != nil {
			return 0, 0, fmt.Errorf("read events: %w", err)
		}
		n++
		last = e.Position
		e.RecordedAt = e.RecordedAt.UTC()
		e.Payload = payload
		// The audience key as CDC computes it: 0 for a type this binary
		// cannot decode.
		e.AudienceKey, _ = events.DefaultCodec.AudienceKeyOf(e.Type, e.Payload)
		prev := s.tok
		s.tok = at(e.Position)
		if !f.Match(&e) {
			continue
		}
		if err := emit(&e); err != nil {
			if !errors.Is(err, errStop) {
				s.tok = prev
			}
			return 0, 0, err
		}
	}
	if err := rows.Err(); err != nil {
		return 0, 0, fmt.Errorf("read events: %w", err)
	}
	return last, n, nil
}
