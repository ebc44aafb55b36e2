package main

import (
	"runtime/debug"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/feedco/feed/internal/procio"
	"github.com/feedco/feed/internal/schedlat"
)

// build is what the binary knows of its own build (runtime/debug's
// build information): `feed version` prints it and feed_build_info
// exports it.
type build struct {
	Version   string // the main module's version ("(devel)" from a checkout)
	Module    string
	Revision  string // VCS revision, " (modified)" for a dirty tree; "unknown" without VCS stamping
	Time      string // VCS commit time; "unknown" without VCS stamping
	GoVersion string
}

// stampedRevision is the VCS revision a build without the repository's
// .git (the Dockerfile's: .dockerignore leaves it out) sets with
// -ldflags "-X main.stampedRevision=REV"; the build information's own
// vcs.revision wins when there is one.
var stampedRevision string

func readBuild() (build, bool) {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return build{Version: "unknown", Revision: "unknown", Time: "unknown"}, false
	}
	setting := func(key string) string {
		for _, s := range bi.Settings {
			if s.Key == key {
				return s.Value
			}
		}
		return ""
	}
	b := build{Version: bi.Main.Version, Module: bi.Main.Path, Revision: setting("vcs.revision"), Time: setting("vcs.time"), GoVersion: bi.GoVersion}
	if b.Version == "" {
		b.Version = "unknown"
	}
	if b.Revision == "" {
		b.Revision = stampedRevision
	}
	if b.Revision == "" {
		b.Revision = "unknown"
	}
	if setting("vcs.modified") == "true" {
		b.Revision += " (modified)"
	}
	if b.Time == "" {
		b.Time = "unknown"
	}
	return b, true
}

// newRoleRegistry is the Prometheus registry of a role (api, cdc, project,
// dev): feed_build_info, the Go runtime and process collectors, and the
// process's scheduling latency and I/O calls, beside what the role's parts
// register.
func newRoleRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	b, _ := readBuild()
	info := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        "feed_build_info",
		Help:        "Always 1; the labels describe the running binary: module version, VCS revision, Go version.",
		ConstLabels: prometheus.Labels{"version": b.Version, "revision": b.Revision, "goversion": b.GoVersion},
	})
	info.Set(1)
	reg.MustRegister(info, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if c := schedlat.New(); c != nil {
		reg.MustRegister(c)
	}
	if c := procio.New(); c != nil {
		reg.MustRegister(c)
	}
	return reg
}
