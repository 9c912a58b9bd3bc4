// Package delegatedauth decides who may read a component's HTTP endpoints
// (/metrics, /debug/pprof/), the way kube-scheduler's secure port does
// with k8s.io/apiserver's delegating authenticator and authorizer, in a
// small equivalent that needs none of the apiserver's serving machinery
// (which would pull OpenTelemetry exporters, the konnectivity client and
// more into the binaries):
//
//   - a request to a path of AlwaysAllowPaths (by default the health
//     endpoints /healthz, /livez, /readyz and their per-check paths) is
//     served without a look at who asks, as kube-scheduler's
//     --authorization-always-allow-paths;
//   - any other request needs "Authorization: Bearer <token>": the token
//     is checked with a TokenReview (401 when it is missing, malformed,
//     not authenticated, or the review fails), then the user with a
//     SubjectAccessReview of the non-resource URL: verb = the lowercase
//     HTTP method ("get"), path = the request path (403 when denied, 500
//     when the review fails). RBAC grants it with a ClusterRole rule
//     {nonResourceURLs: ["/metrics"], verbs: ["get"]}.
//
// Where it differs from kube-scheduler, deliberately: no anonymous
// identity (a request without a token is refused with 401 instead of
// being asked about as system:anonymous), and no client certificates or
// request-header authentication (bearer tokens only).
//
// Rules: what a caller can make it cost is bounded. Both review outcomes
// are cached for CacheTTL (10 s, kube-scheduler's TTL) in LRU caches of
// CacheSize entries each, keyed by the token's SHA-256 (no token is kept);
// at most MaxInFlight reviews run at once and a request that would start
// one more is answered 429 at once (a flood of made-up tokens costs the
// apiserver at most that many concurrent reviews, and cached callers such
// as Prometheus are still served); each review has a Timeout; and the
// review client should have its own rate limiter (NewForConfig gives it
// one) so that reviews never take the component's own API budget.
//
// Files: auth.go (Config, Auth, the filter), review.go (the reviews and
// their caches).
package delegatedauth
