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

.PHONY: all build test unit integration lint tools control-plane bench demo clean

all: build

build:
	@mkdir -p bin
	$(GO) build -o bin/ ./cmd/...

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

# integration runs against a real etcd + kube-apiserver v1.37.1 (hack/demo's
# test runs the whole demo); the kubeletdra module drives the plugin with
# the real kubelet DRA manager.
integration: control-plane
	@hack/install-tools.sh helm >/dev/null
	export GPUFABRIC_CONTROL_PLANE_BIN=$$(hack/build-control-plane.sh 2>/dev/null | tail -n1); \
	$(GO) test -timeout $(TEST_TIMEOUT) ./test/integration/... ./hack/demo/... && \
	cd test/kubeletdra && $(GO) test -timeout $(TEST_TIMEOUT) ./...

test: lint build unit integration

# demo runs the main job on an embedded control plane (see README).
# FABRIC=path uses another fabric file; KEEP=1 keeps the cluster running.
demo: build control-plane
	GPUFABRIC_CONTROL_PLANE_BIN=$$(hack/build-control-plane.sh 2>/dev/null | tail -n1) \
		$(GO) run ./hack/demo $(if $(FABRIC),--fabric=$(FABRIC)) $(if $(KEEP),--keep)

bench:
	$(GO) test -run '^$$' -bench '$(BENCH)' -benchtime $(BENCHTIME) -benchmem $(PKGS)

clean:
	rm -rf bin
