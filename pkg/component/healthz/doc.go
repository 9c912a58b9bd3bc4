// Package healthz serves /livez, /readyz and /healthz with named checks,
// the way Kubernetes components do (k8s.io/apiserver/pkg/server/healthz),
// in a small equivalent that needs no apiserver machinery:
//
//   - GET /livez (/readyz) answers 200 "ok" when every live (ready) check
//     passes, else 500 with one line per check ("[+]ping ok",
//     "[-]informer-sync failed: <why>") and "livez check failed";
//   - ?verbose lists every check even when all pass;
//   - ?exclude=<name> (repeatable) skips checks;
//   - /livez/<name> and /readyz/<name> run one check;
//   - /healthz is /livez, for probes and tools that only know it.
//
// Rules: liveness checks fail only on what a restart repairs (a wedged
// leader, a socket that stopped answering); readiness checks add what the
// component waits for (informers synced, registration with the kubelet).
// A failure's reason is shown (the port is cluster-internal and the
// reasons name APIs and sockets, no secrets) and logged once when a check
// changes state, not at every probe.
//
// Files: healthz.go (Checker, Handler).
package healthz
