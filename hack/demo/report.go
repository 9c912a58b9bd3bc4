package main

import (
	"context"
	"encoding/json"
	"fmt"
	"github.com/gpufabric/gpufabric/pkg/gang/vocab"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	cdispec "tags.cncf.io/container-device-interface/specs-go"

	"github.com/gpufabric/gpufabric/pkg/topology"
	"github.com/gpufabric/gpufabric/pkg/workloads/grouping"
)

const ns = "demo"

// conditionType is the PodGroup condition the scheduler maintains.
const conditionType = "PodGroupInitiallyScheduled"

// waitSettled waits until every demo pod is bound, or its gang has been
// found unschedulable.
func (d *demo) waitSettled(ctx context.Context, timeout time.Duration) error {
	var pending []string
	err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		pods, err := d.client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil || len(pods.Items) == 0 {
			return false, nil
		}
		pending = pending[:0]
		for _, p := range pods.Items {
			if p.Spec.NodeName == "" && !d.gangRefused(ctx, &p) {
				pending = append(pending, p.Name)
			}
		}
		pending = append(pending, d.jobsWithoutPods(ctx, pods.Items)...)
		if d.workloads {
			pending = append(pending, d.workloadsPending(ctx)...)
		}
		return len(pending) == 0, nil
	})
	if err != nil {
		return fmt.Errorf("jobs did not settle in %s; still pending: %v", timeout, pending)
	}
	return nil
}

// jobsWithoutPods names the Jobs whose pods the Job controller has not all
// created yet.
func (d *demo) jobsWithoutPods(ctx context.Context, pods []corev1.Pod) []string {
	jobs, err := d.client.BatchV1().Jobs(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return []string{"(jobs: " + err.Error() + ")"}
	}
	var out []string
	for _, j := range jobs.Items {
		n := 0
		for _, p := range pods {
			if p.Labels[batchv1.JobNameLabel] == j.Name {
				n++
			}
		}
		if want := int(ptrOr(j.Spec.Parallelism, 1)); n < want {
			out = append(out, fmt.Sprintf("job %s (%d of %d pods created)", j.Name, n, want))
		}
	}
	return out
}

func ptrOr(p *int32, def int32) int32 {
	if p == nil {
		return def
	}
	return *p
}

func (d *demo) gangRefused(ctx context.Context, p *corev1.Pod) bool {
	if p.Spec.SchedulingGroup == nil || p.Spec.SchedulingGroup.PodGroupName == nil {
		return false
	}
	pg, err := d.client.SchedulingV1beta1().PodGroups(ns).Get(ctx, *p.Spec.SchedulingGroup.PodGroupName, metav1.GetOptions{})
	if err != nil {
		return false
	}
	c := apimeta.FindStatusCondition(pg.Status.Conditions, conditionType)
	// WaitingForMembers is not a refusal: its claims or pods are on the way.
	return c != nil && c.Status == metav1.ConditionFalse && c.Reason != vocab.ReasonWaitingForMembers
}

// report prints where every pod went, which claims are reserved for what,
// why waiting gangs wait, and one pod's prepared CDI devices.
func (d *demo) report(ctx context.Context, out io.Writer) error {
	pods, err := d.client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("list pods: %w", err)
	}
	domainOf, railOf, err := d.nodeDomains(ctx)
	if err != nil {
		return err
	}
	d.printPods(out, pods.Items, domainOf)
	if err := d.printClaims(ctx, out); err != nil {
		return err
	}
	if err := d.printGroups(ctx, out); err != nil {
		return err
	}
	if err := d.printRails(ctx, out, pods.Items, railOf); err != nil {
		return err
	}
	return d.printCDI(ctx, out, pods.Items)
}

