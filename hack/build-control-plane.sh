#!/usr/bin/env bash
# Builds the control-plane binaries the integration tests and the demo run:
# etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kwok, all
# from the Go module proxy through the helper modules under hack/tools (kept
# out of the main go.mod because they need replace directives).
#
# Binaries are cached in $GPUFABRIC_BIN_CACHE (default: .cache/bin, git-ignored)
# under a folder keyed by component version, so a warm run builds nothing.
# Prints the folder holding the binaries on its last line of stdout.
#
# Usage: hack/build-control-plane.sh [component ...]
#   components: etcd kube-apiserver kube-controller-manager kube-scheduler kwok
#   (default: all of them)
set -euo pipefail

ETCD_VERSION=v3.7.0
KUBE_VERSION=v1.37.1
KWOK_VERSION=v0.8.0

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cache=${GPUFABRIC_BIN_CACHE:-$root/.cache/bin}
goversion=$(go env GOVERSION)
dir="$cache/etcd-${ETCD_VERSION}_kube-${KUBE_VERSION}_kwok-${KWOK_VERSION}_${goversion}"
mkdir -p "$dir"

log() { printf '[build-control-plane %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
# shellcheck source=lib/heartbeat.sh
source "$root/hack/lib/heartbeat.sh"
export HEARTBEAT_PREFIX=build-control-plane

export CGO_ENABLED=0 GOFLAGS=-mod=mod GOWORK=off

kube_ldflags() {
	local pkg=k8s.io/component-base/version minor=${KUBE_VERSION#v1.}
	minor=${minor%%.*}
	echo "-s -w -X $pkg.gitVersion=$KUBE_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor" \
		"-X $pkg.gitTreeState=clean -X $pkg/verflag.programName=kubernetes"
}

# build NAME MODULE_DIR PACKAGE [LDFLAGS]
build() {
	local name=$1 moddir=$2 pkg=$3 ldflags=${4:-"-s -w"}
	if [[ -x "$dir/$name" ]]; then
		log "$name: cached"
		return
	fi
	log "$name: building $pkg (cold builds take minutes; kube-apiserver ~7 min on 2 cores)"
	local start=$SECONDS
	# Build to a temp name and rename, so an interrupted build never leaves a
	# half-written binary that a later run would take as cached.
	# A heartbeat every 30 s: the first `make demo` spends minutes here.
	with_heartbeat "building $name" bash -c 'cd "$1" && go build -trimpath -ldflags "$2" -o "$3" "$4"' _ \
		"$root/hack/tools/$moddir" "$ldflags" "$dir/.$name.tmp" "$pkg"
	mv "$dir/.$name.tmp" "$dir/$name"
	log "$name: built in $((SECONDS - start))s"
}

# kwok_stages assembles kwok's "fast" node and pod lifecycle stages from its
# module source into one file for `kwok -c`.
# Job pods are left running (pod-complete is not included): a training
# job's pods run until deleted, as in the demo and the tests.
kwok_stages() {
	[[ -s "$dir/kwok-stages-v2.yaml" ]] && return
	local src
	src=$(cd "$root/hack/tools/kwok" && go list -m -f '{{.Dir}}' sigs.k8s.io/kwok)/kustomize/stage
	local f first=1
	for f in "$src"/node/fast/node-initialize.yaml "$src"/node/heartbeat/node-heartbeat.yaml "$src"/pod/fast/pod-*.yaml; do
		[[ $f == */pod-complete.yaml ]] && continue
		[[ $first == 1 ]] || echo '---'
		first=0
		cat "$f"
	done > "$dir/.kwok-stages.yaml.tmp"
	mv "$dir/.kwok-stages.yaml.tmp" "$dir/kwok-stages-v2.yaml"
	log "kwok: stages assembled from $src"
}

components=("$@")
[[ ${#components[@]} -gt 0 ]] || components=(etcd kube-apiserver kube-controller-manager kube-scheduler kwok)
for c in "${components[@]}"; do
	case $c in
	etcd) build etcd etcd go.etcd.io/etcd/server/v3 ;;
	kube-apiserver | kube-controller-manager | kube-scheduler)
		build "$c" kube "k8s.io/kubernetes/cmd/$c" "$(kube_ldflags)" ;;
	kwok)
		build kwok kwok sigs.k8s.io/kwok/cmd/kwok \
			"-s -w -X sigs.k8s.io/kwok/pkg/consts.Version=$KWOK_VERSION -X sigs.k8s.io/kwok/pkg/consts.KubeVersion=$KUBE_VERSION"
		kwok_stages ;;
	*) log "unknown component $c"; exit 2 ;;
	esac
done
echo "$dir"
