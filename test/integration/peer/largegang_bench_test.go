package peer

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/gpufabric/gpufabric/pkg/gang/commit"
	"github.com/gpufabric/gpufabric/pkg/gang/gate"
	"github.com/gpufabric/gpufabric/pkg/gang/placement"
	"github.com/gpufabric/gpufabric/pkg/gang/scheduler"
	"github.com/gpufabric/gpufabric/pkg/gang/vocab"
	"github.com/gpufabric/gpufabric/pkg/topology"
	"github.com/gpufabric/gpufabric/test/integration/framework"
	"github.com/gpufabric/gpufabric/test/integration/itest"
)

// BenchmarkCommitLargeGangAPI measures the commit of a placed Job gang of
// 1,000, 5,000 and 10,000 pods with 2 claims each on the real apiserver:
// commit.Txn.Run as the scheduler's identity with the default
// CommitParallelism (record in parts, a finalizer and a status write per
// claim, the bindings, the condition, the record's delete), timed alone;
// the gang's objects are created untimed and the decision is made by the
// benchmark (8 pods per node). Reports the commit's seconds, its writes
// per second, the seconds of its record phases (write, delete), and the
// record's bytes and objects as stored.
//
//	make build control-plane; GPUFABRIC_CONTROL_PLANE_BIN=$(hack/build-control-plane.sh | tail -n1) \
//	go test -run '^$' -bench BenchmarkCommitLargeGangAPI -benchtime 1x -timeout 60m -v ./test/integration/peer/
func BenchmarkCommitLargeGangAPI(b *testing.B) {
	cp := framework.StartT(b, framework.Options{})
	admin := cp.AdminClient(b)
	itest.Must(b, "grant scheduler rules", framework.GrantSchedulerRules(b.Context(), admin, topology.SchedulerName, itest.RecordNamespace))
	cfg, err := cp.UserConfig(topology.SchedulerName)
	itest.Must(b, "user config", err)
	client, err := kubernetes.NewForConfig(cfg)
	itest.Must(b, "client", err)
	for _, n := range []int{1000, 5000, 10000} {
		b.Run(fmt.Sprintf("pods=%d", n), func(b *testing.B) {
			for i := range b.N {
				b.StopTimer()
				ns := fmt.Sprintf("big-%d-%d", n, i)
				pg, g, d := createJobGang(b, admin, ns, n, 2)
				var once sync.Once
				var recordBytes, objects int
				measure := func(step gate.Step, _ string) error {
					if step == gate.StepBind { // the record is complete
						once.Do(func() { recordBytes, objects = storedRecord(b, admin) })
					}
					return nil
				}
				metrics := commit.NewMetrics()
				reg := prometheus.NewRegistry()
				reg.MustRegister(metrics.Collectors()...)
				c := commit.New(commit.Config{Client: client, RecordNamespace: itest.RecordNamespace, Parallelism: scheduler.DefaultCommitParallelism,
					Gate: &gate.Gate{Hook: measure}, Conditions: statusWriter{client}, Metrics: metrics})
				txn := c.Begin(pg, g, d)
				start := time.Now()
				b.StartTimer()
				itest.Must(b, "commit", txn.Run(b.Context()))
				b.StopTimer()
				took := time.Since(start).Seconds()
				writes := 4*n + n + 3 // 2 claims × (finalizer, status), binding; record, condition, delete
				phases := phaseSeconds(b, reg)
				b.Logf("%d pods × 2 claims: commit %.1f s (%.0f writes/s), record %d bytes in %d objects; phases %v", n, took, float64(writes)/took, recordBytes, objects, phases)
				b.ReportMetric(took, "commit-s")
				b.ReportMetric(phases["record"]+phases["clear-record"], "record-s")
				b.ReportMetric(float64(writes)/took, "writes/s")
				b.ReportMetric(float64(recordBytes), "record-bytes")
				b.ReportMetric(float64(objects), "objects")
			}
		})
	}
}

