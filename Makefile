# nlproxy — see README.md.
GO       ?= go
BIN      := bin/nlproxy
# Stamped into the binary (nlproxy version); outside a git checkout, or
# without git, they fall back to what the Go toolchain recorded, else dev/unknown.
VERSION  ?= $(shell git describe --tags --always --dirty 2>/dev/null)
COMMIT   ?= $(shell git rev-parse --short HEAD 2>/dev/null)
LDFLAGS  := -X main.version=$(VERSION) -X main.commit=$(COMMIT)
# The full suite on a 2-core machine: race detector on, generous timeout.
TESTFLAGS ?= -race -count=1 -timeout 40m
FUZZTIME ?= 10s

.PHONY: all build run test vet fmt fuzz bench clean

all: build

build:
	$(GO) build -ldflags '$(LDFLAGS)' -o $(BIN) ./cmd/nlproxy

# A throwaway demo Postgres with sample data and the proxy in front. Ctrl-C,
# SIGTERM, SIGHUP or closing its stdout (| head, a closed tee) removes it.
run: build
	./$(BIN) demo

test: vet
	$(GO) test $(TESTFLAGS) ./...
	$(MAKE) fuzz

vet:
	@test -z "$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))" || { echo "gofmt needed:"; gofmt -l .; exit 1; }
	$(GO) vet ./...
	@# The relay links no cgo (docs/architecture.md); internal/archtest checks the import arrows.
	CGO_ENABLED=0 $(GO) build ./proxy/...

# Short fuzz runs: the proxy's framing and startup parsers, the SQL scanner
# against pg_query's, the SQL guard
# (seed corpora in each package's testdata/fuzz), and the differential check
# that nothing the guard accepts calls a user's function on a real server, and
# that the proxy's own connections (catalog, stats reader, perimeter) call none.
# The proxy's own connections' target starts a server in each fuzz worker
# and checks a database per input: FUZZTIME_PG gives it the time to get
# through its seed corpus and on to new inputs. scripts/fuzz.sh runs each
# target (and once more after Go 1.26's fuzzing deadline race, which
# fails a run that found nothing).
FUZZPKGS ?= ./proxy/ ./guard/ ./internal/sqlscan/ ./integration/asksafety/
FUZZPKGS_PG ?= ./integration/ownconn/
FUZZTIME_PG ?= 90s
fuzz:
	@for p in $(FUZZPKGS); do \
		for f in $$($(GO) test -list '^Fuzz' $$p | grep '^Fuzz'); do \
			echo "fuzz $$p $$f ($(FUZZTIME))"; \
			GO=$(GO) scripts/fuzz.sh $(FUZZTIME) $$p $$f || exit 1; \
		done; \
	done
	@for p in $(FUZZPKGS_PG); do \
		for f in $$($(GO) test -list '^Fuzz' $$p | grep '^Fuzz'); do \
			echo "fuzz $$p $$f ($(FUZZTIME_PG))"; \
			GO=$(GO) scripts/fuzz.sh $(FUZZTIME_PG) $$p $$f -parallel 1 || exit 1; \
		done; \
	done

bench: build
	./bench/run.sh

clean:
	rm -rf bin
