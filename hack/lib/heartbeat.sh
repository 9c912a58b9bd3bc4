# shellcheck shell=bash
# with_heartbeat LABEL CMD...: runs CMD and, while it runs, prints
# "[<prefix> HH:MM:SS] still <LABEL>, 3m30s" to stderr every
# $HEARTBEAT_SECONDS (default 30), so that a build that takes minutes
# (kube-apiserver: ~7 min on 2 cores) does not look hung. Returns CMD's
# exit status. HEARTBEAT_PREFIX names the caller in the lines.
with_heartbeat() {
	local label=$1
	shift
	local every=${HEARTBEAT_SECONDS:-30} start=$SECONDS pid
	"$@" &
	pid=$!
	while ! wait_for "$pid" "$every"; do
		local took=$((SECONDS - start))
		printf '[%s %s] still %s, %dm%02ds\n' "${HEARTBEAT_PREFIX:-heartbeat}" "$(date +%H:%M:%S)" "$label" $((took / 60)) $((took % 60)) >&2
	done
	wait "$pid"
}

# wait_for PID SECONDS: true once PID ended, false after SECONDS.
wait_for() {
	local pid=$1 deadline=$((SECONDS + $2))
	while ((SECONDS < deadline)); do
		kill -0 "$pid" 2>/dev/null || return 0
		sleep 0.2
	done
	! kill -0 "$pid" 2>/dev/null
}
