# The two commands of the README: `make dev` runs the whole system,
# `make test` runs the whole suite (the product, then the modules of their
# own: tools/schedwait and the load generator in bench/). Both prepare
# PostgreSQL and Redis first.
GO ?= go
TEST_FLAGS ?= -count=1 -timeout 15m

.PHONY: dev test prepare build feedbench bench fuzz vet faults status-screenshot

prepare:
	@scripts/prepare.sh

build:
	$(GO) build -o bin/feed ./cmd/feed

# The load generator, a module of its own (docs/bench.md).
feedbench:
	cd bench && $(GO) build -o ../bin/feedbench ./cmd/feedbench

dev: prepare build
	./bin/feed dev

test: prepare
	$(GO) vet ./...
	$(GO) test $(TEST_FLAGS) ./...
	cd tools/schedwait && $(GO) vet ./... && $(GO) test -count=1 ./...
	cd bench && $(GO) vet ./... && $(GO) test $(TEST_FLAGS) ./...

# The whole fault suite (docs/faults.md): every role killed, the broker
# restarted, Redis down, flushed and restarted, the slot dropped, PostgreSQL
# connections terminated, under a workload; prints the table.
faults: prepare
	$(GO) test -count=1 -timeout 30m -v -run '^TestFaults$$' ./faults -faults.full

# The status page's screenshot, docs/status.png, from its browser test
# (headless Chromium; docs/testing.md).
status-screenshot: prepare
	$(GO) test -count=1 -run '^TestStatusPageInChromium$$' ./cmd/feed -status.png $(CURDIR)/docs/status.png

# Every Go benchmark once, the product's and the load generator's.
bench: prepare
	$(GO) test -run '^$$' -bench . -benchtime 1x ./...
	cd bench && $(GO) test -run '^$$' -bench . -benchtime 1x ./...
