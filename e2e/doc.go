// Package e2e holds the convergence oracle: an end-to-end test that runs the
// whole pipeline (HTTP API and commands, PostgreSQL, CDC, the Kafka-protocol
// broker, every projector, Redis, the query side) on a seeded concurrent
// workload, waits until everything has caught up, and checks every user's
// feed, page by page, against the source of truth computed by SQL. The
// package has no production code; see docs/testing.md.
package e2e
