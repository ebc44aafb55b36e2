# The two commands of the README: `make dev` runs the whole system,
# `make test` runs the whole suite. Both prepare PostgreSQL and Redis first.
GO ?= go
TEST_FLAGS ?= -count=1 -timeout 15m

.PHONY: dev test prepare build bench fuzz vet faults status-screenshot

prepare:
	@scripts/prepare.sh

build:
	$(GO) build -o bin/feed ./cmd/feed

dev: prepare build
	./bin/feed dev

test: prepare
	$(GO) vet ./...
	$(GO) test $(TEST_FLAGS) ./...
	cd tools/schedwait && $(GO) vet ./... && $(GO) test -count=1 ./...

# The whole fault suite (docs/faults.md): every role killed, the broker
# restarted, Redis down, flushed and restarted, the slot dropped, PostgreSQL
# connections terminated, under a workload; prints the table.
faults: prepare
	$(GO) test -count=1 -timeout 30m -v -run '^TestFaults$$' ./faults -faults.full

# The status page's screenshot, docs/status.png, from its browser test
# (headless Chromium; docs/testing.md).
status-screenshot: prepare
	$(GO) test -count=1 -run '^TestStatusPageInChromium$$' ./cmd/feed -status.png $(CURDIR)/docs/status.png

bench: prepare
	$(GO) test -run '^$$' -bench . -benchtime 1x ./...
