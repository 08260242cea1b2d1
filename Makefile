# Sluice — the two commands a newcomer needs are `make run` and `make test`.

GO       ?= go
MODULES  := $(shell $(GO) list -m -f '{{.Dir}}' 2>/dev/null)
PKGS     := $(addsuffix /...,$(MODULES))
BIN      := bin
SERVICES := gateway scheduler worker reaper

.PHONY: run test test-short test-containers build bench vet fmt tidy clean lint-api docs-config

## run: start the whole system on the embedded default (NATS + store in ./.sluice)
run:
	$(GO) run ./cmd/sluice dev

## test: every module of the workspace, with the race detector
# Every package of ours is instrumented. RACE_SKIP compiles modernc.org's
# SQLite (C translated to Go, like cgo code never instrumented) without it:
# it is most of the CPU of every test on the embedded store or FerretDB
# (pkg/store/sqlite 62 s -> 12 s). Only modernc.org's engine and libc: leaving
# out nats-server, FerretDB or the driver package modernc.org/sqlite (which
# since v1.61 keeps a map of connections) too makes the detector report races
# that are not there (their uninstrumented copies of shared generic code hide
# the synchronization). The later -gcflags wins for the driver package.
# atexit_sleep_ms=0: a race-enabled binary otherwise sleeps 1 s on exit, once
# per test binary and once per race-built process a test starts.
# -trimpath: compiled packages are keyed by content, not by the checkout's
# directory, so a second clone or worktree reuses the build cache (111 s ->
# 49 s to build and link every test binary of a fresh clone).
RACE_SKIP := -gcflags=modernc.org/...=-race=false -gcflags=modernc.org/sqlite=-race
test: export GORACE ?= atexit_sleep_ms=0
test:
	$(GO) test -race $(RACE_SKIP) -trimpath -count=1 -timeout 20m $(PKGS)

## test-short: the inner loop: every module with -short (no process, chaos, Chromium or FerretDB tests)
test-short:
	$(GO) test -short -count=1 -timeout 5m $(PKGS)

## docs-config: write docs/configuration.md again from the services' Config types (a test fails while it differs)
docs-config:
	$(GO) run ./cmd/sluice/internal/configdoc/gen -o $(CURDIR)/docs/configuration.md

## lint-api: lint the served OpenAPI document with the Redocly CLI (0 errors, 0 warnings; needs node and npm)
lint-api:
	./scripts/lint-api

## test-containers: the store suite and the whole pipeline against real mongo:7 and nats:2.12 (needs Docker; skips without)
test-containers:
	$(GO) test -tags containers -race -count=1 -timeout 20m $(CURDIR)/pkg/store/mongo/... $(CURDIR)/cmd/sluice/internal/devstack/

## build: one binary per service, plus the sluice CLI, into ./bin
build:
	@mkdir -p $(BIN)
	@for s in $(SERVICES); do $(GO) build -o $(BIN)/$$s ./services/$$s || exit 1; done
	$(GO) build -o $(BIN)/sluice ./cmd/sluice

## bench: throughput, latency and memory figures on the embedded default
bench:
	$(GO) test -run '^$$' -bench . -benchtime 1x -count 1 -timeout 20m ./cmd/sluice/internal/devstack/
	$(GO) test -run '^$$' -bench '^BenchmarkClaimPacking$$' -benchtime 100x -count 1 ./pkg/store/sqlite/

.PHONY: bench-memory

## bench-memory: each service binary as its own process (NATS, gateway, scheduler, reaper, 4 workers × 256 slots) through a burn-down of 100,000 jobs; peak and final RSS of each against 64 MiB and their sum against 128 MiB (about 90 s)
bench-memory:
	$(GO) test -run '^$$' -bench '^BenchmarkMemory$$' -benchtime 1x -count 1 -timeout 20m ./cmd/sluice/internal/chaos/

.PHONY: bench-peers

