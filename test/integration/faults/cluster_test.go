package faults

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	schedulingv1alpha3 "k8s.io/api/scheduling/v1alpha3"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/gpufabric/gpufabric/pkg/gang/vocab"
	"github.com/gpufabric/gpufabric/pkg/topology"
	"github.com/gpufabric/gpufabric/test/integration/framework"
	"github.com/gpufabric/gpufabric/test/integration/itest"
)

// The cluster of the fault tests: kwok nodes of 4 GPUs, one member (4
// GPUs) per node; each case has its own NVLink domains, and its Job's pods
// select its nodes by caseLabel, so the cases run at once without taking
// each other's room.

const (
	gpusPerNode = 4
	// caseLabel on a node names the case whose pods may run there;
	// domainLabel its NVLink domain (<case><letter>).
	caseLabel   = "faults.gpufabric.dev/case"
	domainLabel = "faults.gpufabric.dev/domain"
	// The scheduler's flags in these tests: a node NotReady for 2 s has
	// lost its members; a replacement has 40 s (the Job controller's
	// back-off alone is 10 s) unless its PodGroup says otherwise.
	nodeFailureGrace   = 2 * time.Second
	replacementTimeout = 40 * time.Second
	// nodeMonitorGrace is kube-controller-manager's: a node without a
	// heartbeat for this long is Ready=Unknown and tainted unreachable.
	nodeMonitorGrace = 6 * time.Second
)

// caseNodes creates the nodes of case c: for each entry of c.domains a
// domain <c.name><letter> of that many nodes (named <domain>-<i>), labelled
// for the case, with a node-local slice of gpusPerNode GPUs. Returns the
// node names.
func caseNodes(t *testing.T, admin kubernetes.Interface, c *faultCase) []string {
	t.Helper()
	var names []string
	for i, n := range c.domains {
		d := c.name + string(rune('a'+i))
		for j := range n {
			name := fmt.Sprintf("%s-%d", d, j)
			node := itest.Node(name, map[string]string{corev1.LabelHostname: name, caseLabel: c.name, domainLabel: d})
			node.Annotations = map[string]string{framework.KwokNodeAnnotation: "fake"}
			_, err := admin.CoreV1().Nodes().Create(t.Context(), node, metav1.CreateOptions{})
			itest.Must(t, "create node", err)
			_, err = admin.ResourceV1().ResourceSlices().Create(t.Context(), itest.GPUSlice(name, "dom-"+d, gpusPerNode), metav1.CreateOptions{})
			itest.Must(t, "create slice", err)
			names = append(names, name)
		}
	}
	return names
}

// waitNodesReady waits until kwok made every node Ready and untainted.
func waitNodesReady(t *testing.T, admin kubernetes.Interface, names []string) {
	t.Helper()
	itest.Poll(t, "kwok nodes ready", 90*time.Second, func(ctx context.Context) error {
		for _, name := range names {
			n, err := admin.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if !itest.NodeReady(n) || len(n.Spec.Taints) > 0 {
				return fmt.Errorf("node %s not ready or tainted %v", name, n.Spec.Taints)
			}
		}
		return nil
	})
}

// startScheduler runs the scheduler binary with the shipped RBAC rules,
// short fault bounds and a metrics port; returns the port's address.
func startScheduler(t *testing.T, cp *framework.ControlPlane) string {
	t.Helper()
	const user = "faults-scheduler"
	itest.Must(t, "grant scheduler rules", framework.GrantSchedulerRules(t.Context(), cp.AdminClient(t), user, itest.RecordNamespace))
	kc, err := cp.WriteUserKubeconfig(user)
	itest.Must(t, "kubeconfig", err)
	addr := freeAddr(t)
	itest.Must(t, "start scheduler", cp.StartProcess("scheduler", framework.SchedulerBinary(t), "--kubeconfig="+kc,
		"--leader-elect=false", "--commit-record-namespace="+itest.RecordNamespace, "--metrics-address="+addr,
		"--domain-channels=4", "--node-failure-grace="+nodeFailureGrace.String(),
		"--replacement-timeout="+replacementTimeout.String(), "--member-loss-policy="+vocab.PolicyRestart, "-v=2"))
	return addr
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	itest.Must(t, "find a free port", err)
	defer l.Close()
	return l.Addr().String()
}