// nodeDomains maps each node to its NVLink domain and each device
// ("pool/device") with an IB rail to it, from the published slices.
func (d *demo) nodeDomains(ctx context.Context) (map[string]string, map[string]int64, error) {
	list, err := d.client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, nil, fmt.Errorf("list slices: %w", err)
	}
	out, rails := map[string]string{}, map[string]int64{}
	for _, s := range list.Items {
		for _, dev := range s.Spec.Devices {
			if v := dev.Attributes[topology.AttrNVLinkDomain].StringValue; v != nil && s.Spec.NodeName != nil {
				out[*s.Spec.NodeName] = *v
			}
			if r, ok := topology.DeviceIBRail(&dev); ok {
				rails[s.Spec.Pool.Name+"/"+dev.Name] = r
			}
		}
	}
	return out, rails, nil
}

// printRails prints, per gang with bound pods on IB rails, the rails of
// its pods' devices: one set when every pod uses the same ("{4,5,6,7}"),
// else each pod's. Coupled roles of a CompositePodGroup show one set.
func (d *demo) printRails(ctx context.Context, out io.Writer, pods []corev1.Pod, railOf map[string]int64) error {
	claims, err := d.client.ResourceV1().ResourceClaims(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("list claims: %w", err)
	}
	byName := map[string]*resourceapi.ResourceClaim{}
	for i := range claims.Items {
		byName[claims.Items[i].Name] = &claims.Items[i]
	}
	sets := map[string][]string{} // gang → each bound pod's rails
	for _, p := range pods {
		if p.Spec.NodeName == "" {
			continue
		}
		var rails []int64
		for _, st := range p.Status.ResourceClaimStatuses {
			c := byName[ptrOrEmpty(st.ResourceClaimName)]
			if c == nil || c.Status.Allocation == nil {
				continue
			}
			for _, r := range c.Status.Allocation.Devices.Results {
				if rail, ok := railOf[r.Pool+"/"+r.Device]; ok && !slices.Contains(rails, rail) {
					rails = append(rails, rail)
				}
			}
		}
		if len(rails) > 0 {
			slices.Sort(rails)
			g := groupLabel(&p)
			sets[g] = append(sets[g], p.Name+" "+railSet(rails))
		}
	}
	fmt.Fprintln(out)
	step(out, "IB rails of each gang's pods")
	for _, g := range sortedKeys(sets) {
		one := strings.SplitN(sets[g][0], " ", 2)[1]
		same := !slices.ContainsFunc(sets[g], func(s string) bool { return strings.SplitN(s, " ", 2)[1] != one })
		if same {
			fmt.Fprintf(out, "  %s: %s\n", g, one)
			continue
		}
		fmt.Fprintf(out, "  %s: %s\n", g, strings.Join(sets[g], ", "))
	}
	return nil
}

