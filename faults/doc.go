// Package faults is the fault suite: it runs the roles of the feed binary
// (`feed kafka`, `feed cdc`, `feed project`, `feed api`) as separate
// processes on a database, a redis-server, a broker, ports, a topic and a
// replication slot of the test's own, drives a workload of registered
// users over HTTP, injects one fault at a time under it (kill -9 of a
// role, a broker restart, Redis down, flushed or restarted empty, the
// replication slot dropped, PostgreSQL connections terminated), and after
// each one runs the convergence oracle until every feed read through the
// API equals the truth from PostgreSQL. Only tests live here; the small
// suite runs in `go test ./...`, the full one with `make faults`
// (docs/faults.md).
package faults
