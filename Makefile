# gpufabric — see README.md. `make test` is what CI runs.
SHELL := /usr/bin/env bash
.SHELLFLAGS := -euo pipefail -c

export CGO_CFLAGS := -Wno-deprecated-declarations
GO ?= go
TOOLS_DIR := $(CURDIR)/.cache/tools
PKGS := ./...
# Warm `make test` stays well under 15 minutes on 2 cores.
TEST_TIMEOUT ?= 20m
BENCH ?= .
BENCHTIME ?= 1x
# Time per fuzz target of `make fuzz` (fuzz-short, part of `make test`, uses 3s).
FUZZTIME ?= 60s

# The build's version and commit, stamped into every binary (--version,
# the first log line, gpufabric_<component>_build_info); the Dockerfiles
# take them as build args (hack/kind-up.sh passes them).
VERSION ?= $(shell git describe --tags --match 'v*' --dirty 2>/dev/null || echo devel)
COMMIT ?= $(shell c=$$(git rev-parse HEAD 2>/dev/null) && { git diff --quiet HEAD -- 2>/dev/null && echo $$c || echo $$c-dirty; } || echo unknown)
VERSION_PKG := github.com/gpufabric/gpufabric/pkg/component/version
LDFLAGS := -X $(VERSION_PKG).version=$(VERSION) -X $(VERSION_PKG).commit=$(COMMIT)

.PHONY: all build ldflags test unit fuzz fuzz-short integration lint tools control-plane bench demo soak e2e-node bench-peer clean

all: build

build:
	@mkdir -p bin
	$(GO) build -ldflags "$(LDFLAGS)" -o bin/ ./cmd/...

# ldflags prints the -ldflags of `make build` (for other builds and tests).
ldflags:
	@echo '$(LDFLAGS)'

tools:
	@hack/install-tools.sh staticcheck logcheck >/dev/null

# control-plane builds (or reuses) etcd, kube-apiserver, kube-controller-manager,
# kube-scheduler and kwok from the Go module proxy; cached in .cache/bin.
control-plane:
	@hack/build-control-plane.sh >/dev/null

lint: tools
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [[ -n "$$out" ]]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet $(PKGS)
	cd test/kubeletdra && $(GO) vet ./...
	$(TOOLS_DIR)/staticcheck $(PKGS)
	$(TOOLS_DIR)/logcheck -check-contextual -check-deprecations=false -config hack/logcheck.conf $(PKGS)

unit:
	$(GO) test -timeout $(TEST_TIMEOUT) $$($(GO) list ./... | grep -v -e /test/integration -e /hack/demo)

# integration runs against a real etcd + kube-apiserver v1.37.1: one test
# package per subject under test/integration (scheduler, plugin, chart,
# soak, faults, kubectl, workloads, framework; peer's benchmarks only with
# -bench), in parallel as go test runs packages; hack/demo's test runs the
# whole demo; the kubeletdra module drives the plugin with the real kubelet
# DRA manager. The packages share the scheduler and plugin binaries of
# `make build` (GPUFABRIC_SCHEDULER_BIN, GPUFABRIC_PLUGIN_BIN) instead of
# each building its own; Kueue and the workload controllers (JobSet, LWS,
# Trainer, KubeRay: hack/build-workload-controllers.sh) are built once
# before the packages start. The longest package (scheduler, ~8 min) is
# named first so that it starts first and the others run beside it (go
# test starts packages in the order given, two at a time on 2 cores).
INTEGRATION_BIN = GPUFABRIC_SCHEDULER_BIN=$(CURDIR)/bin/scheduler GPUFABRIC_PLUGIN_BIN=$(CURDIR)/bin/kubelet-plugin
integration: build control-plane
	@hack/install-tools.sh helm >/dev/null
	@hack/build-kueue.sh >/dev/null
	@hack/build-workload-controllers.sh >/dev/null
	export GPUFABRIC_CONTROL_PLANE_BIN=$$(hack/build-control-plane.sh 2>/dev/null | tail -n1) $(INTEGRATION_BIN); \
	$(GO) test -timeout $(TEST_TIMEOUT) ./test/integration/scheduler/ ./test/integration/... ./hack/demo/... && \
	cd test/kubeletdra && $(GO) test -timeout $(TEST_TIMEOUT) ./...

# fuzz runs every Go fuzz target for $(FUZZTIME) each (hack/fuzz.sh;
# FUZZ=regexp picks targets); the corpus is kept in .cache/fuzz.
fuzz:
	FUZZTIME=$(FUZZTIME) hack/fuzz.sh

# fuzz-short runs every fuzz target for 3s (about 70 s warm on 2 cores).
fuzz-short:
	FUZZTIME=3s hack/fuzz.sh

test: lint build unit fuzz-short integration

# soak runs the chaos soak (scheduler SIGKILLed, a fault proxy in front of
# it, concurrent gangs, node faults under them) for $(SOAK_DURATION);
# `make test` runs 40 s of it.
# Then the large-gang test with $(SOAK_LARGE_GANG_PODS) pods (`make test`
# runs 1,000).
SOAK_DURATION ?= 10m
SOAK_SEED ?= 1
SOAK_LARGE_GANG_PODS ?= 2000
soak: control-plane
	@hack/install-tools.sh helm >/dev/null
	GPUFABRIC_CONTROL_PLANE_BIN=$$(hack/build-control-plane.sh 2>/dev/null | tail -n1) \
	GPUFABRIC_SOAK_DURATION=$(SOAK_DURATION) GPUFABRIC_SOAK_SEED=$(SOAK_SEED) \
		$(GO) test -timeout 60m -count 1 -run '^TestChaosSoak$$' -v ./test/integration/soak/ 2>&1 | grep -E '^(soak:|--- |ok|FAIL|PASS)|VIOLATION'
	GPUFABRIC_CONTROL_PLANE_BIN=$$(hack/build-control-plane.sh 2>/dev/null | tail -n1) \
	GPUFABRIC_LARGE_GANG_PODS=$(SOAK_LARGE_GANG_PODS) \
		$(GO) test -timeout 30m -count 1 -run '^TestSchedulerLargeGang$$' -v ./test/integration/scheduler/ 2>&1 | grep -E '^(--- |ok|FAIL|PASS)|largegang_test'


