package readmodel

import (
	"context"
	"errors"
	"fmt"
	"strings"
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
	// CelebrityBand is the celebrity band the version was built with,
	// when BandRecorded (migration 014; 0 is a band: none).
	CelebrityBand int64
	BandRecorded  bool
	// InboxLayout is the inbox layout recorded for the version (migration
	// 007; a switch records the one this release writes): homefeed says
	// what it means (CheckVersion).
	InboxLayout string
	// NotificationsMax is the notifications bound the version was built
	// with (migration 056; kept on the notifications row only); 0 when
	// none was recorded.
	NotificationsMax int
	ActivatedAt      time.Time
}

// LoadVersionRecords reads every projection's row from PostgreSQL, in the
// order of Projections; a projection without a row is an ErrNoVersion that
// names it.
func LoadVersionRecords(ctx context.Context, db VersionQuerier) ([]VersionRecord, error) {
	rows, err := db.Query(ctx, `SELECT projection, version, celebrity_threshold, inbox_max, celebrity_band, coalesce(inbox_layout, ''), notifications_max, activated_at
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
			band      *int64
			notifMax  *int32
		)
		if err := rows.Scan(&r.Projection, &r.Version, &threshold, &inboxMax, &band, &r.InboxLayout, &notifMax, &r.ActivatedAt); err != nil {
			rows.Close()
			return nil, fmt.Errorf("read projection versions: %w", err)
		}
		if threshold != nil {
			r.CelebrityThreshold = *threshold
		}
		if inboxMax != nil {
			r.InboxMax = int(*inboxMax)
		}
		if band != nil {
			r.CelebrityBand, r.BandRecorded = *band, true
		}
		if notifMax != nil {
			r.NotificationsMax = int(*notifMax)
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

// Switch is one projection's move from version From to version To.
type Switch struct {
	Projection string
	From, To   int
}

// ActivateVersion switches projection from version from to version to in
// PostgreSQL and records the policy the new version was built with (p,
// defaulted): ActivateVersions with one switch.
func ActivateVersion(ctx context.Context, db VersionBeginner, projection string, from, to int, p Policy) error {
	return ActivateVersions(ctx, db, p, Switch{Projection: projection, From: from, To: to})
}

// ActivateVersions switches every projection of sw in PostgreSQL in one
// transaction, which locks their rows first (in the order of sw), and
// records with each new version the policy it was built with (p,
// defaulted; the notifications bound with the notifications version): a reader loads either all the old versions or all the new
// ones. The inbox_layout column gets what releases with several inbox
// layouts recorded for the one this release writes, so that such a
// release's roles still running during an upgrade follow the switch into
// it (homefeed.CheckVersion, docs/rebuild.md). It is how a celebrity threshold or band changes: the followers and
// the inbox versions built at the new one switch together. It fails with
// ErrNoVersion when a row is missing and ErrVersionMoved when a
// projection's active version is not its From; then nothing is switched.
// The Redis mirror is the caller's next step (Registry.Activate).
func ActivateVersions(ctx context.Context, db VersionBeginner, p Policy, sw ...Switch) error {
	p = p.WithDefaults()
	err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		for _, s := range sw {
			var cur int
			err := tx.QueryRow(ctx, `SELECT version FROM projection_versions WHERE projection = $1 FOR UPDATE`, s.Projection).Scan(&cur)
			if errors.Is(err, pgx.ErrNoRows) {
				return fmt.Errorf("%s: %w", s.Projection, ErrNoVersion)
			}
			if err != nil {
				return err
			}
			if cur != s.From {
				return fmt.Errorf("%s is at version %d, not %d: %w", s.Projection, cur, s.From, ErrVersionMoved)
			}
			if _, err = tx.Exec(ctx, `UPDATE projection_versions
			SET version = $2, celebrity_threshold = $3, inbox_max = $4, inbox_layout = 'packed', celebrity_band = $5, activated_at = now(), seeded = false,
			    notifications_max = CASE WHEN projection = $7 THEN $6 ELSE notifications_max END
			WHERE projection = $1`, s.Projection, s.To, p.CelebrityThreshold, p.InboxMax, p.CelebrityBand, p.NotificationsMax, ProjectionNotifications); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("activate %s: %w", describeSwitches(sw), err)
	}
	return nil
}

func describeSwitches(sw []Switch) string {
	parts := make([]string, len(sw))
	for i, s := range sw {
		parts[i] = fmt.Sprintf("%s version %d", s.Projection, s.To)
	}
	return strings.Join(parts, " and ")
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

// VersionExecQuerier is what ResolvePolicy needs; *pgxpool.Pool has it.
type VersionExecQuerier interface {
	VersionQuerier
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// ErrPolicyMismatch means a process's fan-out policy, set explicitly, is
// not the one the active version was built with.
var ErrPolicyMismatch = errors.New("fan-out policy differs from the active version's")

// Apply returns p with the policy r recorded in place of p's: the
// celebrity threshold and band, the inbox bound and the notifications
// bound, each where recorded (a field r has not recorded keeps p's). A new bound resets
// trim fields that held the old bound's defaults, so WithDefaults derives
// them again.
func (r VersionRecord) Apply(p Policy) Policy {
	if r.CelebrityThreshold > 0 {
		p.CelebrityThreshold = r.CelebrityThreshold
	}
	if r.BandRecorded {
		p.CelebrityBand = r.CelebrityBand
	}
	if r.InboxMax > 0 && r.InboxMax != p.InboxMax {
		// The trim slack and band default from the bound: defaulted for
		// the old one, they are defaulted again for the new one.
		d := Policy{InboxMax: p.InboxMax}.WithDefaults()
		if p.InboxTrimSlack == d.InboxTrimSlack && p.InboxTrimBand == d.InboxTrimBand && p.InboxTrimEvery == d.InboxTrimEvery {
			p.InboxTrimSlack, p.InboxTrimBand, p.InboxTrimEvery = 0, 0, 0
		}
		p.InboxMax = r.InboxMax
	}
	if r.NotificationsMax > 0 {
		p.NotificationsMax = r.NotificationsMax
	}
	return p
}

// PolicyExplicit says which of a policy's recorded fields the process was
// given explicitly (cmd/feed: the variable is set in the environment);
// ResolvePolicy adopts the recorded value of every other one.
type PolicyExplicit struct {
	CelebrityThreshold, CelebrityBand, InboxMax, NotificationsMax bool
}

// ResolvePolicy is the one rule by which a process's fan-out policy meets
// the one recorded with the active versions: the celebrity threshold and
// band (of the followers and inbox versions), the inbox bound (of the
// inbox version) and the notifications bound (of the notifications
// version). Two projectors with different thresholds would
// push and pull by different rules and drop posts between them, silently;
// a writer and a reader with different bounds would not agree on an
// inbox's floor.
//
//   - A field nothing recorded yet (a fresh deployment) gets p's value,
//     recorded now by the first process to start: p is the environment's
//     policy, defaulted (500, 10000).
//   - A recorded field the process was not given explicitly is adopted.
//   - A recorded field given explicitly with another value is refused
//     with ErrPolicyMismatch, naming the variable, both values and how to
//     change the policy (`feed rebuild inbox --inbox-max ...`,
//     blue/green).
//
// It returns p, defaulted, with the recorded fields in place.
func ResolvePolicy(ctx context.Context, db VersionExecQuerier, p Policy, explicit PolicyExplicit) (Policy, error) {
	p = p.WithDefaults()
	recorded := []string{ProjectionFollowers, ProjectionInbox}
	if _, err := db.Exec(ctx, `UPDATE projection_versions SET celebrity_threshold = $2, inbox_max = $3
		WHERE projection = ANY($1) AND celebrity_threshold IS NULL`, recorded, p.CelebrityThreshold, p.InboxMax); err != nil {
		return p, fmt.Errorf("record the fan-out policy: %w", err)
	}
	if _, err := db.Exec(ctx, `UPDATE projection_versions SET celebrity_band = $2
		WHERE projection = ANY($1) AND celebrity_band IS NULL`, recorded, p.CelebrityBand); err != nil {
		return p, fmt.Errorf("record the celebrity band: %w", err)
	}
	if _, err := db.Exec(ctx, `UPDATE projection_versions SET notifications_max = $2
		WHERE projection = $1 AND notifications_max IS NULL`, ProjectionNotifications, p.NotificationsMax); err != nil {
		return p, fmt.Errorf("record the notifications bound: %w", err)
	}
	recs, err := LoadVersionRecords(ctx, db)
	if err != nil {
		return p, err
	}
	var inbox, followers, notif VersionRecord
	for _, r := range recs {
		switch r.Projection {
		case ProjectionInbox:
			inbox = r
		case ProjectionFollowers:
			followers = r
		case ProjectionNotifications:
			notif = r
		}
	}
	var errs []error
	if followers.CelebrityThreshold != inbox.CelebrityThreshold {
		// A switch of both (ActivateVersions) never writes this: the two
		// projections change their threshold together.
		errs = append(errs, fmt.Errorf("the followers version %d has celebrity threshold %d, the inbox version %d has %d: %w",
			followers.Version, followers.CelebrityThreshold, inbox.Version, inbox.CelebrityThreshold, ErrPolicyMismatch))
	}
	if followers.CelebrityBand != inbox.CelebrityBand {
		errs = append(errs, fmt.Errorf("the followers version %d has celebrity band %d, the inbox version %d has %d: %w",
			followers.Version, followers.CelebrityBand, inbox.Version, inbox.CelebrityBand, ErrPolicyMismatch))
	}
	check := func(set bool, env, field string, have, want any, how string) {
		if set && have != want {
			errs = append(errs, fmt.Errorf("%s=%v, but the active inbox version %d was built with %s %v: unset %s to adopt it, or %s: %w",
				env, have, inbox.Version, field, want, env, how, ErrPolicyMismatch))
		}
	}
	check(explicit.CelebrityThreshold, "FEED_CELEBRITY_THRESHOLD", "celebrity threshold", p.CelebrityThreshold, inbox.CelebrityThreshold,
		fmt.Sprintf("change it blue/green (feed rebuild inbox --celebrity-threshold %d)", p.CelebrityThreshold))
	check(explicit.CelebrityBand, "FEED_CELEBRITY_BAND", "celebrity band", p.CelebrityBand, inbox.CelebrityBand,
		fmt.Sprintf("change it blue/green (feed rebuild inbox --celebrity-band %d)", p.CelebrityBand))
	check(explicit.InboxMax, "FEED_INBOX_MAX", "inbox bound", p.InboxMax, inbox.InboxMax,
		fmt.Sprintf("build a version with the new one (feed rebuild inbox --inbox-max %d)", p.InboxMax))
	if explicit.NotificationsMax && p.NotificationsMax != notif.NotificationsMax {
		errs = append(errs, fmt.Errorf("FEED_NOTIFICATIONS_MAX=%d, but the active notifications version %d was built with notifications bound %d: unset FEED_NOTIFICATIONS_MAX to adopt it, or build a version with the new one (feed rebuild notifications --notifications-max %d): %w",
			p.NotificationsMax, notif.Version, notif.NotificationsMax, p.NotificationsMax, ErrPolicyMismatch))
	}
	if len(errs) > 0 {
		return p, errors.Join(errs...)
	}
	p = inbox.Apply(p)
	if notif.NotificationsMax > 0 {
		p.NotificationsMax = notif.NotificationsMax
	}
	return p.WithDefaults(), nil
}

// CheckPolicy is ResolvePolicy with every field explicit: it records p
// where nothing is recorded and refuses any other recorded value.
func CheckPolicy(ctx context.Context, db VersionExecQuerier, p Policy) error {
	_, err := ResolvePolicy(ctx, db, p, PolicyExplicit{CelebrityThreshold: true, CelebrityBand: true, InboxMax: true, NotificationsMax: true})
	return err
}
