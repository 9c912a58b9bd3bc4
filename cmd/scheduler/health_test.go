package main

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	fakediscovery "k8s.io/client-go/discovery/fake"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/klog/v2/ktesting"

	"github.com/gpufabric/gpufabric/pkg/gang/scheduler"
	"github.com/gpufabric/gpufabric/pkg/topology"
)

// served is a discovery answer with the given group versions and their
// resources.
func served(gvs map[string][]string) *fakediscovery.FakeDiscovery {
	d := &fakediscovery.FakeDiscovery{Fake: &k8stesting.Fake{}}
	for gv, names := range gvs {
		l := &metav1.APIResourceList{GroupVersion: gv}
		for _, n := range names {
			l.APIResources = append(l.APIResources, metav1.APIResource{Name: n})
		}
		d.Resources = append(d.Resources, l)
	}
	return d
}

var allServed = map[string][]string{
	"scheduling.k8s.io/v1beta1": {"podgroups", "workloads"},
	"resource.k8s.io/v1":        {"resourceslices", "resourceclaims", "deviceclasses", "resourceclaimtemplates"},
}

// get answers GET path from the health endpoints.
func get(t *testing.T, h *health, path string) (int, string) {
	t.Helper()
	hh, err := h.handler()
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	hh.Install(mux)
	rec := httptest.NewRecorder()
	mux.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	return rec.Code, rec.Body.String()
}

// TestReadiness: a scheduler on a cluster without the PodGroup API is not
// ready and says how to enable it; a standby is ready; a leader is ready
// once its informers synced, and past --informer-sync-timeout names what
// is missing.
func TestReadiness(t *testing.T) {
	logger, _ := ktesting.NewTestContext(t)
	noPodGroups := map[string][]string{"resource.k8s.io/v1": allServed["resource.k8s.io/v1"]}
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var pending atomic.Value
	pending.Store([]string{"podgroups.v1beta1.scheduling.k8s.io"})
	unsynced := func() []string { return pending.Load().([]string) }
	for _, tc := range []struct {
		name      string
		apis      map[string][]string
		started   bool
		waited    time.Duration
		synced    bool
		wantCode  int
		wantLines []string
	}{
		{name: "standby", apis: allServed, wantCode: 200, wantLines: []string{"[+]api-served ok", "[+]informer-sync ok"}},
		{name: "standby without the PodGroup API", apis: noPodGroups, wantCode: 500, wantLines: []string{
			"[-]api-served failed: the apiserver does not serve scheduling.k8s.io/v1beta1 podgroups, which gpufabric-scheduler reads: " +
				"start kube-apiserver with --runtime-config=scheduling.k8s.io/v1beta1=true and --feature-gates=GenericWorkload=true"}},
		{name: "leader syncing", apis: allServed, started: true, waited: 5 * time.Second, wantCode: 500, wantLines: []string{
			"[-]informer-sync failed: waiting 5s for informers to sync: podgroups.v1beta1.scheduling.k8s.io"}},
		{name: "leader synced", apis: allServed, started: true, waited: 5 * time.Second, synced: true, wantCode: 200, wantLines: []string{"[+]informer-sync ok"}},
		{name: "leader past the timeout without the API", apis: noPodGroups, started: true, waited: 3 * time.Minute, wantCode: 500, wantLines: []string{
			"[-]informer-sync failed: informers not synced after 3m0s (--informer-sync-timeout 2m0s): podgroups.v1beta1.scheduling.k8s.io; the apiserver does not serve scheduling.k8s.io/v1beta1 podgroups",
			"[-]api-served failed: the apiserver does not serve scheduling.k8s.io/v1beta1"}},
		{name: "leader past the timeout, APIs served", apis: allServed, started: true, waited: 3 * time.Minute, wantCode: 500, wantLines: []string{
			"podgroups.v1beta1.scheduling.k8s.io; every API it reads is served: check the scheduler's RBAC"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHealth(logger, served(tc.apis), true, 2*time.Minute)
			h.now = func() time.Time { return now }
			pending.Store([]string{"podgroups.v1beta1.scheduling.k8s.io"})
			if tc.synced {
				pending.Store([]string(nil))
			}
			if tc.started {
				h.informersStarted(unsynced)
				h.now = func() time.Time { return now.Add(tc.waited) }
			}
			code, body := get(t, h, "/readyz?verbose")
			if code != tc.wantCode {
				t.Errorf("code %d, want %d:\n%s", code, tc.wantCode, body)
			}
			for _, w := range tc.wantLines {
				if !strings.Contains(body, w) {
					t.Errorf("body lacks %q:\n%s", w, body)
				}
			}
			if code, body := get(t, h, "/livez"); code != 200 {
				t.Errorf("livez %d %s: a missing API is not a reason to restart", code, body)
			}
		})
	}
}

