# csi-clone-sidecar. `make demo` runs the main job locally, `make test` runs
# every test (unit, fuzz smoke, csi-sanity, end to end). Heavy tools are built
# once into $(TOOLS_CACHE) by test/tools/build.sh and never rebuilt when warm.

GO          ?= go
VERSION     ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
# -buildid=: no build id, so that one commit builds the same bytes (make release).
LDFLAGS     := -s -w -buildid= -X main.version=$(VERSION)
GOBUILD     := CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)'
TOOLS_CACHE ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/csi-clone-sidecar
IMAGE       ?= ghcr.io/cozystack/csi-clone-sidecar:$(VERSION)
IMAGE_DIR   ?= $(BIN)/image
PLATFORMS   ?= linux/amd64 linux/arm64
SOURCE_URL  := https://github.com/cozystack/csi-clone-sidecar
REVISION    ?= $(shell git rev-parse HEAD 2>/dev/null || echo unknown)
CREATED     ?= $(shell git log -1 --format=%cI 2>/dev/null)
FUZZTIME    ?= 20s
DIFFTIME    ?= 60s
E2E_RUN     ?= .
# E2E_RACE=1: the end-to-end, soak and CDI differential tests run a sidecar
# built with -race and fail on a race report in its log (test/cluster).
E2E_RACE    ?= 1
BIN         ?= bin
# build.sh builds into it and the tests (test/tools.Bin) look there.
export TOOLS_CACHE

.PHONY: all build sidecar tools test lint-workflows release publish unit noskip fuzz diff cdidiff e2e mutation mutation-hand soak bench bench-e2e bench-scale demo lint image docker-image chart clean

all: build

## build: the sidecar and the test driver into $(BIN)/ (bin/)
build: sidecar
	$(GOBUILD) -o $(BIN)/csi-test-driver ./test/cmd/csi-test-driver

## sidecar: only the sidecar binary (what the image ships)
sidecar:
	$(GOBUILD) -o $(BIN)/csi-clone-sidecar ./cmd/csi-clone-sidecar

## tools: the Debian packages the tests use (installed when missing), and the pinned Kubernetes, CSI sidecar and CDI binaries, built once into the cache
tools:
	test/tools/packages.sh
	test/tools/build.sh

## test: everything CI runs
test: tools lint-workflows unit fuzz diff e2e

## unit: unit tests (every package that runs goroutines under the race detector), csi-sanity against the test driver directly and through the relay, and the tests of our programs in the CDI tools module
# Not raced: deploy (renders and lints manifests, builds and runs the image;
# no goroutines of its own) and test/memory (measures a child's RSS). The
# latter does run goroutines (an in-process driver serving 4 MiB replies,
# concurrent clients, a sampler), but under -race that driver is too slow
# for its deadlines (2026-12-04, loaded 2-core machine: DeadlineExceeded
# after 588 s); its subject, the sidecar binary, is raced in make e2e.
NORACE_PKGS := ./deploy/... ./test/memory
unit: noskip
	$(GO) vet ./...
	$(NOSKIP) $(GO) test -json -count=1 -race -timeout 30m $$($(GO) list ./... | grep -Ev '/test/e2e|/deploy(/|$$)|/test/memory$$')
	@# -timeout: deploy's image tests build the image (an arm64 compile, minutes on a cold cache), run it under podman, and build the Dockerfile for two platforms with buildah
	$(NOSKIP) $(GO) test -json -count=1 -timeout 30m $(NORACE_PKGS)
	@# The pinned tools' modules (test/tools/mod) hold tests of their own: the
	@# kubernetes-csi sidecars' rules against the sidecar's tables, our CDI
	@# programs. Built as build.sh builds them, so the packages compiled for
	@# the tools are reused.
	@for m in $$(find test/tools/mod -name '*_test.go' | cut -d/ -f4 | sort -u); do \
		echo "cd test/tools/mod/$$m && CGO_ENABLED=0 $(GO) test -mod=mod -trimpath -count=1 ./..."; \
		(cd test/tools/mod/$$m && CGO_ENABLED=0 $(GO) test -mod=mod -trimpath -count=1 ./...) || exit 1; \
	done

## fuzz: short runs of the tap's fuzz targets: the parser, the wire decoder against protobuf, the frame reader against x/net's Framer (FUZZTIME=10m for long ones)
# -fuzzminimizetime 0: a smoke run keeps new inputs as found; minimizing one
# found near the end can outlast -fuzztime and end the run with "context
# deadline exceeded" although nothing failed.
fuzz:
	$(GO) test ./sidecar -run '^$$' -fuzz '^FuzzTap$$' -fuzztime $(FUZZTIME) -fuzzminimizetime 0
	$(GO) test ./sidecar -run '^$$' -fuzz '^FuzzDecode$$' -fuzztime $(FUZZTIME) -fuzzminimizetime 0
	$(GO) test ./sidecar -run '^$$' -fuzz '^FuzzWireFramesMatchXNetFramer$$' -fuzztime $(FUZZTIME) -fuzzminimizetime 0

