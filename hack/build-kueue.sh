#!/usr/bin/env bash
# Builds the Kueue controller manager (sigs.k8s.io/kueue/cmd/kueue) that the
# Kueue integration test runs, from the Go module proxy through the helper
# module hack/tools/kueue (kept out of the main go.mod: Kueue pins k8s.io/*
# of Kubernetes 1.36). See docs/kueue.md for why this version.
#
# The binary is cached in $GPUFABRIC_BIN_CACHE (default: .cache/bin,
# git-ignored) under a folder keyed by Kueue and Go versions, so a warm run
# builds nothing. Beside the binary go Kueue's CRDs (kueue-crds.yaml) and
# webhook configurations (kueue-webhooks.yaml) from the same module source,
# which the test framework installs. Progress goes to stderr; the last line
# of stdout is the folder.
#
# Usage: hack/build-kueue.sh
set -euo pipefail

KUEUE_VERSION=v0.19.2

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cache=${GPUFABRIC_BIN_CACHE:-$root/.cache/bin}
goversion=$(go env GOVERSION)
dir="$cache/kueue-${KUEUE_VERSION}_${goversion}"
moddir="$root/hack/tools/kueue"
mkdir -p "$dir"

log() { printf '[build-kueue %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

export CGO_ENABLED=0 GOFLAGS=-mod=mod GOWORK=off

# The helper module must pin the version this script names, or the cache
# key would lie.
pinned=$(cd "$moddir" && go list -m -f '{{.Version}}' sigs.k8s.io/kueue)
if [[ $pinned != "$KUEUE_VERSION" ]]; then
	log "hack/tools/kueue pins sigs.k8s.io/kueue $pinned, this script $KUEUE_VERSION"
	exit 2
fi

if [[ -x "$dir/kueue" ]]; then
	log "kueue: cached"
else
	log "kueue: building sigs.k8s.io/kueue/cmd/kueue $KUEUE_VERSION (cold: minutes on 2 cores)"
	start=$SECONDS
	pkg=sigs.k8s.io/kueue/pkg/version
	# Build to a temp name and rename, so an interrupted build never leaves
	# a half-written binary that a later run would take as cached.
	(cd "$moddir" && go build -trimpath \
		-ldflags "-s -w -X $pkg.GitVersion=$KUEUE_VERSION" \
		-o "$dir/.kueue.tmp" sigs.k8s.io/kueue/cmd/kueue)
	mv "$dir/.kueue.tmp" "$dir/kueue"
	log "kueue: built in $((SECONDS - start))s"
fi
# assets copies the CRDs and webhook configurations of the pinned module
# (what Kueue's kustomize or Helm install would apply) next to the binary.
assets() {
	[[ -s "$dir/kueue-crds.yaml" && -s "$dir/kueue-webhooks.yaml" ]] && return
	local src f
	src=$(cd "$moddir" && go list -m -f '{{.Dir}}' sigs.k8s.io/kueue)/config/components
	for f in "$src"/crd/bases/*.yaml; do
		echo '---'
		cat "$f"
	done > "$dir/.kueue-crds.yaml.tmp"
	cp "$src/webhook/manifests.yaml" "$dir/.kueue-webhooks.yaml.tmp"
	chmod 644 "$dir/.kueue-crds.yaml.tmp" "$dir/.kueue-webhooks.yaml.tmp"
	mv "$dir/.kueue-crds.yaml.tmp" "$dir/kueue-crds.yaml"
	mv "$dir/.kueue-webhooks.yaml.tmp" "$dir/kueue-webhooks.yaml"
	log "kueue: CRDs and webhook configurations copied from $src"
}
assets
echo "$dir"
