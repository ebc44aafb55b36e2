package verify

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Where a recorded result came from (verify_results.source).
const (
	// SourcePeriodic is FEED_VERIFY_EVERY's run inside a long-running role.
	SourcePeriodic = "periodic"
	// SourceCommand is a `feed verify`.
	SourceCommand = "command"
)

// Result is a verification's outcome as PostgreSQL keeps it
// (verify_results), for `feed status` and the status page of any process.
type Result struct {
	Source string
	// Result is ok, differences or error.
	Result     string
	FinishedAt time.Time
	Took       time.Duration
	// Users, Cold and Posts are the report's; Differences its count.
	Users, Cold, Posts, Differences int
	// Detail is the first difference, or the error.
	Detail string
	// Summary is Report.Summary ("" after an error).
	Summary string
}

// NewResult is the Result of a run that ended at finished after took: its
// report, or err when it could not verify.
func NewResult(source string, rep Report, err error, finished time.Time, took time.Duration) Result {
	r := Result{Source: source, FinishedAt: finished, Took: took}
	switch {
	case err != nil:
		r.Result, r.Detail = "error", err.Error()
		return r
	case rep.OK():
		r.Result = "ok"
	default:
		r.Result, r.Detail = "differences", rep.Differences[0].String()
	}
	r.Users, r.Cold, r.Posts, r.Differences = rep.Users, rep.Cold, rep.Posts, len(rep.Differences)
	r.Summary = rep.Summary()
	return r
}

// SaveResult records r as its source's last result.
func SaveResult(ctx context.Context, pool *pgxpool.Pool, r Result) error {
	_, err := pool.Exec(ctx, `
		INSERT INTO verify_results (source, result, finished_at, duration_ms, users, cold, posts, differences, detail, summary)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)
		ON CONFLICT (source) DO UPDATE SET result = EXCLUDED.result, finished_at = EXCLUDED.finished_at,
			duration_ms = EXCLUDED.duration_ms, users = EXCLUDED.users, cold = EXCLUDED.cold, posts = EXCLUDED.posts,
			differences = EXCLUDED.differences, detail = EXCLUDED.detail, summary = EXCLUDED.summary`,
		r.Source, r.Result, r.FinishedAt, r.Took.Milliseconds(), r.Users, r.Cold, r.Posts, r.Differences, r.Detail, r.Summary)
	if err != nil {
		return fmt.Errorf("record the verification result: %w", err)
	}
	return nil
}

// LastResults reads the last result of every source, newest first.
func LastResults(ctx context.Context, pool *pgxpool.Pool) ([]Result, error) {
	rows, err := pool.Query(ctx, `
		SELECT source, result, finished_at, duration_ms, users, cold, posts, differences, detail, summary
		FROM verify_results ORDER BY finished_at DESC, source`)
	if err != nil {
		return nil, fmt.Errorf("read the verification results: %w", err)
	}
	defer rows.Close()
	var out []Result
	for rows.Next() {
		var r Result
		var ms int64
		if err := rows.Scan(&r.Source, &r.Result, &r.FinishedAt, &ms, &r.Users, &r.Cold, &r.Posts, &r.Differences, &r.Detail, &r.Summary); err != nil {
			return nil, fmt.Errorf("read the verification results: %w", err)
		}
		r.Took = time.Duration(ms) * time.Millisecond
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read the verification results: %w", err)
	}
	return out, nil
}
