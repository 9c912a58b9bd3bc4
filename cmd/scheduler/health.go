package main

import (
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/klog/v2"

	"github.com/gpufabric/gpufabric/pkg/component/healthz"
)

// requiredAPI is an API group version the scheduler's informers read that
// a cluster may not serve, and how to enable it.
type requiredAPI struct {
	groupVersion string
	resources    []string
	enable       string
}

// requiredAPIs are the APIs a 1.37 cluster may lack (core, storage and
// policy are always served).
var requiredAPIs = []requiredAPI{
	{
		groupVersion: "scheduling.k8s.io/v1beta1",
		resources:    []string{"podgroups"},
		enable: "start kube-apiserver with --runtime-config=scheduling.k8s.io/v1beta1=true and --feature-gates=GenericWorkload=true " +
			"(the gate also on kube-controller-manager, kube-scheduler and the kubelets; Kubernetes 1.37)",
	},
	{
		groupVersion: "resource.k8s.io/v1",
		resources:    []string{"resourceslices", "resourceclaims", "deviceclasses", "resourceclaimtemplates"},
		enable:       "resource.k8s.io/v1 is served by default since Kubernetes 1.34: check kube-apiserver's --runtime-config and that the DynamicResourceAllocation gate is not off",
	},
}

// apiCacheTTL is how long a successful API check is reused; a failing one
// is asked again at every probe.
const apiCacheTTL = 30 * time.Second

// leaderHealthTimeout is how long past the Lease's expiry a leader that did
// not renew still passes its liveness check (kube-scheduler's value).
const leaderHealthTimeout = 20 * time.Second

// health holds the scheduler's health checks:
//
//	livez:  ping, leaderElection (a leader that stopped renewing its Lease)
//	readyz: ping, leaderElection, api-served (the APIs above are served),
//	        informer-sync (the leader's informers synced; past
//	        --informer-sync-timeout the error names what is missing and
//	        how to enable it)
//
// A standby replica passes informer-sync: its informers start when it
// leads.
type health struct {
	logger      klog.Logger
	discovery   discovery.DiscoveryInterface
	leader      *leaderelection.HealthzAdaptor // nil without leader election
	syncTimeout time.Duration
	now         func() time.Time

	mu sync.Mutex
	// unsynced is the current term's (nil: no term started).
	unsynced  func() []string
	startedAt time.Time
	apisOK    time.Time // last successful api-served check
}

func newHealth(logger klog.Logger, d discovery.DiscoveryInterface, leaderElect bool, syncTimeout time.Duration) *health {
	h := &health{logger: logger, discovery: d, syncTimeout: syncTimeout, now: time.Now}
	if leaderElect {
		h.leader = leaderelection.NewLeaderHealthzAdaptor(leaderHealthTimeout)
	}
	return h
}

// handler returns the endpoints' handler.
func (h *health) handler() (*healthz.Handler, error) {
	live := []healthz.Checker{healthz.Ping}
	if h.leader != nil {
		live = append(live, h.leader)
	}
	ready := append(slices.Clone(live),
		healthz.NamedCheck("api-served", func(*http.Request) error { return h.apisServed() }),
		healthz.NamedCheck("informer-sync", func(*http.Request) error { return h.informersSynced() }))
	return healthz.New(h.logger, live, ready)
}

// informersStarted is scheduler.Config.InformersStarted: it records the
// term's informers and logs, once, an error naming those still not synced
// after the timeout.
func (h *health) informersStarted(unsynced func() []string) {
	h.mu.Lock()
	h.unsynced, h.startedAt = unsynced, h.now()
	h.mu.Unlock()
	time.AfterFunc(h.syncTimeout, func() {
		if err := h.informersSynced(); err != nil {
			h.logger.Error(err, "The scheduler is not ready and schedules nothing until this is fixed")
		}
	})
}

// informersSynced is the informer-sync check.
func (h *health) informersSynced() error {
	h.mu.Lock()
	unsynced, started := h.unsynced, h.startedAt
	h.mu.Unlock()
	if unsynced == nil {
		return nil // standby, or not started yet
	}
	names := unsynced()
	if len(names) == 0 {
		return nil
	}
	waited := h.now().Sub(started).Round(time.Second)
	if waited < h.syncTimeout {
		return fmt.Errorf("waiting %s for informers to sync: %s", waited, strings.Join(names, ", "))
	}
	why := "every API it reads is served: check the scheduler's RBAC (forbidden lists are in its log) and the apiserver's health"
	if err := h.missingAPIs(); err != nil {
		why = err.Error()
	}
	return fmt.Errorf("informers not synced after %s (--informer-sync-timeout %s): %s; %s", waited, h.syncTimeout, strings.Join(names, ", "), why)
}

// apisServed is the api-served check; a pass is reused for apiCacheTTL.
func (h *health) apisServed() error {
	h.mu.Lock()
	fresh := !h.apisOK.IsZero() && h.now().Sub(h.apisOK) < apiCacheTTL
	h.mu.Unlock()
	if fresh {
		return nil
	}
	if err := h.missingAPIs(); err != nil {
		return err
	}
	h.mu.Lock()
	h.apisOK = h.now()
	h.mu.Unlock()
	return nil
}

// missingAPIs asks discovery for each required API and names those not
// served with how to enable them.
func (h *health) missingAPIs() error {
	var errs []error
	for _, api := range requiredAPIs {
		list, err := h.discovery.ServerResourcesForGroupVersion(api.groupVersion)
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("cannot ask the apiserver whether it serves %s: %w", api.groupVersion, err)
		}
		var missing []string
		for _, r := range api.resources {
			if list == nil || !slices.ContainsFunc(list.APIResources, func(a metav1.APIResource) bool { return a.Name == r }) {
				missing = append(missing, r)
			}
		}
		if len(missing) > 0 {
			errs = append(errs, fmt.Errorf("the apiserver does not serve %s %s, which gpufabric-scheduler reads: %s (docs/troubleshooting.md)",
				api.groupVersion, strings.Join(missing, ", "), api.enable))
		}
	}
	return errors.Join(errs...)
}
