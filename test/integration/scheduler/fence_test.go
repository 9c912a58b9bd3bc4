package scheduler

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/gpufabric/gpufabric/test/integration/framework"
	"github.com/gpufabric/gpufabric/test/integration/itest"
)

// TestSchedulerFencedLeadership runs two real scheduler processes with the
// chart's identity, RBAC and admission policies, each behind a loopback
// proxy. The leader is paused (SIGSTOP) while its bindings are on the wire,
// past its Lease; the other replica takes the Lease; then the old leader
// resumes and its bindings reach the apiserver: they are refused by the
// fence (the old leader's pod no longer holds the Lease), and the old
// leader writes nothing else before it exits. The new leader then rolls
// the half-done commit back and places the gang itself.
func TestSchedulerFencedLeadership(t *testing.T) {
	cp := framework.StartT(t, framework.Options{ControllerManager: true})
	ctx := t.Context()
	admin := cp.AdminClient(t)
	itest.FabricCluster(t, admin, []string{"a"}, 4, 4)
	itest.ApplyChartScheduler(t, cp, admin)
	const ns = "fence"
	itest.GangNamespace(t, admin, ns, 4)
	bin := framework.SchedulerBinary(t)

	replicas := map[string]*framework.Proxy{}
	for _, id := range []string{"sched-a", "sched-b"} {
		tok := itest.ServiceAccountToken(t, admin, itest.ChartSchedulerName, itest.SchedulerPod(t, admin, id))
		proxy, err := cp.NewProxy(ctx)
		itest.Must(t, "start proxy", err)
		replicas[id] = proxy
		kc, err := proxy.Kubeconfig(t.TempDir(), id, tok)
		itest.Must(t, "kubeconfig", err)
		itest.Must(t, "start "+id, cp.StartProcess(id, bin, "--kubeconfig="+kc,
			"--leader-elect-namespace="+itest.ChartNamespace, "--leader-elect-identity="+id, "--commit-record-namespace="+itest.ChartNamespace,
			"--leader-elect-lease-duration=4s", "--leader-elect-renew-deadline=3s", "--leader-elect-retry-period=500ms",
			"--domain-channels=4", "--metrics-address=", "-v=2"))
		if id == "sched-a" {
			itest.Poll(t, "sched-a leads", 30*time.Second, leaseHeldBy(admin, id))
		}
	}
	a, b := replicas["sched-a"], replicas["sched-b"]

	// The leader's bindings of the gang are held on the wire; once both
	// are (the commit writes a phase in parallel), the leader is paused.
	// Pausing at the first would race the second: a binding not yet sent
	// when the Lease is lost is refused by the leader's own fence, before
	// the wire, and never reaches the apiserver's.
	holdA, heldA := make(chan struct{}), make(chan struct{})
	var mu sync.Mutex
	held := 0
	a.AddRule(&framework.Rule{
		Match: func(r *http.Request) bool { return isBinding(r, ns) },
		Fault: framework.Fault{Hold: holdA},
		OnMatch: func(*http.Request) {
			mu.Lock()
			defer mu.Unlock()
			if held++; held == 2 {
				close(heldA)
			}
		},
	})
	itest.CreateGang(t, admin, ns, "g", 2, 2)
	select {
	case <-heldA:
	case <-time.After(90 * time.Second):
		t.Fatalf("the leader never bound the gang; its log:\n%s", readLog(cp, "sched-a"))
	}
	itest.Must(t, "pause sched-a", cp.Signal("sched-a", syscall.SIGSTOP))
	resumed := false
	defer func() {
		if !resumed {
			_ = cp.Signal("sched-a", syscall.SIGCONT)
		}
	}()

	// The other replica takes the Lease, but everything it writes is held
	// for now, so the gang's pods stay unbound: only the fence can refuse
	// the old leader's bindings.
	holdB := make(chan struct{})
	b.AddRule(&framework.Rule{Match: func(r *http.Request) bool { return framework.IsWrite(r) && !itest.IsLease(r) }, Fault: framework.Fault{Hold: holdB}})
	itest.Poll(t, "sched-b takes the Lease", 30*time.Second, leaseHeldBy(admin, "sched-b"))
	takeover := time.Now()
	time.Sleep(time.Second) // the apiserver's policy sees the new holder (an informer)

	itest.Must(t, "resume sched-a", cp.Signal("sched-a", syscall.SIGCONT))
	resumed = true
	close(holdA)
	itest.Poll(t, "sched-a exits", 30*time.Second, func(context.Context) error {
		if done, _ := cp.Exited("sched-a"); !done {
			return errors.New("still running")
		}
		return nil
	})
	var bindings int
	for _, r := range a.Log() {
		if !r.Forwarded || !isWritePath(r.Method, r.Path) || strings.Contains(r.Path, "/leases/") || strings.HasSuffix(r.Path, "/events") {
			continue
		}
		if r.Start.Before(takeover) && !strings.HasSuffix(r.Path, "/binding") {
			continue // written while it led
		}
		if r.Status < 300 {
			t.Errorf("the old leader's %s %s got %d after losing the Lease", r.Method, r.Path, r.Status)
		}
		if strings.HasSuffix(r.Path, "/binding") {
			bindings++
			if r.Status != http.StatusForbidden || !strings.Contains(r.Body, "does not hold Lease "+itest.ChartNamespace+"/"+itest.ChartSchedulerName+" (holder: sched-b): its writes are fenced") {
				t.Errorf("the old leader's binding %s: %d %s, want refused by the fence", r.Path, r.Status, r.Body)
			}
		}
	}
	if bindings != 2 {
		t.Errorf("%d of the old leader's bindings reached the apiserver, want 2", bindings)
	}
	if log := readLog(cp, "sched-a"); !strings.Contains(strings.ToLower(log), "lost leadership") {
		t.Errorf("the old leader did not say it lost the Lease; its log:\n%s", log)
	}

	// The new leader rolls back the half-done commit and places the gang.
	close(holdB)
	var st *itest.GangState
	itest.Poll(t, "sched-b places the gang", 60*time.Second, func(ctx context.Context) error {
		var err error
		if st, err = itest.ReadGang(ctx, admin, ns); err != nil {
			return err
		}
		if st.Bound() != 2 || len(st.Records) > 0 {
			return fmt.Errorf("%d of 2 bound, records %v", st.Bound(), st.Records)
		}
		return st.Consistent(true)
	})
	checkPlacedGang(t, admin, st, "g", 2)
	if log := readLog(cp, "sched-b"); !strings.Contains(log, "Rolled back a half-done commit") {
		t.Errorf("sched-b did not roll back the old leader's commit; its log:\n%s", log)
	}
}

func leaseHeldBy(c kubernetes.Interface, id string) func(context.Context) error {
	return func(ctx context.Context) error {
		l, err := c.CoordinationV1().Leases(itest.ChartNamespace).Get(ctx, itest.ChartSchedulerName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if h := l.Spec.HolderIdentity; h == nil || *h != id {
			return fmt.Errorf("held by %v", h)
		}
		return nil
	}
}

func isBinding(r *http.Request, ns string) bool {
	return r.Method == http.MethodPost && strings.HasPrefix(r.URL.Path, "/api/v1/namespaces/"+ns+"/pods/") && strings.HasSuffix(r.URL.Path, "/binding")
}

func isWritePath(method, _ string) bool {
	return method != http.MethodGet && method != http.MethodHead
}

func readLog(cp *framework.ControlPlane, name string) string {
	data, _ := os.ReadFile(cp.ProcessLog(name))
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	return strings.Join(lines[max(0, len(lines)-40):], "\n")
}
