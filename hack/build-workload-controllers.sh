#!/usr/bin/env bash
# Builds the workload controllers users run in front of gpufabric, for the
# integration tests (test/integration/workloads): the JobSet controller,
# the LeaderWorkerSet controller, the Kubeflow Trainer v2 controller manager
# and the KubeRay operator, from the Go module proxy through helper modules
# under hack/tools (kept out of the main go.mod: they pin k8s.io/* of
# Kubernetes 1.35 and 1.36). See docs/workload-controllers.md.
#
# The binaries are cached in $GPUFABRIC_BIN_CACHE (default: .cache/bin,
# git-ignored) under one folder keyed by the four versions and the Go
# version, so a warm run builds nothing. Beside each binary go its CRDs
# (<name>-crds.yaml) and, where its default install registers webhooks, its
# webhook configurations (<name>-webhooks.yaml) with the kustomize patches
# the install applies to them (<name>-webhooks-{mutating,validating}-patch.yaml),
# all from the same module source; the test framework installs them.
# Progress goes to stderr; the last line of stdout is the folder.
#
# Usage: hack/build-workload-controllers.sh [jobset|lws|trainer|kuberay ...]
#   (default: all four)
set -euo pipefail

JOBSET_VERSION=v0.12.0
LWS_VERSION=v0.9.0
TRAINER_VERSION=v2.3.0
KUBERAY_VERSION=v1.6.0

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cache=${GPUFABRIC_BIN_CACHE:-$root/.cache/bin}
goversion=$(go env GOVERSION)
dir="$cache/jobset-${JOBSET_VERSION}_lws-${LWS_VERSION}_trainer-${TRAINER_VERSION}_kuberay-${KUBERAY_VERSION}_${goversion}"
mkdir -p "$dir"

log() { printf '[build-workload-controllers %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
# shellcheck source=lib/heartbeat.sh
source "$root/hack/lib/heartbeat.sh"
export HEARTBEAT_PREFIX=build-workload-controllers

export CGO_ENABLED=0 GOFLAGS=-mod=mod GOWORK=off

# moddir NAME: the helper module that builds NAME. JobSet, LWS and Trainer
# share one (the same k8s.io v0.36 and controller-runtime v0.24 packages
# compile once); KubeRay pins Kubernetes 1.35 and controller-runtime v0.22
# and has its own.
moddir() {
	case $1 in
	kuberay) echo "$root/hack/tools/kuberay" ;;
	*) echo "$root/hack/tools/workloads" ;;
	esac
}

# check_pin NAME MODULE VERSION: the helper module must pin the version this
# script names, or the cache key would lie.
check_pin() {
	local pinned
	pinned=$(cd "$(moddir "$1")" && go list -m -f '{{.Version}}' "$2")
	if [[ $pinned != "$3" ]]; then
		log "$(moddir "$1") pins $2 $pinned, this script $3"
		exit 2
	fi
}

# build NAME PACKAGE LDFLAGS
build() {
	local name=$1 pkg=$2 ldflags=$3
	if [[ -x "$dir/$name" ]]; then
		log "$name: cached"
		return
	fi
	log "$name: building $pkg (cold: minutes on 2 cores)"
	local start=$SECONDS
	# Build to a temp name and rename, so an interrupted build never leaves
	# a half-written binary that a later run would take as cached.
	with_heartbeat "building $name" bash -c 'cd "$1" && go build -trimpath -ldflags "$2" -o "$3" "$4"' _ \
		"$(moddir "$name")" "$ldflags" "$dir/.$name.tmp" "$pkg"
	mv "$dir/.$name.tmp" "$dir/$name"
	log "$name: built in $((SECONDS - start))s"
}

# src NAME MODULE: the module's source folder (in the module cache).
src() { (cd "$(moddir "$1")" && go list -m -f '{{.Dir}}' "$2"); }

# put FILE: moves $dir/.FILE.tmp (written by the caller) to $dir/FILE.
put() {
	chmod 644 "$dir/.$1.tmp"
	mv "$dir/.$1.tmp" "$dir/$1"
}

# assets NAME SRC CRD_GLOB [WEBHOOK_DIR MUTATING_PATCH VALIDATING_PATCH]:
# copies the CRDs (what the install's kustomization lists) and the webhook
# configurations with the install's patches of them, unless already there.
assets() {
	local name=$1 from=$2 crds=$3 hooks=${4:-} f
	[[ -s "$dir/$name-crds.yaml" ]] && return
	for f in $from/$crds; do
		echo '---'
		cat "$f"
	done > "$dir/.$name-crds.yaml.tmp"
	if [[ -n $hooks ]]; then
		cp "$from/$hooks/manifests.yaml" "$dir/.$name-webhooks.yaml.tmp"
		cp "$from/$hooks/$5" "$dir/.$name-webhooks-mutating-patch.yaml.tmp"
		cp "$from/$hooks/$6" "$dir/.$name-webhooks-validating-patch.yaml.tmp"
		put "$name-webhooks.yaml"
		put "$name-webhooks-mutating-patch.yaml"
		put "$name-webhooks-validating-patch.yaml"
	fi
	put "$name-crds.yaml" # last: it marks the assets complete
	log "$name: CRDs${hooks:+ and webhook configurations} copied from $from"
}

controllers=("$@")
[[ ${#controllers[@]} -gt 0 ]] || controllers=(jobset lws trainer kuberay)
for c in "${controllers[@]}"; do
	case $c in
	jobset)
		check_pin jobset sigs.k8s.io/jobset "$JOBSET_VERSION"
		build jobset sigs.k8s.io/jobset "-s -w -X sigs.k8s.io/jobset/pkg/version.GitVersion=$JOBSET_VERSION"
		assets jobset "$(src jobset sigs.k8s.io/jobset)/config/components" 'crd/bases/*.yaml' \
			webhook patches/mutating-patch.yaml patches/validating-patch.yaml ;;
	lws)
		check_pin lws sigs.k8s.io/lws "$LWS_VERSION"
		build lws sigs.k8s.io/lws/cmd "-s -w -X sigs.k8s.io/lws/pkg/version.GitVersion=$LWS_VERSION"
		assets lws "$(src lws sigs.k8s.io/lws)/config" 'crd/bases/*.yaml' \
			webhook mutating-patch.yaml validating-patch.yaml ;;
	trainer)
		# Trainer runs on JobSet: the tests start both.
		check_pin trainer github.com/kubeflow/trainer/v2 "$TRAINER_VERSION"
		build trainer github.com/kubeflow/trainer/v2/cmd/trainer-controller-manager "-s -w"
		assets trainer "$(src trainer github.com/kubeflow/trainer/v2)/manifests/base" 'crds/trainer.kubeflow.org_*.yaml' \
			webhook patch_mutating.yaml patch_validating.yaml ;;
	kuberay)
		# KubeRay's default install registers no webhook (ENABLE_WEBHOOKS
		# is only set by config/default-with-webhooks).
		check_pin kuberay github.com/ray-project/kuberay/ray-operator "$KUBERAY_VERSION"
		build kuberay github.com/ray-project/kuberay/ray-operator "-s -w"
		assets kuberay "$(src kuberay github.com/ray-project/kuberay/ray-operator)/config" 'crd/bases/ray.io_*.yaml' ;;
	*) log "unknown controller $c (jobset, lws, trainer, kuberay)"; exit 2 ;;
	esac
done
echo "$dir"
