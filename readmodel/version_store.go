package readmodel

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// ErrNoVersion means PostgreSQL has no active version for a projection (no
// row in projection_versions). It is never read as version 1: migration
// 006 gives every projection its row, so a missing one is a broken
// database, and a reader that guessed would use the wrong keys and
// consumer group.
var ErrNoVersion = errors.New("no active version recorded in projection_versions")

// VersionQuerier is what reading the active versions needs from
// PostgreSQL; *pgxpool.Pool, pgx.Tx and the query side's DB have it.
type VersionQuerier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// VersionBeginner opens the transaction a switch is written in;
// *pgxpool.Pool has it.
type VersionBeginner interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

// VersionRecord is one projection's row of projection_versions: its active
// version and the fan-out policy that version was built with.
type VersionRecord struct {
	Projection string
	Version    int
	// CelebrityThreshold and InboxMax are the policy `feed rebuild` built
	// the version with; 0 when none was recorded (version 1 of a
	// deployment, which the projectors built under the policy of their
	// time).
	CelebrityThreshold int64
	InboxMax           int
	// InboxLayout is the inbox layout the version was built in ("" when
	// none was recorded; migration 007).
	InboxLayout string
	ActivatedAt time.Time
}

// LoadVersionRecords reads every projection's row from PostgreSQL, in the
// order of Projections; a projection without a row is an ErrNoVersion that
// names it.
func LoadVersionRecords(ctx context.Context, db VersionQuerier) ([]VersionRecord, error) {
	rows, err := db.Query(ctx, `SELECT projection, version, celebrity_threshold, inbox_max, coalesce(inbox_layout, ''), activated_at
		FROM projection_versions`)
	if err != nil {
		return nil, fmt.Errorf("read projection versions: %w", err)
	}
	byName := map[string]VersionRecord{}
	for rows.Next() {
		var (
			r         VersionRecord
			threshold *int64
			inboxMax  *int32
		)
		if err := rows.Scan(&r.Projection, &r.Version, &threshold, &inboxMax, &r.InboxLayout, &r.ActivatedAt); err != nil {
			rows.Close()
			return nil, fmt.Errorf("read projection versions: %w", err)
		}
		if threshold != nil {
			r.CelebrityThreshold = *threshold
		}
		if inboxMax != nil {
			r.InboxMax = int(*inboxMax)
		}
		byName[r.Projection] = r
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read projection versions: %w", err)
	}
	out := make([]VersionRecord, 0, len(Projections()))
	for _, p := range Projections() {
		r, ok := byName[p]
		if !ok {
			return nil, fmt.Errorf("read projection versions: %s: %w", p, ErrNoVersion)
		}
		out = append(out, r)
	}
	return out, nil
}

// LoadVersions reads the active versions from PostgreSQL, their source of
// truth; a projection without a row is an ErrNoVersion that names it.
func LoadVersions(ctx context.Context, db VersionQuerier) (Versions, error) {
	recs, err := LoadVersionRecords(ctx, db)
	if err != nil {
		return Versions{}, err
	}
	var v Versions
	for _, r := range recs {
		v = v.With(r.Projection, r.Version)
	}
	return v, nil
}

// ErrVersionMoved means a switch found the projection at another version
// than the one it was built from.
var ErrVersionMoved = errors.New("active version moved")

// ActivateVersion switches projection from version from to version to in
// PostgreSQL, in one transaction that locks the projection's row first, and
// records the policy the new version was built with (p, defaulted). It
// fails with ErrNoVersion when the row is missing and ErrVersionMoved when
// the active version is not from. The Redis mirror is the caller's next
// step (Registry.Activate).
func ActivateVersion(ctx context.Context, db VersionBeginner, projection string, from, to int, p Policy) error {
	p = p.WithDefaults()
	err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		var cur int
		err := tx.QueryRow(ctx, `SELECT version FROM projection_versions WHERE projection = $1 FOR UPDATE`, projection).Scan(&cur)
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("%s: %w", projection, ErrNoVersion)
		}
		if err != nil {
			return err
		}
		if cur != from {
			return fmt.Errorf("%s is at version %d, not %d: %w", projection, cur, from, ErrVersionMoved)
		}
		_, err = tx.Exec(ctx, `UPDATE projection_versions
			SET version = $2, celebrity_threshold = $3, inbox_max = $4, inbox_layout = $5, activated_at = now(), seeded = false
			WHERE projection = $1`, projection, to, p.CelebrityThreshold, p.InboxMax, p.InboxLayout)
		return err
	})
	if err != nil {
		return fmt.Errorf("activate %s version %d: %w", projection, to, err)
	}
	return nil
}

