// Package secureserving serves a component's HTTP endpoints (/metrics,
// the health endpoints, /debug/pprof/) the way kube-scheduler's secure
// port does, with the bounds a port that anyone on the network can reach
// needs:
//
//   - TLS always: the certificate and key files given (re-read when they
//     change, so a cert-manager rotation needs no restart), or, without
//     them, a self-signed certificate made in memory at start (as
//     kube-scheduler without --tls-cert-file and --cert-dir). Kubelet
//     probes (scheme HTTPS) and Prometheus (insecureSkipVerify, or the
//     CA of the files given) accept either. TLS 1.2 or later; HTTP/1.1
//     only (no HTTP/2: its stream multiplexing is attack surface this
//     port does not need).
//   - Timeouts on every connection: the request header must arrive
//     within ReadHeaderTimeout (also the TLS handshake's bound), the
//     request within ReadTimeout, the answer is written within
//     WriteTimeout, and an idle keep-alive connection is closed after
//     IdleTimeout; request headers are at most MaxHeaderBytes.
//   - Profiles only when asked for (InstallProfiling), one CPU profile or
//     trace at a time (429 otherwise), and a ?seconds= of at most
//     MaxProfileSeconds (400 otherwise), which WriteTimeout leaves room
//     for.
//
// Who may read what is the caller's handler's business (the binaries
// wrap theirs with pkg/component/delegatedauth).
//
// Files: server.go (Config, Serve, the timeouts), cert.go (the serving
// certificate), pprof.go (InstallProfiling).
package secureserving