// createJob creates case c's gang: an Indexed Job of c.pods pods of 4 GPUs
// on the case's nodes and, unless the Job controller makes it
// (c.jobPodGroup), the PodGroup the pods name, with the case's
// annotations. Gangs in one NVLink domain share a fabric-domain channel;
// segmented gangs have neither.
func createJob(t *testing.T, admin kubernetes.Interface, c *faultCase) {
	t.Helper()
	ctx := t.Context()
	ns := c.name
	n := int32(c.pods)
	pod := itest.TemplatePod(ns, "", c.name)
	pod.Spec.Tolerations = nil // the fault taints must evict them
	pod.Spec.RestartPolicy = corev1.RestartPolicyNever
	pod.Spec.NodeSelector = map[string]string{caseLabel: c.name}
	job := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: c.name},
		Spec: batchv1.JobSpec{
			Parallelism: ptr.To(n), Completions: ptr.To(n), CompletionMode: ptr.To(batchv1.IndexedCompletion),
			BackoffLimit: ptr.To[int32](20),
		},
	}
	switch {
	case c.jobPodGroup:
		pod.Spec.SchedulingGroup = nil // the Job controller sets it
		job.Spec.Scheduling = &batchv1.JobSchedulingConfiguration{
			SchedulingPolicy: &schedulingv1alpha3.WorkloadPodGroupSchedulingPolicy{
				Gang: &schedulingv1alpha3.WorkloadPodGroupGangSchedulingPolicy{MinCount: ptr.To(n)},
			},
			SchedulingConstraints: &schedulingv1alpha3.WorkloadPodGroupSchedulingConstraints{
				Topology: []schedulingv1alpha3.TopologyConstraint{{Key: topology.TopologyKeyNVLinkDomain}},
			},
			ResourceClaims: []schedulingv1alpha3.WorkloadPodGroupResourceClaim{{Name: itest.FabricTemplate, ResourceClaimTemplateName: ptr.To(itest.FabricTemplate)}},
		}
		if c.all {
			job.Spec.Scheduling.DisruptionMode = &schedulingv1alpha3.WorkloadPodGroupDisruptionMode{All: &schedulingv1alpha3.WorkloadPodGroupAllDisruptionMode{}}
		}
	default:
		_, err := admin.SchedulingV1beta1().PodGroups(ns).Create(ctx, casePodGroup(c), metav1.CreateOptions{})
		itest.Must(t, "create podgroup", err)
		if c.segment > 0 {
			pod.Spec.ResourceClaims = pod.Spec.ResourceClaims[1:]
			pod.Spec.Containers[0].Resources.Claims = pod.Spec.Containers[0].Resources.Claims[1:]
		}
	}
	job.Spec.Template = corev1.PodTemplateSpec{Spec: pod.Spec}
	_, err := admin.BatchV1().Jobs(ns).Create(ctx, job, metav1.CreateOptions{})
	itest.Must(t, "create job", err)
}

// casePodGroup is the PodGroup of case c: a gang of all its pods in one
// NVLink domain with a shared fabric channel, or, segmented, in segments of
// c.segment pods each in one NVLink domain.
func casePodGroup(c *faultCase) *schedulingv1beta1.PodGroup {
	pg := itest.TemplateGroup(c.name, c.name, int32(c.pods))
	pg.Annotations = map[string]string{}
	if c.policy != "" {
		pg.Annotations[vocab.AnnotationOnMemberLoss] = c.policy
	}
	if c.timeout > 0 {
		pg.Annotations[vocab.AnnotationReplacementTimeout] = c.timeout.String()
	}
	if c.all {
		pg.Spec.DisruptionMode = &schedulingv1beta1.DisruptionMode{All: &schedulingv1beta1.AllDisruptionMode{}}
	}
	if c.segment > 0 {
		pg.Annotations[topology.AnnotationSegmentSize] = fmt.Sprint(c.segment)
		pg.Annotations[topology.AnnotationSegmentTopologyKey] = topology.TopologyKeyNVLinkDomain
		pg.Spec.SchedulingConstraints = nil
		pg.Spec.ResourceClaims = nil
	}
	return pg
}

// podGroup is the PodGroup of case c (the Job controller's, if it made it).
func podGroup(ctx context.Context, admin kubernetes.Interface, c *faultCase) (*schedulingv1beta1.PodGroup, error) {
	pgs, err := admin.SchedulingV1beta1().PodGroups(c.name).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	if len(pgs.Items) != 1 {
		return nil, fmt.Errorf("%d podgroups in %s", len(pgs.Items), c.name)
	}
	return &pgs.Items[0], nil
}

// findEvent finds an event about name with reason whose note contains
// each of notes.
func findEvent(ctx context.Context, c kubernetes.Interface, ns, name, reason string, notes ...string) error {
	evs, err := c.EventsV1().Events(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	var seen []string
	for _, e := range evs.Items {
		if e.Regarding.Name != name || e.Reason != reason {
			seen = append(seen, e.Reason+": "+e.Note)
			continue
		}
		ok := true
		for _, n := range notes {
			ok = ok && strings.Contains(e.Note, n)
		}
		if ok {
			return nil
		}
		seen = append(seen, e.Reason+": "+e.Note)
	}
	return fmt.Errorf("no %s event about %s containing %q; seen %q", reason, name, notes, seen)
}