// createJobGang creates namespace ns, a PodGroup and n pods with claims
// claims of 1 GPU each, named as the Job and claim-template controllers
// name them, and returns the gang and a decision for it (8 pods per node,
// GPU devices in order).
func createJobGang(b *testing.B, c kubernetes.Interface, ns string, n, claims int) (*schedulingv1beta1.PodGroup, *placement.Gang, *placement.Decision) {
	benchNamespace(b, c, ns)
	pg, err := c.SchedulingV1beta1().PodGroups(ns).Create(b.Context(), &schedulingv1beta1.PodGroup{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "pretrain-llama-70b-worker"},
		Spec: schedulingv1beta1.PodGroupSpec{SchedulingPolicy: schedulingv1beta1.PodGroupSchedulingPolicy{Gang: &schedulingv1beta1.GangSchedulingPolicy{MinCount: int32(n)}}}}, metav1.CreateOptions{})
	itest.Must(b, "create podgroup", err)
	g := &placement.Gang{Namespace: ns, Name: pg.Name, UID: pg.UID, MinCount: n, Members: make([]placement.Member, n)}
	d := &placement.Decision{Gang: ns + "/" + pg.Name, Domain: "rack-1", Pods: make([]placement.PodPlacement, n), Claims: make([]placement.ClaimAllocation, n*claims)}
	err = forEachParallel(b.Context(), benchWorkers, n, func(ctx context.Context, i int) error {
		name := fmt.Sprintf("%s-%d-%05x", pg.Name, i, (i*7919)%(1<<20))
		node := fmt.Sprintf("gpu-rack%02d-node%03d", i/8/32, i/8%32)
		p := itest.MemberPod(ns, name, pg.Name, "c0", "")
		p.Spec.ResourceClaims, p.Spec.Containers[0].Resources.Claims = nil, nil
		for k := range claims {
			rc, err := c.ResourceV1().ResourceClaims(ns).Create(ctx, itest.GPUClaim(ns, fmt.Sprintf("%s-gpus%d-%05x", name, k, (i*31+k)%(1<<20)), 1), metav1.CreateOptions{})
			if err != nil {
				return err
			}
			g.Members[i].Claims = append(g.Members[i].Claims, rc)
			ref := fmt.Sprintf("c%d", k)
			p.Spec.ResourceClaims = append(p.Spec.ResourceClaims, corev1.PodResourceClaim{Name: ref, ResourceClaimName: ptr.To(rc.Name)})
			p.Spec.Containers[0].Resources.Claims = append(p.Spec.Containers[0].Resources.Claims, corev1.ResourceClaim{Name: ref})
			d.Claims[i*claims+k] = placement.ClaimAllocation{Namespace: ns, Name: rc.Name, UID: rc.UID, Pod: name, Allocation: resourceapi.AllocationResult{
				Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{{
					Request: "gpus", Driver: topology.DriverName, Pool: node, Device: topology.GPUDeviceName(i%8*claims + k)}}}}}
		}
		pod, err := c.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{})
		if err != nil {
			return err
		}
		g.Members[i].Pod = pod
		d.Pods[i] = placement.PodPlacement{Namespace: ns, Name: pod.Name, UID: pod.UID, Node: node}
		return nil
	})
	itest.Must(b, "create gang", err)
	return pg, g, d
}

// phaseSeconds reads the commit's time per phase from its metrics.
func phaseSeconds(b *testing.B, reg *prometheus.Registry) map[string]float64 {
	families, err := reg.Gather()
	itest.Must(b, "gather metrics", err)
	out := map[string]float64{}
	for _, f := range families {
		if f.GetName() != "gpufabric_scheduler_commit_phase_duration_seconds" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "phase" {
					out[l.GetValue()] = m.GetHistogram().GetSampleSum()
				}
			}
		}
	}
	return out
}

// storedRecord sums the bytes and counts the objects of the commit
// records and their parts in the scheduler's namespace.
func storedRecord(b *testing.B, c kubernetes.Interface) (int, int) {
	bytes, objects := 0, 0
	for _, label := range []string{vocab.LabelCommitRecord, vocab.LabelCommitRecordPart} {
		list, err := c.CoreV1().ConfigMaps(itest.RecordNamespace).List(context.Background(), metav1.ListOptions{LabelSelector: label})
		if err != nil {
			b.Errorf("list records: %v", err) // a writer's goroutine: no Fatal
			return 0, 0
		}
		for _, cm := range list.Items {
			bytes += len(cm.Data[commit.RecordKey])
			objects++
		}
	}
	return bytes, objects
}

// statusWriter writes the InitiallyScheduled condition as the loop does
// for a commit (one status update).
type statusWriter struct{ c kubernetes.Interface }

func (w statusWriter) SetInitiallyScheduled(ctx context.Context, pg *schedulingv1beta1.PodGroup, status metav1.ConditionStatus, reason, message string) error {
	next := pg.DeepCopy()
	next.Status.Conditions = append(next.Status.Conditions, metav1.Condition{Type: vocab.ConditionInitiallyScheduled, Status: status, Reason: reason, Message: message, LastTransitionTime: metav1.Now()})
	_, err := w.c.SchedulingV1beta1().PodGroups(pg.Namespace).UpdateStatus(ctx, next, metav1.UpdateOptions{})
	return err
}