func ptrOrEmpty(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

// railSet is "{0,1,2,3}".
func railSet(rails []int64) string {
	parts := make([]string, len(rails))
	for i, r := range rails {
		parts[i] = fmt.Sprint(r)
	}
	return "{" + strings.Join(parts, ",") + "}"
}

func (d *demo) printPods(out io.Writer, pods []corev1.Pod, domainOf map[string]string) {
	step(out, "Where every pod went")
	byGroup := map[string][]corev1.Pod{}
	for _, p := range pods {
		byGroup[groupLabel(&p)] = append(byGroup[groupLabel(&p)], p)
	}
	for _, g := range sortedKeys(byGroup) {
		bound, domains := 0, map[string]bool{}
		for _, p := range byGroup[g] {
			if p.Spec.NodeName != "" {
				bound++
				domains[domainOf[p.Spec.NodeName]] = true
			}
		}
		if bound == 0 {
			fmt.Fprintf(out, "\n%s: 0/%d pods bound: the gang waits whole (condition below)\n", g, len(byGroup[g]))
			continue
		}
		fmt.Fprintf(out, "\n%s: %d/%d pods bound, in %d NVLink domain(s) %v\n", g, bound, len(byGroup[g]), len(domains), sortedKeys(domains))
		fmt.Fprintf(out, "  %-24s %-16s %-10s %s\n", "POD", "NODE", "PHASE", "NVLINK DOMAIN")
		for _, p := range byGroup[g] {
			node := p.Spec.NodeName
			if node == "" {
				node = "<none>"
			}
			fmt.Fprintf(out, "  %-24s %-16s %-10s %s\n", p.Name, node, p.Status.Phase, domainOf[p.Spec.NodeName])
		}
	}
}

// groupLabel names a pod's gang for the report: the PodGroup
// gpufabric-grouper made for a JobSet or LeaderWorkerSet, "job <name>" for
// a Job's pods (the Job controller names their PodGroup), else the
// PodGroup, else the pod.
func groupLabel(p *corev1.Pod) string {
	if g := p.Spec.SchedulingGroup; g != nil && g.PodGroupName != nil && (strings.HasPrefix(*g.PodGroupName, grouping.PrefixJobSet+".") || strings.HasPrefix(*g.PodGroupName, grouping.PrefixLWS+".")) {
		return *g.PodGroupName
	}
	if job := p.Labels[batchv1.JobNameLabel]; job != "" {
		return "job " + job
	}
	if p.Spec.SchedulingGroup != nil && p.Spec.SchedulingGroup.PodGroupName != nil {
		return *p.Spec.SchedulingGroup.PodGroupName
	}
	return p.Name
}

func (d *demo) printClaims(ctx context.Context, out io.Writer) error {
	claims, err := d.client.ResourceV1().ResourceClaims(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("list claims: %w", err)
	}
	fmt.Fprintln(out)
	step(out, "Claims (allocated devices → reserved for)")
	unallocated := 0
	for _, c := range claims.Items {
		if c.Status.Allocation == nil {
			unallocated++
			continue
		}
		fmt.Fprintf(out, "  %-26s %s → %s\n", c.Name, devicesOf(&c), reservedFor(&c))
	}
	if unallocated > 0 {
		fmt.Fprintf(out, "  (%d claims of waiting pods are not allocated: a gang that cannot be placed holds nothing)\n", unallocated)
	}
	return nil
}

func devicesOf(c *resourceapi.ResourceClaim) string {
	if c.Status.Allocation == nil {
		return "(not allocated)"
	}
	// Group devices by pool: "node-1: gpu-0,gpu-1".
	var pools []string
	byPool := map[string][]string{}
	for _, r := range c.Status.Allocation.Devices.Results {
		if _, ok := byPool[r.Pool]; !ok {
			pools = append(pools, r.Pool)
		}
		byPool[r.Pool] = append(byPool[r.Pool], r.Device)
	}
	var parts []string
	for _, p := range pools {
		parts = append(parts, p+": "+strings.Join(byPool[p], ","))
	}
	return strings.Join(parts, "; ")
}

func reservedFor(c *resourceapi.ResourceClaim) string {
	var refs []string
	for _, r := range c.Status.ReservedFor {
		kind := "pod"
		if r.Resource == "podgroups" {
			kind = "PodGroup"
		}
		refs = append(refs, kind+" "+r.Name)
	}
	if len(refs) == 0 {
		return "-"
	}
	return strings.Join(refs, ", ")
}

func (d *demo) printGroups(ctx context.Context, out io.Writer) error {
	groups, err := d.client.SchedulingV1beta1().PodGroups(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("list pod groups: %w", err)
	}
	fmt.Fprintln(out)
	step(out, "PodGroup conditions")
	for _, g := range groups.Items {
		printCondition(out, &g)
	}
	return nil
}

func printCondition(out io.Writer, g *schedulingv1beta1.PodGroup) {
	c := apimeta.FindStatusCondition(g.Status.Conditions, conditionType)
	if c == nil {
		fmt.Fprintf(out, "  %s: no %s condition yet\n", g.Name, conditionType)
		return
	}
	fmt.Fprintf(out, "  %s: %s=%s (%s)\n    %s\n", g.Name, c.Type, c.Status, c.Reason, strings.ReplaceAll(c.Message, "\n", "\n    "))
}

// showcase picks the pod whose prepared devices the report shows: a bound
// training pod, else any bound pod with claims; nil when none is bound.
func showcase(pods []corev1.Pod) *corev1.Pod {
	var any *corev1.Pod
	for i := range pods {
		p := &pods[i]
		if p.Spec.NodeName == "" || len(p.Status.ResourceClaimStatuses) == 0 {
			continue
		}
		if strings.HasPrefix(p.Name, "llm-train") {
			return p
		}
		if any == nil {
			any = p
		}
	}
	return any
}

// printCDI asks the node of the showcase pod to prepare the pod's claims,
// as the kubelet does before starting the pod, and prints what the
// container would get.
func (d *demo) printCDI(ctx context.Context, out io.Writer, pods []corev1.Pod) error {
	pod := showcase(pods)
	if pod == nil {
		fmt.Fprintln(out)
		step(out, "No pod was placed on this fabric: the conditions above say why")
		return nil
	}
	fmt.Fprintln(out)
	step(out, "What the kubelet on %s gets for pod %s (NodePrepareResources over the plugin's socket)", pod.Spec.NodeName, pod.Name)
	var claims []*resourceapi.ResourceClaim
	for _, st := range pod.Status.ResourceClaimStatuses {
		if st.ResourceClaimName == nil {
			continue
		}
		c, err := d.client.ResourceV1().ResourceClaims(ns).Get(ctx, *st.ResourceClaimName, metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("get claim %s: %w", *st.ResourceClaimName, err)
		}
		claims = append(claims, c)
	}
	results, err := prepareOnNode(ctx, filepath.Join(d.nodeDir(pod.Spec.NodeName), "registry"), claims)
	if err != nil {
		return err
	}
	for _, c := range claims {
		r := results[string(c.UID)]
		if r.GetError() != "" {
			fmt.Fprintf(out, "  claim %s: error %s\n", c.Name, r.GetError())
			continue
		}
		fmt.Fprintf(out, "  claim %s:\n", c.Name)
		for _, dev := range r.GetDevices() {
			fmt.Fprintf(out, "    %s/%s → CDI %s\n", dev.PoolName, dev.DeviceName, strings.Join(dev.CdiDeviceIds, ","))
		}
		printSpec(out, filepath.Join(d.nodeDir(pod.Spec.NodeName), "cdi", topology.DriverName+"-claim_"+string(c.UID)+".json"))
	}
	return nil
}

func printSpec(out io.Writer, path string) {
	data, err := os.ReadFile(path)
	if err != nil {
		fmt.Fprintf(out, "    (no CDI spec: %v)\n", err)
		return
	}
	var spec cdispec.Spec
	if err := json.Unmarshal(data, &spec); err != nil {
		fmt.Fprintf(out, "    (bad CDI spec %s: %v)\n", path, err)
		return
	}
	if e := spec.ContainerEdits; len(e.Mounts)+len(e.Hooks) > 0 {
		var hooks []string
		for _, h := range e.Hooks {
			if len(h.Args) > 1 {
				hooks = append(hooks, h.Args[1])
			}
		}
		fmt.Fprintf(out, "      driver: %d files mounted (libraries, binaries, firmware), hooks %s\n", len(e.Mounts), strings.Join(hooks, ", "))
	}
	seen := map[string]bool{}
	for _, dev := range spec.Devices {
		for _, e := range dev.ContainerEdits.Env {
			if !seen[e] {
				seen[e] = true
				fmt.Fprintf(out, "      env %s\n", e)
			}
		}
		for _, n := range dev.ContainerEdits.DeviceNodes {
			if !seen[n.Path] {
				seen[n.Path] = true
				fmt.Fprintf(out, "      dev %s\n", n.Path)
			}
		}
		for _, m := range dev.ContainerEdits.Mounts {
			if !seen[m.ContainerPath] {
				seen[m.ContainerPath] = true
				fmt.Fprintf(out, "      dev %s (mock: bind mount of %s)\n", m.ContainerPath, m.HostPath)
			}
		}
	}
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
