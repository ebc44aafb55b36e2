# The two commands of the README: `make dev` runs the whole system,
# `make test` runs the whole suite. Both prepare PostgreSQL and Redis first.
GO ?= go
TEST_FLAGS ?= -count=1 -timeout 15m

.PHONY: dev test prepare build bench fuzz vet

prepare:
	@scripts/prepare.sh

build:
	$(GO) build -o bin/feed ./cmd/feed

dev: prepare build
	./bin/feed dev

test: prepare
	$(GO) vet ./...
	$(GO) test $(TEST_FLAGS) ./...

bench: prepare
	$(GO) test -run '^$$' -bench . -benchtime 1x ./...
