// Package scheduler tests gpufabric-scheduler's gang scheduling on a real
// control plane (etcd and kube-apiserver; kube-controller-manager and kwok
// where a test needs them): a gang placed in one fabric domain, the gang
// queue, waiting and settling, priorities, preemption, starvation, crash
// recovery and restarts, lost members replaced in place, large gangs (records in parts) and claims several
// members share, leader election and fencing, the trust boundary,
// fabric-domain pools, beside kube-scheduler and under Kueue. Most tests
// run the scheduler in the test process (startScheduler, with the shipped
// RBAC rules); the fencing test runs the binary with the chart's identity.
// Every test starts its own control plane.
package scheduler
