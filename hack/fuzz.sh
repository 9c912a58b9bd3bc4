#!/usr/bin/env bash
# Runs every Go fuzz target of the module, one `go test -fuzz` per target,
# each for $FUZZTIME. Prints one line per target with its time and a total;
# stops at the first crash and prints the failing input's path (a file under
# the package's testdata/fuzz/<target>/: fix the bug and commit the file as
# a regression seed).
#
# Targets are found with `go test -list '^Fuzz'` in each package whose test
# files declare a `func Fuzz…` (the grep only skips compiling packages that
# cannot have one, such as the integration tests).
#
# The generated corpus goes to .cache/fuzz/<import path>/ (git-ignored), so
# later runs start from what earlier runs found.
#
# Environment:
#   FUZZTIME          time per target (default 60s; `make fuzz-short` uses 3s)
#   FUZZMINIMIZETIME  time to minimize a new input (default 0s: none, so that
#                     short runs spend their time fuzzing)
#   FUZZPARALLEL      fuzzing workers per target (default: GOMAXPROCS)
#   FUZZ              only run targets whose name matches this regexp
#
# Usage: hack/fuzz.sh
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
export CGO_CFLAGS=${CGO_CFLAGS:--Wno-deprecated-declarations}
fuzztime=${FUZZTIME:-60s}
minimize=${FUZZMINIMIZETIME:-0s}
only=${FUZZ:-.}
cache="$root/.cache/fuzz"
logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT

now() { printf '%s' "${EPOCHREALTIME/,/.}"; }
elapsed() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1fs", b - a }'; }

# packages prints the import path of every package whose test files
# declare a fuzz target.
packages() {
	go list -f '{{.ImportPath}} {{.Dir}} {{join .TestGoFiles " "}} {{join .XTestGoFiles " "}}' ./... |
		while read -r pkg dir files; do
			[[ -n "$files" ]] || continue
			# shellcheck disable=SC2086 # file names have no spaces
			if (cd "$dir" && grep -qs '^func Fuzz' $files); then
				echo "$pkg"
			fi
		done
}

# targets prints "<package> <target>" for every fuzz target of a package.
targets() {
	local pkg=$1 out
	if ! out=$(go test -list '^Fuzz' "$pkg" 2>&1); then
		printf '%s\n' "$out" >&2
		echo "fuzz: listing the targets of $pkg failed" >&2
		return 1
	fi
	grep '^Fuzz' <<<"$out" | sed "s|^|$pkg |"
}

all=()
while read -r pkg; do
	while read -r line; do
		[[ -n "$line" ]] && all+=("$line")
	done < <(targets "$pkg")
done < <(packages)
if [[ ${#all[@]} -eq 0 ]]; then
	echo "fuzz: no fuzz targets found" >&2
	exit 1
fi

start_all=$(now)
ran=0
for entry in "${all[@]}"; do
	read -r pkg name <<<"$entry"
	[[ "$name" =~ $only ]] || continue
	log="$logs/$name.log"
	dir=$(go list -f '{{.Dir}}' "$pkg")
	args=(-run '^$' -fuzz "^${name}\$" -fuzztime "$fuzztime" -fuzzminimizetime "$minimize")
	[[ -n "${FUZZPARALLEL:-}" ]] && args+=(-parallel "$FUZZPARALLEL")
	start=$(now)
	ok=false
	for attempt in 1 2 3; do
		if go test "${args[@]}" "$pkg" -args -test.fuzzcachedir="$cache/$pkg" >"$log" 2>&1; then
			ok=true
			break
		fi
		# Go's fuzz coordinator sometimes ends a run whose time is up with
		# "context deadline exceeded" and no failing input (a worker was
		# mid-exchange): that is no crash, so the target runs again.
		if grep -q 'Failing input written' "$log" || ! grep -q 'context deadline exceeded' "$log"; then
			break
		fi
		echo "fuzz: $name: the fuzz engine stopped on its deadline without a failing input (attempt $attempt); running it again" >&2
	done
	if $ok; then
		printf 'ok    %-24s %-8s %s\n' "$name" "$(elapsed "$start" "$(now)")" "$pkg"
		ran=$((ran + 1))
		continue
	fi
	printf 'FAIL  %-24s %-8s %s\n' "$name" "$(elapsed "$start" "$(now)")" "$pkg"
	grep -v -E '^\s+[a-z0-9_]+\.go:[0-9]+: [IEW][0-9]{4} ' "$log" | tail -n 40 >&2
	input=$(sed -n 's|.*Failing input written to \(testdata/fuzz/[^ ]*\).*|\1|p' "$log" | head -n1)
	if [[ -n "$input" ]]; then
		echo "fuzz: $name crashed; failing input: ${dir#"$root"/}/$input" >&2
		echo "fuzz: reproduce with: go test -run '^$name/$(basename "$input")\$' $pkg" >&2
	else
		echo "fuzz: $name failed without a failing input (build error or a failing seed; see above)" >&2
	fi
	exit 1
done
echo "fuzz: $ran targets passed, ${fuzztime} each, in $(elapsed "$start_all" "$(now)")"