# PEERS_DIR is the peers' harness (River on PostgreSQL, Asynq on Redis),
# beside the repository; PEERS_DATA is where it keeps its servers' data,
# binaries and results (its own PEERS_DIR variable).
PEERS_DIR  ?= ../shared/peers
PEERS_DATA ?= $(or $(TMPDIR),/tmp)/sluice-peers
PEERS_BENCH := '^(BenchmarkBurnDown|BenchmarkEndToEnd|BenchmarkOneSecondJobs)$$'

## bench-peers: the peers' figures (PEERS_DIR, default ../shared/peers) and Sluice's matching ones back to back, then one table of the ratios against the targets; Sluice's alone when the peers cannot be set up
bench-peers:
	@set -u; out=$$(mktemp -d); harness=$(abspath $(PEERS_DIR)); note=""; \
	report="$(GO) run ./cmd/sluice/internal/peers/report"; \
	$$report mark -results $(PEERS_DATA)/results -o $$out/mark.json || exit 1; \
	if [ ! -x $$harness/peers.sh ]; then \
		note="peers: no harness at $$harness (PEERS_DIR): Sluice's figures alone"; \
	elif ! PEERS_DIR=$(PEERS_DATA) $$harness/peers.sh setup > $$out/peers-setup.log 2>&1; then \
		note="peers: could not be set up (it needs apt and the network once; see $$out/peers-setup.log): Sluice's figures alone"; \
	elif ! PEERS_DIR=$(PEERS_DATA) $$harness/peers.sh run 2>&1 | tee $$out/peers.txt; then \
		note="peers: the run failed (see $$out/peers.txt): the figures it wrote are shown"; \
	fi; \
	[ -z "$$note" ] || echo "$$note"; \
	$(GO) test -run '^$$' -bench $(PEERS_BENCH) -benchtime 1x -count 1 -timeout 30m ./cmd/sluice/internal/devstack/ 2>&1 | tee $$out/sluice.txt; \
	echo; $$report table -sluice $$out/sluice.txt -results $(PEERS_DATA)/results -mark $$out/mark.json -note "$$note"

vet:
	$(GO) vet $(PKGS)

fmt:
	gofmt -l -w $(MODULES)

## tidy: go mod tidy in every module
tidy:
	@for m in $(MODULES); do (cd $$m && $(GO) mod tidy) || exit 1; done

clean:
	rm -rf $(BIN) .sluice

.PHONY: compose-up compose-down

## compose-up: the production shape on Docker: NATS, MongoDB, every service (deploy/compose)
compose-up:
	docker compose -f deploy/compose/compose.yaml up -d --build

## compose-down: stop and remove the containers (the NATS and MongoDB volumes stay)
compose-down:
	docker compose -f deploy/compose/compose.yaml down

.PHONY: swarm
## swarm: 10,000 simulated workers join a whole stack within a second, then 100,000 jobs run; one summary line (SLUICE_SWARM_WORKERS, SLUICE_SWARM_JOBS, SLUICE_SWARM_JOB_MS)
swarm:
	$(GO) test -run '^$$' -bench '^BenchmarkSwarm$$' -benchtime 1x -count 1 -timeout 30m ./cmd/sluice/internal/devstack/

.PHONY: chaos

## chaos: 10 minutes of load on the real binaries as separate processes while kill -9'ing services and NATS, deleting the job stream and freezing workers, then the invariant check; then a short run on the MongoDB driver against a FerretDB process that is killed too, and one on a 3-node NATS cluster (streams at 3 replicas) whose nodes are killed one at a time
chaos:
	SLUICE_CHAOS_LONG=10m SLUICE_CHAOS_MONGO=1 $(GO) test -run '^(TestChaosLong|TestChaosMongoShort|TestChaosCluster)$$' -count=1 -timeout 40m -v ./cmd/sluice/internal/chaos/

.PHONY: fuzz

## fuzz: every go test -fuzz target in turn, FUZZTIME each (default 5m); prints exec counts
fuzz:
	FUZZTIME=$${FUZZTIME:-5m} ./scripts/fuzz-all