# demo runs the main job on an embedded control plane (see README).
# FABRIC=path uses another fabric file; KEEP=1 keeps the cluster running.
demo: build control-plane
	GPUFABRIC_CONTROL_PLANE_BIN=$$(hack/build-control-plane.sh 2>/dev/null | tail -n1) \
		$(GO) run ./hack/demo $(if $(FABRIC),--fabric=$(FABRIC)) $(if $(KEEP),--keep)

# e2e-node runs a pod on a real node: kubelet v1.37.1 and containerd v2.4.2
# (built from the Go module proxy by hack/build-node.sh, cached in .cache/bin)
# and runc (Debian), with devices the plugin prepared on a mock GB200 tray
# (test/e2enode). Needs root, cgroups and overlayfs. Not part of `make test`:
# its cold build alone takes about 8 minutes.
e2e-node: control-plane
	@command -v runc >/dev/null || { echo "e2e-node needs runc: apt-get install -y runc" >&2; exit 1; }
	GPUFABRIC_CONTROL_PLANE_BIN=$$(hack/build-control-plane.sh 2>/dev/null | tail -n1) \
	GPUFABRIC_NODE_BIN=$$(hack/build-node.sh | tail -n1) \
		$(GO) test -count=1 -timeout 20m -v -run '^TestRealNode$$' ./test/e2enode/

bench:
	$(GO) test -run '^$$' -bench '$(BENCH)' -benchtime $(BENCHTIME) -benchmem $(PKGS)

# bench-peer runs gpufabric-scheduler and kube-scheduler v1.37.1 side by side
# on one control plane and the same kwok nodes (test/integration/peer
# BenchmarkPeer; results in docs/benchmarks.md): PEER_RUNS interleaved
# runs per workload on PEER_NODES nodes, with the API floor of each one-gang
# shape. PEER_WORKLOADS (comma list; empty: all but the trees) picks
# workloads: small (PEER_SMALL_GANGS gangs of 3 one-GPU pods), 64x1gpu,
# 64x1gpu-rack, 64x8gpu, 64x8gpu-leaf, 512x1gpu, 512x1gpu-leaf, 512x8gpu,
# and the CompositePodGroup trees (issue 25; "trees" names both; they turn
# the CompositePodGroup gate on for the whole run): tree8x16 (one tree of 8
# PodGroups × 16 pods × 8 GPUs, each in one NVLink domain, the tree in one
# IB leaf) and tree-greedy-trap (PEER_TRAP_TREES trees of two PodGroups on
# leaves shaped so that kube-scheduler's greedy sibling order fails for half
# of them; GPUFABRIC_PEER_TRAP_WAIT_S, default 90, is how long it waits after
# the last create). bench-peer-traces runs the
# fill-to-first-refusal and churn traces (BenchmarkPeerFill,
# BenchmarkPeerChurn; their knobs are GPUFABRIC_PEER_FILL_* and
# GPUFABRIC_PEER_CHURN_* in the environment). In the environment too:
# GPUFABRIC_PEER_PROFILE_DIR (CPU profiles, timelines and logs of
# gpufabric-scheduler per run) and GPUFABRIC_PEER_BASELINE_BIN (a second
# gpufabric-scheduler binary measured in the same runs), and
# GPUFABRIC_PEER_SCHEDULERS (gpufabric, kube, baseline: a comma list; empty:
# all). Not part of `make test`.
PEER_RUNS ?= 3
PEER_NODES ?= 1000
PEER_SMALL_GANGS ?= 300
PEER_WORKLOADS ?=
PEER_TRACE_RUNS ?= 1
PEER_TRAP_TREES ?= 4
PEER_ENV = GPUFABRIC_CONTROL_PLANE_BIN=$$(hack/build-control-plane.sh 2>/dev/null | tail -n1) GPUFABRIC_PEER_NODES=$(PEER_NODES) \
	GPUFABRIC_PEER_RUNS=$(PEER_RUNS) GPUFABRIC_PEER_SMALL_GANGS=$(PEER_SMALL_GANGS) GPUFABRIC_PEER_WORKLOADS=$(PEER_WORKLOADS) \
	GPUFABRIC_PEER_TRACE_RUNS=$(PEER_TRACE_RUNS) GPUFABRIC_PEER_TRAP_TREES=$(PEER_TRAP_TREES)
.PHONY: bench-peer-traces
bench-peer: control-plane
	$(PEER_ENV) $(GO) test -run '^$$' -bench '^BenchmarkPeer$$' -benchtime 1x -count 1 -timeout 360m -v ./test/integration/peer/ 2>&1 | \
		grep -E '^(Benchmark|ok|FAIL|PASS)|_test.go:|--- '

bench-peer-traces: control-plane
	$(PEER_ENV) $(GO) test -run '^$$' -bench '^BenchmarkPeer(Fill|Churn)$$' -benchtime 1x -count 1 -timeout 180m -v ./test/integration/peer/ 2>&1 | \
		grep -E '^(Benchmark|ok|FAIL|PASS)|_test.go:|--- '

clean:
	rm -rf bin
