-- The last result of the live verification (verify/result.go; docs/rebuild.md,
-- "Verifying a live system"), readable by any process: `feed status` and the
-- API's /status page show it. One row per source: 'periodic' (FEED_VERIFY_EVERY
-- inside `feed project` or `feed dev`, whichever instance finished last) and
-- 'command' (the last `feed verify`). Each run replaces its source's row.
CREATE TABLE verify_results (
    source           text        PRIMARY KEY CHECK (source IN ('periodic', 'command')),
    result           text        NOT NULL CHECK (result IN ('ok', 'differences', 'error')),
    finished_at      timestamptz NOT NULL,
    duration_ms      bigint      NOT NULL,
    users            int         NOT NULL,
    cold             int         NOT NULL,
    posts            int         NOT NULL,
    differences      int         NOT NULL,
    -- the first difference (result 'differences') or the error (result 'error')
    detail           text        NOT NULL DEFAULT '',
    summary          text        NOT NULL DEFAULT ''
);
