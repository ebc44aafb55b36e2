package main

import (
	"context"

	"github.com/feedco/feed/api"
	"github.com/feedco/feed/queries"
)

// The query side plugs into the API: GET /api/feed and
// GET /api/users/{id}/posts are served by queries.Feed, and every post the
// API creates is written through to the author's read models at once
// (read-your-writes without a PostgreSQL probe per read).
func init() {
	apiExtensions = append(apiExtensions, func(_ context.Context, a *App, d *api.Deps) (func(), error) {
		f, err := queries.New(queries.Config{
			CelebrityCacheTTL: a.Cfg.CelebrityCacheTTL,
			Registerer:        d.Registry,
			Logger:            a.Log,
		}.WithPolicy(a.Cfg.Policy), a.Pool, a.Redis)
		if err != nil {
			return nil, err
		}
		d.Feed = f
		prev := d.AfterPostCreated
		d.AfterPostCreated = func(ctx context.Context, p api.Post) {
			if prev != nil {
				prev(ctx, p)
			}
			err := f.PostCreated(ctx, queries.NewPost{ID: p.ID, AuthorID: p.AuthorID, Content: p.Content, CreatedAt: p.CreatedAt})
			if err != nil {
				// The post is committed; the projectors will show it, and
				// this process probes PostgreSQL for the author meanwhile.
				a.Log.Warn("queries: write-through of a new post failed", "post", p.ID, "err", err)
			}
		}
		return f.Close, nil
	})
}
