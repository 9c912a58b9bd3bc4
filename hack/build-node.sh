#!/usr/bin/env bash
# Builds the node components of the real-node test (make e2e-node) from the
# Go module proxy: the kubelet (hack/tools/kubelet), containerd with its runc
# shim and ctr, and nvidia-cdi-hook (hack/tools/cdihook, the version whose
# nvcdi the plugin uses). runc itself comes from Debian (apt-get install runc).
#
# Binaries are cached in $GPUFABRIC_BIN_CACHE (default: .cache/bin) under a
# folder keyed by versions, so a warm run builds nothing. Prints that folder
# on its last line of stdout.
#
# Cold times on 2 cores: kubelet ~75 s (after the control plane's build
# cache), containerd + shim + ctr ~3 min, nvidia-cdi-hook ~10 s.
set -euo pipefail

KUBE_VERSION=v1.37.1
CONTAINERD_VERSION=v2.4.2
TOOLKIT_VERSION=v1.18.1

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cache=${GPUFABRIC_BIN_CACHE:-$root/.cache/bin}
goversion=$(go env GOVERSION)
dir="$cache/node-kubelet-${KUBE_VERSION}_containerd-${CONTAINERD_VERSION}_nvct-${TOOLKIT_VERSION}_${goversion}"
mkdir -p "$dir"

log() { printf '[build-node %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
export GOWORK=off

# build NAME DIR PACKAGE LDFLAGS [ENV...]: go build in a helper module, to a
# temp name first so that an interrupted build never looks cached.
build() {
	local name=$1 moddir=$2 pkg=$3 ldflags=$4
	shift 4
	if [[ -x "$dir/$name" ]]; then
		log "$name: cached"
		return
	fi
	log "$name: building $pkg"
	local start=$SECONDS
	(cd "$root/hack/tools/$moddir" && env "$@" go build -trimpath -ldflags "$ldflags" -o "$dir/.$name.tmp" "$pkg")
	mv "$dir/.$name.tmp" "$dir/$name"
	log "$name: built in $((SECONDS - start))s"
}

ver=k8s.io/component-base/version
build kubelet kubelet k8s.io/kubernetes/cmd/kubelet \
	"-s -w -X $ver.gitVersion=$KUBE_VERSION -X $ver.gitMajor=1 -X $ver.gitMinor=37 -X $ver.gitTreeState=clean" \
	CGO_ENABLED=0 GOFLAGS=-mod=readonly
build nvidia-cdi-hook cdihook github.com/NVIDIA/nvidia-container-toolkit/cmd/nvidia-cdi-hook \
	'-s -w -linkmode external -extldflags "-static"' \
	CGO_ENABLED=1 CGO_CFLAGS=-Wno-deprecated-declarations GOFLAGS=-mod=readonly

# containerd has no replace directives: go install at the exact version.
missing=()
for b in containerd containerd-shim-runc-v2 ctr; do
	[[ -x "$dir/$b" ]] || missing+=("github.com/containerd/containerd/v2/cmd/$b@$CONTAINERD_VERSION")
done
if [[ ${#missing[@]} -gt 0 ]]; then
	log "containerd $CONTAINERD_VERSION: building ${#missing[@]} commands (cold: about 3 min)"
	start=$SECONDS
	tmp=$(mktemp -d "$dir/.containerd.XXXX")
	trap 'rm -rf "$tmp"' EXIT
	GOBIN=$tmp CGO_ENABLED=0 GOFLAGS= go install -trimpath -tags 'no_btrfs no_devmapper no_zfs' \
		-ldflags "-s -w -X github.com/containerd/containerd/v2/version.Version=$CONTAINERD_VERSION" "${missing[@]}"
	mv "$tmp"/* "$dir/"
	log "containerd: built in $((SECONDS - start))s"
else
	log "containerd: cached"
fi
echo "$dir"
