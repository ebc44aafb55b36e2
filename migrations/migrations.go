// Package migrations holds the SQL schema of the event log and its inline
// projections, embedded in the binary, and applies it.
package migrations

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

//go:embed *.up.sql
var files embed.FS

// advisoryLockKey serialises migrators across processes; any constant works
// as long as it never changes.
const advisoryLockKey = 7_206_114_503

var fileName = regexp.MustCompile(`^(\d{3})_([a-z0-9_]+)\.up\.sql$`)

// Migration is one numbered schema change.
type Migration struct {
	Version int
	Name    string
	SQL     string
	// NoTx: the file starts with the line noTxMarker and runs outside a
	// transaction, for statements PostgreSQL refuses in one (CREATE INDEX
	// CONCURRENTLY, which builds an index on the event log without
	// blocking its appends). Such a file holds one statement: a failure
	// part way must leave nothing a second run cannot redo.
	NoTx bool
}

// noTxMarker is a migration file's first line when it must run outside a
// transaction (Migration.NoTx).
const noTxMarker = "-- feed:no-transaction"

// concurrentIndex names the index of a CREATE INDEX CONCURRENTLY IF NOT
// EXISTS statement.
var concurrentIndex = regexp.MustCompile(`(?i)\bCREATE\s+(?:UNIQUE\s+)?INDEX\s+CONCURRENTLY\s+IF\s+NOT\s+EXISTS\s+([a-z_][a-z0-9_]*)`)

// ErrPending means the database is behind the binary: run `feed migrate`.
var ErrPending = errors.New("database schema is behind: run `feed migrate`")

// All returns the embedded migrations in version order. Versions may have
// gaps: a number can be reserved by a change still being written elsewhere,
// and Up applies it whenever it arrives.
func All() ([]Migration, error) {
	entries, err := fs.ReadDir(files, ".")
	if err != nil {
		return nil, fmt.Errorf("read embedded migrations: %w", err)
	}
	var out []Migration
	for _, e := range entries {
		m := fileName.FindStringSubmatch(e.Name())
		if m == nil {
			return nil, fmt.Errorf("migration file %q: name must be NNN_name.up.sql", e.Name())
		}
		v, _ := strconv.Atoi(m[1])
		b, err := files.ReadFile(e.Name())
		if err != nil {
			return nil, fmt.Errorf("read migration %s: %w", e.Name(), err)
		}
		sql := string(b)
		out = append(out, Migration{Version: v, Name: m[2], SQL: sql, NoTx: strings.HasPrefix(sql, noTxMarker+"\n")})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Version < out[j].Version })
	for i, m := range out {
		if m.Version < 1 || (i > 0 && m.Version == out[i-1].Version) {
			return nil, fmt.Errorf("migration version %03d: versions must be positive and unique", m.Version)
		}
	}
	return out, nil
}

// Up applies every pending migration (every version not recorded in
// schema_migrations, in version order, so one that filled a gap below the
// newest applied version is applied too), each in its own transaction
// (or none, Migration.NoTx), under a session advisory lock so two
// processes never migrate at once. It returns the versions it applied.
func Up(ctx context.Context, pool *pgxpool.Pool) ([]int, error) {
	all, err := All()
	if err != nil {
		return nil, err
	}
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("acquire connection: %w", err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, `SELECT pg_advisory_lock($1)`, advisoryLockKey); err != nil {
		return nil, fmt.Errorf("take migration lock: %w", err)
	}
	defer func() {
		// A fresh context: the lock must be released even when ctx is done.
		_, _ = conn.Exec(context.Background(), `SELECT pg_advisory_unlock($1)`, advisoryLockKey)
	}()
	if _, err := conn.Exec(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
		version    int PRIMARY KEY,
		name       text NOT NULL,
		applied_at timestamptz NOT NULL DEFAULT now())`); err != nil {
		return nil, fmt.Errorf("create schema_migrations: %w", err)
	}
	done, err := appliedVersions(ctx, conn.Conn())
	if err != nil {
		return nil, err
	}
	var applied []int
	for _, m := range all {
		if done[m.Version] {
			continue
		}
		var err error
		if m.NoTx {
			err = applyNoTx(ctx, conn.Conn(), m)
		} else {
			err = pgx.BeginFunc(ctx, conn.Conn(), func(tx pgx.Tx) error {
				if _, err := tx.Exec(ctx, m.SQL); err != nil {
					return err
				}
				_, err := tx.Exec(ctx, `INSERT INTO schema_migrations (version, name) VALUES ($1, $2)`, m.Version, m.Name)
				return err
			})
		}
		if err != nil {
			return applied, fmt.Errorf("apply migration %03d_%s: %w", m.Version, m.Name, err)
		}
		applied = append(applied, m.Version)
	}
	return applied, nil
}

// applyNoTx runs a NoTx migration, then records it. A CREATE INDEX
// CONCURRENTLY that failed or was interrupted (the process killed, the
// connection lost) leaves its index behind, marked invalid: IF NOT EXISTS
// would then skip it and record the migration over an index the planner
// never uses, so such an index is dropped first and built again. The
// migration is recorded only after its statement succeeded; a crash in
// between runs it again, which IF NOT EXISTS makes a no-op.
func applyNoTx(ctx context.Context, conn *pgx.Conn, m Migration) error {
	for _, match := range concurrentIndex.FindAllStringSubmatch(m.SQL, -1) {
		name := match[1]
		var invalid bool
		err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_index WHERE indexrelid = to_regclass($1) AND NOT indisvalid)`, name).Scan(&invalid)
		if err != nil {
			return fmt.Errorf("check index %s: %w", name, err)
		}
		if invalid {
			if _, err := conn.Exec(ctx, `DROP INDEX CONCURRENTLY IF EXISTS `+pgx.Identifier{name}.Sanitize()); err != nil {
				return fmt.Errorf("drop invalid index %s left by an interrupted build: %w", name, err)
			}
		}
	}
	if _, err := conn.Exec(ctx, m.SQL); err != nil {
		return err
	}
	_, err := conn.Exec(ctx, `INSERT INTO schema_migrations (version, name) VALUES ($1, $2)`, m.Version, m.Name)
	return err
}

// Check returns ErrPending when the database lacks migrations this binary
// has, so that a role other than `migrate` refuses to run on an old schema.
func Check(ctx context.Context, pool *pgxpool.Pool) error {
	all, err := All()
	if err != nil {
		return err
	}
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("acquire connection: %w", err)
	}
	defer conn.Release()
	var exists bool
	if err := conn.QueryRow(ctx, `SELECT to_regclass('schema_migrations') IS NOT NULL`).Scan(&exists); err != nil {
		return fmt.Errorf("check schema_migrations: %w", err)
	}
	if !exists {
		return ErrPending
	}
	done, err := appliedVersions(ctx, conn.Conn())
	if err != nil {
		return err
	}
	for _, m := range all {
		if !done[m.Version] {
			return fmt.Errorf("%w (migration %03d_%s not applied)", ErrPending, m.Version, m.Name)
		}
	}
	return nil
}

// appliedVersions returns the versions recorded in schema_migrations.
func appliedVersions(ctx context.Context, conn *pgx.Conn) (map[int]bool, error) {
	rows, err := conn.Query(ctx, `SELECT version FROM schema_migrations`)
	if err != nil {
		return nil, fmt.Errorf("read schema versions: %w", err)
	}
	vs, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		return nil, fmt.Errorf("read schema versions: %w", err)
	}
	done := make(map[int]bool, len(vs))
	for _, v := range vs {
		done[int(v)] = true
	}
	return done, nil
}