// adoptCached raises every seeded row of projection_versions (one no
// switch has written since migration 006 created it) to the version the
// Redis registry holds, when that is higher, and clears its seeded flag:
// the one-time upgrade of a deployment whose rebuilds switched versions
// while the Redis hash was the only registry. A row a switch wrote is
// never changed here: from then on PostgreSQL alone decides. It returns
// the projections it raised.
func adoptCached(ctx context.Context, db VersionQuerier, cached Versions) ([]string, error) {
	var adopted []string
	for _, p := range Projections() {
		v := cached.Version(p)
		if v <= 1 {
			continue
		}
		rows, err := db.Query(ctx, `UPDATE projection_versions
			SET version = $2, seeded = false, activated_at = now()
			WHERE projection = $1 AND seeded AND version < $2
			RETURNING projection`, p, v)
		if err != nil {
			return adopted, fmt.Errorf("adopt the registry's version of %s: %w", p, err)
		}
		n := 0
		for rows.Next() {
			n++
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return adopted, fmt.Errorf("adopt the registry's version of %s: %w", p, err)
		}
		if n > 0 {
			adopted = append(adopted, p)
		}
	}
	return adopted, nil
}

// VersionExecQuerier is what CheckPolicy needs; *pgxpool.Pool has it.
type VersionExecQuerier interface {
	VersionQuerier
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// ErrPolicyMismatch means a projector's fan-out policy is not the one its
// active version was built with.
var ErrPolicyMismatch = errors.New("fan-out policy differs from the active version's")

// CheckPolicy checks, before a projector writes, that its fan-out policy
// (p, defaulted) is the one the active versions of the inbox and
// followers projections were built with: two projectors with different
// celebrity thresholds would push and pull by different rules and drop
// posts between them, silently, and two with different inbox layouts
// would each fill inboxes the other's readers never see. A version without a recorded policy (the
// first start of a deployment, built by the projectors themselves) gets
// p recorded now, by the first projector to start; a later one with other
// values gets ErrPolicyMismatch, which says how to change the policy
// (`feed rebuild`, blue/green).
func CheckPolicy(ctx context.Context, db VersionExecQuerier, p Policy) error {
	p = p.WithDefaults()
	checked := []string{ProjectionFollowers, ProjectionInbox}
	if _, err := db.Exec(ctx, `UPDATE projection_versions SET celebrity_threshold = $2, inbox_max = $3
		WHERE projection = ANY($1) AND celebrity_threshold IS NULL`, checked, p.CelebrityThreshold, p.InboxMax); err != nil {
		return fmt.Errorf("record the fan-out policy: %w", err)
	}
	if _, err := db.Exec(ctx, `UPDATE projection_versions SET inbox_layout = $2
		WHERE projection = $1 AND inbox_layout IS NULL`, ProjectionInbox, p.InboxLayout); err != nil {
		return fmt.Errorf("record the inbox layout: %w", err)
	}
	recs, err := LoadVersionRecords(ctx, db)
	if err != nil {
		return err
	}
	var errs []error
	for _, r := range recs {
		switch {
		case r.Projection != ProjectionFollowers && r.Projection != ProjectionInbox:
		case r.CelebrityThreshold != p.CelebrityThreshold:
			errs = append(errs, fmt.Errorf("%s version %d was built with celebrity threshold %d, this process has %d (FEED_CELEBRITY_THRESHOLD): %w",
				r.Projection, r.Version, r.CelebrityThreshold, p.CelebrityThreshold, ErrPolicyMismatch))
		case r.Projection == ProjectionInbox && r.InboxMax != p.InboxMax:
			errs = append(errs, fmt.Errorf("%s version %d was built with inbox bound %d, this process has %d (FEED_INBOX_MAX): %w",
				r.Projection, r.Version, r.InboxMax, p.InboxMax, ErrPolicyMismatch))
		case r.Projection == ProjectionInbox && r.InboxLayout != p.InboxLayout:
			errs = append(errs, fmt.Errorf("%s version %d was built in the %s layout, this process has %s (FEED_INBOX_LAYOUT): %w",
				r.Projection, r.Version, r.InboxLayout, p.InboxLayout, ErrPolicyMismatch))
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("%w; start with the version's values, or build a version with the new ones (feed rebuild)", errors.Join(errs...))
	}
	return nil
}