// TestWedgedLeaderFailsLiveness: a leader whose Lease renewal hangs fails
// /livez (and /readyz) once the Lease expired past the adaptor's timeout,
// so the kubelet restarts it; a standby that never led stays live.
func TestWedgedLeaderFailsLiveness(t *testing.T) {
	logger, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	client := fake.NewClientset()
	unblock := make(chan struct{})
	var renewals atomic.Int32
	client.PrependReactor("update", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
		renewals.Add(1)
		<-unblock // a renewal that never returns, whatever its context says
		return true, nil, errors.New("unblocked")
	})
	h := newHealth(logger, served(allServed), true, time.Minute)
	h.leader = leaderelection.NewLeaderHealthzAdaptor(200 * time.Millisecond)
	if code, body := get(t, h, "/livez"); code != 200 {
		t.Fatalf("before leading: %d %s", code, body)
	}
	done := make(chan error, 1)
	go func() {
		done <- scheduler.RunWithLeaderElection(ctx, scheduler.Config{Client: client, RecordNamespace: "kube-system", InformersStarted: h.informersStarted},
			scheduler.LeaderElection{Namespace: "kube-system", Identity: "me", LeaseDuration: time.Second, RenewDeadline: 500 * time.Millisecond,
				RetryPeriod: 100 * time.Millisecond, WatchDog: h.leader})
	}()
	t.Cleanup(func() {
		cancel()
		close(unblock)
		select {
		case <-done:
		case <-time.After(40 * time.Second):
			t.Error("RunWithLeaderElection did not return")
		}
	})
	deadline := time.Now().Add(20 * time.Second)
	var code int
	var body string
	for time.Now().Before(deadline) {
		if code, body = get(t, h, "/livez?verbose"); code == http.StatusInternalServerError {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if code != http.StatusInternalServerError || !strings.Contains(body, "[-]leaderElection failed: failed election to renew leadership on lease gpufabric-scheduler") || renewals.Load() == 0 {
		t.Errorf("livez %d after %d hung renewals:\n%s", code, renewals.Load(), body)
	}
	if code, _ := get(t, h, "/readyz"); code != http.StatusInternalServerError {
		t.Errorf("readyz %d, want 500 too", code)
	}
}

// TestHelpAndVersion: --version prints the build; --help lists the
// component-base logging flags and none of klog's legacy ones.
func TestHelpAndVersion(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := run([]string{"--version"}, &stdout, &stderr); code != 0 || !strings.HasPrefix(stdout.String(), "gpufabric-scheduler devel (commit ") {
		t.Errorf("--version: exit %d, stdout %q, stderr %q", code, stdout.String(), stderr.String())
	}
	stdout.Reset()
	if code := run([]string{"--help"}, &stdout, &stderr); code != 0 {
		t.Errorf("--help: exit %d", code)
	}
	help := stderr.String()
	for _, want := range []string{"-logging-format", "-v value", "-vmodule", "-version", "-informer-sync-timeout", "/livez, /readyz and /healthz"} {
		if !strings.Contains(help, want) {
			t.Errorf("--help lacks %q", want)
		}
	}
	for _, legacy := range []string{"logtostderr", "alsologtostderr", "log_dir", "log_file", "stderrthreshold", "skip_headers", "add_dir_header", "one_output", "log_backtrace_at", "skip_log_headers"} {
		if strings.Contains(help, "-"+legacy) {
			t.Errorf("--help lists klog's legacy flag -%s", legacy)
		}
	}
}

// TestOwnLease: the leader's Lease gets the fabric-domain DeviceClass as
// owner (once: a second call changes nothing); without the class it has
// none.
func TestOwnLease(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: "gpufabric-system", Name: "gpufabric-scheduler"}}
	class := &resourceapi.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: topology.FabricDomainDeviceClass, UID: "class-uid"}}
	for _, withClass := range []bool{false, true} {
		objs := []runtime.Object{lease.DeepCopy()}
		if withClass {
			objs = append(objs, class)
		}
		client := fake.NewClientset(objs...)
		for range 2 {
			ownLease(ctx, client, lease.Namespace, lease.Name)
		}
		got, err := client.CoordinationV1().Leases(lease.Namespace).Get(ctx, lease.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		want := 0
		if withClass {
			want = 1
		}
		if len(got.OwnerReferences) != want || want == 1 && (got.OwnerReferences[0].UID != "class-uid" || got.OwnerReferences[0].Kind != "DeviceClass" || got.OwnerReferences[0].APIVersion != "resource.k8s.io/v1") {
			t.Errorf("with class %t: owners %+v", withClass, got.OwnerReferences)
		}
	}
}
