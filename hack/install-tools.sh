#!/usr/bin/env bash
# Installs the Go tools the checks need into .cache/tools (git-ignored), from
# the Go module proxy at pinned versions. Idempotent: a tool already built at
# its version is kept. Prints the tools dir on its last line.
set -euo pipefail

STATICCHECK_VERSION=v0.8.2
LOGCHECK_VERSION=v0.10.1
HELM_VERSION=v3.22.0

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
dir=${GPUFABRIC_TOOLS_DIR:-$root/.cache/tools}
mkdir -p "$dir"

install() {
	local name=$1 pkg=$2 version=$3
	if [[ -x "$dir/$name" && "$(cat "$dir/$name.version" 2>/dev/null)" == "$version" ]]; then
		return
	fi
	echo "[install-tools] $name $version" >&2
	GOBIN="$dir" GOFLAGS= go install "$pkg@$version"
	echo "$version" > "$dir/$name.version"
}

tools=("$@")
[[ ${#tools[@]} -gt 0 ]] || tools=(staticcheck logcheck)
for t in "${tools[@]}"; do
	case $t in
	staticcheck) install staticcheck honnef.co/go/tools/cmd/staticcheck "$STATICCHECK_VERSION" ;;
	logcheck) install logcheck sigs.k8s.io/logtools/logcheck "$LOGCHECK_VERSION" ;;
	helm) install helm helm.sh/helm/v3/cmd/helm "$HELM_VERSION" ;;
	*) echo "unknown tool $t" >&2; exit 2 ;;
	esac
done
echo "$dir"
