package main

import (
	"context"

	"github.com/feedco/feed/api"
	"github.com/feedco/feed/queries"
)

// The query side plugs into the API: GET /api/feed and
// GET /api/users/{id}/posts are served by queries.Feed.
func init() {
	apiExtensions = append(apiExtensions, func(_ context.Context, a *App, d *api.Deps) (func(), error) {
		f, err := queries.New(queries.Config{
			InboxMax:          a.Cfg.InboxMax,
			CelebrityCacheTTL: a.Cfg.CelebrityCacheTTL,
			Registerer:        d.Registry,
			Logger:            a.Log,
		}, a.Pool, a.Redis)
		if err != nil {
			return nil, err
		}
		d.Feed = f
		return f.Close, nil
	})
}