## diff: the tap's differential property test: random sessions encoded by x/net (grpc-go's reaction resets included), at GOMAXPROCS 2, 4 and 8 in turn, checked call by call (DIFFTIME=10m for a long one)
diff:
	CSI_CLONE_DIFF_TIME=$(DIFFTIME) $(GO) test -count=1 -v -run '^TestTapDifferential$$' ./sidecar

## cdidiff: cloner/cdirules (the prediction) against the real cdi-controller over seeded arrangements; `make e2e` runs it with 240 (CDIRULES_ARRANGEMENTS=1000 for more, CDIRULES_SEED=<n> to replay a run, CDIRULES_BREAK=<break> to see it fail)
cdidiff: build
	CSI_CLONE_E2E_RACE=$(E2E_RACE) $(GO) test -count=1 -v -timeout 120m -run '^TestCDIRulesMatchCDIController$$' ./test/e2e/

## e2e: end-to-end tests on the loopback stack (each test binary re-executes itself in a private network namespace)
# The CDI differential test runs seed 4 here unless CDIRULES_SEED is set: the
# same 240 arrangements every run, in which each of its nineteen breaks changes
# outcomes (fewest: minsize and permissive, 2) and 103 end in a storage-layer
# clone; make cdidiff draws a new seed.
e2e: build noskip
	CSI_CLONE_E2E_RACE=$(E2E_RACE) CDIRULES_SEED=$${CDIRULES_SEED:-4} $(NOSKIP) $(GO) test -json -count=1 -timeout 60m -run '$(E2E_RUN)' ./test/e2e/...

# noskip runs a `go test -json` command, prints what plain go test would and
# fails if any test skipped (test/tools/noskip).
NOSKIP := $(BIN)/noskip
noskip:
	$(GO) build -o $(NOSKIP) ./test/tools/noskip

## mutation: mutation testing, not part of make test (report in docs/testing.md): first the hand-written semantic mutants (mutation-hand), then gremlins (from the tools cache) on the pure rules, one package at a time: predictions, metric labels, the tap's status and method mapping, the verdict rules (MUTATION_TIMEOUT=40m per target)
mutation: mutation-hand
	test/tools/build.sh gremlins
	test/tools/mutation.sh $(MUTATION_TARGETS)

## mutation-hand: the hand-written semantic mutants of test/mutants/mutants.txt, each applied to a copy of the tree and judged by its own package's tests; fails unless every one is killed (MUTANTS_ONLY=<file regexp> runs some)
MUTANTS_ONLY ?=
mutation-hand:
	$(GO) run ./test/mutants/run -only '$(MUTANTS_ONLY)'

## soak: worker clones in waves while the sidecar is SIGKILLed, the API server stopped, the driver and the verdict leader killed (200 disks; `make test` runs it with 40)
SOAK_DISKS ?= 200
SOAK_WAVE  ?= 20
soak: tools build
	CSI_CLONE_E2E_RACE=$(E2E_RACE) CSI_CLONE_SOAK_DISKS=$(SOAK_DISKS) CSI_CLONE_SOAK_WAVE=$(SOAK_WAVE) $(GO) test -count=1 -timeout 3h -v -run '^TestSoak$$' ./test/e2e/

## bench-e2e: the same waves of clones through the sidecar and straight to the driver, alternating: ratio of total times, clone throughput (not a test; BENCH_E2E_FLAGS="-wave=20 -rounds=4 -warmup=1")
BENCH_E2E_FLAGS ?=
bench-e2e: tools build
	$(GO) build -o bin/csi-clone-bench-e2e ./test/benche2e
	test/e2e/run-in-netns.sh bin/csi-clone-bench-e2e $(BENCH_E2E_FLAGS)

## bench: the relay's cost against the driver directly, short rounds then one long connection per mode (not a test; BENCH_FLAGS=-long=false or -short=false runs one part)
BENCH_FLAGS ?=
bench:
	$(GO) run ./test/bench $(BENCH_FLAGS)

