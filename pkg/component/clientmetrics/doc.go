// Package clientmetrics exposes client-go's own metrics on a binary's
// Prometheus registry, under the names Kubernetes components use (so
// their dashboards and alerts apply unchanged):
//
//   - workqueues: workqueue_depth, workqueue_adds_total,
//     workqueue_queue_duration_seconds, workqueue_work_duration_seconds,
//     workqueue_unfinished_work_seconds,
//     workqueue_longest_running_processor_seconds, workqueue_retries_total,
//     by queue name (gangs, double_allocations, device_holds,
//     fabric_domain_pools, node_resource_slices, ...);
//   - the REST client: rest_client_requests_total{code,method,host},
//     rest_client_request_duration_seconds{verb,host},
//     rest_client_rate_limiter_duration_seconds{verb,host};
//   - leader election: leader_election_master_status{name} (1 while this
//     process holds the Lease) and leader_election_slowpath_total{name}.
//
// Label values are what client-go reports, as in Kubernetes components:
// HTTP methods (GET), status codes, the apiserver's host:port, queue and
// Lease names (gpufabric's own queue names are snake_case).
//
// Rules: client-go takes these providers once per process (sync.Once in
// each of its packages), before the first client, workqueue or elector is
// created; Register is therefore called once, from main, and a second
// call fails instead of silently measuring nothing.
//
// Files: clientmetrics.go (Register), workqueue.go, rest.go, leader.go.
package clientmetrics