## bench-scale: the verdict engine on a synthetic fleet (BENCH_SCALE_FLAGS=-disks=1000; default 10,000 disks, 200 namespaces, 20 flavors): sync time, time to verdicts, RSS, CPU, API requests, /metrics, ledger size (not a test)
BENCH_SCALE_FLAGS ?=
bench-scale: tools build
	$(GO) build -o bin/csi-clone-benchscale ./test/benchscale
	test/e2e/run-in-netns.sh bin/csi-clone-benchscale -sidecar bin/csi-clone-sidecar $(BENCH_SCALE_FLAGS)

## demo: a Talos golden, a vm-default-images golden and its VolumeSnapshot, 24 disks in 10 pools on the loopback stack; the verdicts, the report (also as $(BIN)/demo-report.html), the metrics (KEEP=1 leaves it running)
demo: tools build
	$(GO) build -o bin/csi-clone-demo ./test/demo
	test/e2e/run-in-netns.sh bin/csi-clone-demo -sidecar bin/csi-clone-sidecar -html $(BIN)/demo-report.html $(if $(filter-out 0,$(KEEP)),-keep)

## chart: regenerate what is derived from deploy/'s sources: the chart's files/ (rules, dashboard, RBAC rules, admission policy and binding), deploy/linstor/podtemplate.yaml and the PrometheusRule (needs Helm: make tools)
chart:
	test/tools/build.sh helm
	$(GO) test -count=1 ./deploy -run '^(TestChartGeneratedFilesAreCurrent|TestPrometheusRuleMatchesRulesFile)$$' -update

## lint: formatting and vet
lint:
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); exit 1; }
	$(GO) vet ./...

## image: the multi-arch OCI image without a container engine: `make sidecar` per platform, then test/tools/image writes $(IMAGE_DIR)/oci (an OCI layout) and one docker-archive per platform
image:
	@for p in $(PLATFORMS); do \
		echo "GOOS=$${p%/*} GOARCH=$${p#*/} make sidecar BIN=$(IMAGE_DIR)/$$p"; \
		GOOS=$${p%/*} GOARCH=$${p#*/} $(MAKE) --no-print-directory sidecar BIN=$(IMAGE_DIR)/$$p || exit 1; \
	done
	$(GO) run ./test/tools/image -out $(IMAGE_DIR) -tag $(IMAGE) -version $(VERSION) -revision $(REVISION) \
		-source $(SOURCE_URL) -created '$(CREATED)' $(foreach p,$(PLATFORMS),-binary $(p)=$(IMAGE_DIR)/$(p)/csi-clone-sidecar)

## release: VERSION=vX.Y.Z: the release, reproducibly and without a container engine, into $(DIST)/: the binaries (linux/amd64, linux/arm64), their SBOMs (CycloneDX), the multi-arch image as an OCI layout, the chart with the image pinned by digest, SHA256SUMS (docs/release.md)
DIST               ?= dist
RELEASE_REPOSITORY ?= ghcr.io/cozystack/csi-clone-sidecar
release:
	test/tools/build.sh helm cyclonedx-gomod
	VERSION=$(VERSION) DIST=$(DIST) GO=$(GO) RELEASE_REPOSITORY=$(RELEASE_REPOSITORY) PLATFORMS='$(PLATFORMS)' test/tools/release.sh build

## publish: REGISTRY=host/org VERSION=vX.Y.Z: push what `make release` built: the image by digest to REGISTRY/csi-clone-sidecar, tagged VERSION and vX.Y (not for a pre-release), the chart to oci://REGISTRY/charts (HELM_PUSH_FLAGS=--plain-http for a registry without TLS); prints the references
publish:
	test/tools/build.sh helm
	VERSION=$(VERSION) DIST=$(DIST) GO=$(GO) REGISTRY=$(REGISTRY) RELEASE_REPOSITORY=$(RELEASE_REPOSITORY) HELM_PUSH_FLAGS='$(HELM_PUSH_FLAGS)' test/tools/release.sh publish

## lint-workflows: actionlint (pinned, from the tools cache) on .github/workflows
# Without shellcheck and pyflakes: actionlint runs whichever is on PATH, and
# neither is pinned, so the result would differ between machines.
lint-workflows:
	test/tools/build.sh actionlint
	$(TOOLS_CACHE)/bin/actionlint-$$(awk '$$1 == "bin" && $$2 == "actionlint" { print $$3 }' test/tools/versions.txt) -color=false -shellcheck= -pyflakes=

## docker-image: the same image with a Docker engine (Dockerfile; docker buildx build --platform linux/amd64,linux/arm64 for both)
docker-image:
	docker build --build-arg VERSION=$(VERSION) --build-arg REVISION=$(REVISION) -t $(IMAGE) .

clean:
	rm -rf bin $(DIST)
