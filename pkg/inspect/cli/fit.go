package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpufabric/gpufabric/pkg/gang/placement"
	"github.com/gpufabric/gpufabric/pkg/gang/placement/index"
	"github.com/gpufabric/gpufabric/pkg/gang/placement/scenario"
	"github.com/gpufabric/gpufabric/pkg/inspect"
	"github.com/gpufabric/gpufabric/pkg/topology"
)

// dryRunAllocateTimeout bounds one Allocate call of a dry run.
const dryRunAllocateTimeout = 10 * time.Second

// fitRequest is the gang `fit` tries: Pods members of GPUsPerPod GPUs of
// class gpu.gpufabric.dev each, all required (minCount = Pods), in one
// domain of TopologyKey when set, in segments of SegmentSize members each
// in one domain of SegmentTopologyKey when set (the PodGroup annotations).
type fitRequest struct {
	Pods               int
	GPUsPerPod         int
	TopologyKey        string
	SegmentSize        int
	SegmentTopologyKey string
	// LargeGangGPUs: as the scheduler's --large-gang-gpus.
	LargeGangGPUs int
}

// fitReport is what `fit` prints (-o json|yaml: these fields).
type fitReport struct {
	Pods        int    `json:"pods"`
	GPUsPerPod  int    `json:"gpusPerPod"`
	TopologyKey string `json:"topologyKey,omitempty"`
	Fits        bool   `json:"fits"`
	// Level and Domain: where the engine would place it.
	Level  string `json:"level,omitempty"`
	Domain string `json:"domain,omitempty"`
	Spread string `json:"spread,omitempty"`
	// Segments: where a segmented gang's segments would go.
	Segments string    `json:"segments,omitempty"`
	Nodes    []fitNode `json:"nodes,omitempty"`
	// Message: why it does not fit, as gpufabric-scheduler would say.
	Message string `json:"message,omitempty"`
	// FabricHealth: when fabric health chose the domain (a large gang).
	FabricHealth string `json:"fabricHealth,omitempty"`
}

// fitNode is how many of the gang's pods a node would get.
type fitNode struct {
	Node string `json:"node"`
	Pods int    `json:"pods"`
}

func newFitCommand(o *options) *cobra.Command {
	req := fitRequest{}
	cmd := &cobra.Command{
		Use:   "fit --pods N --gpus-per-pod G [--topology-key KEY] [--segment-size S --segment-topology-key KEY]",
		Short: "Dry run: would a gang fit now, and where (the scheduler's placement engine)",
		Long: `Runs gpufabric-scheduler's placement engine (pkg/gang/placement) on a
snapshot of the cluster as it is now — Nodes, ResourceSlices, DeviceClasses,
bound pods, allocated claims — for a gang of --pods members with
--gpus-per-pod GPUs (gpu.gpufabric.dev) each, all required, and, with
--topology-key, in one domain of that level; with --segment-size and
--segment-topology-key, in hard segments. Prints the domain and nodes it
would take, or the engine's reason. Nothing is created; the scheduler may
decide otherwise if the cluster changes, or if the gang has other claims,
tolerations or affinities.`,
		Example: `  kubectl gpufabric fit --pods 16 --gpus-per-pod 4
  kubectl gpufabric fit --pods 16 --gpus-per-pod 4 --topology-key gpufabric.dev/nvlinkDomain -o json
  kubectl gpufabric fit --pods 32 --gpus-per-pod 4 --segment-size 16 --segment-topology-key gpufabric.dev/nvlinkDomain`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.check(); err != nil {
				return err
			}
			if req.Pods < 1 || req.GPUsPerPod < 1 {
				return fmt.Errorf("fit: --pods %d and --gpus-per-pod %d must both be at least 1", req.Pods, req.GPUsPerPod)
			}
			c, err := o.client()
			if err != nil {
				return err
			}
			cl, err := inspect.Load(cmd.Context(), c, inspect.Need{Fabric: true, Claims: true, Pods: true})
			if err != nil {
				return err
			}
			classes, err := c.ResourceV1().DeviceClasses().List(cmd.Context(), metav1.ListOptions{})
			if err != nil {
				return fmt.Errorf("list deviceclasses: %w", err)
			}
			rep, err := dryRun(cmd.Context(), cl, classes.Items, req, o.reportOptions())
			if err != nil {
				return err
			}
			return inspect.Write(cmd.OutOrStdout(), o.output, rep, func(w io.Writer) error { return renderFit(w, rep) })
		},
	}
	cmd.Flags().IntVar(&req.Pods, "pods", 0, "members of the gang (all required)")
	cmd.Flags().IntVar(&req.GPUsPerPod, "gpus-per-pod", 0, "GPUs (gpu.gpufabric.dev) per member")
	cmd.Flags().StringVar(&req.TopologyKey, "topology-key", "", "required level: gpufabric.dev/nvlinkDomain or a --topology-levels key (default: none, the smallest level that fits)")
	cmd.Flags().IntVar(&req.LargeGangGPUs, "large-gang-gpus", 16, "as the scheduler's --large-gang-gpus: a gang of at least this many GPUs tries domains without link errors or degraded links first; 0: off")
	cmd.Flags().IntVar(&req.SegmentSize, "segment-size", 0, "hard segments: every N consecutive members in one domain of --segment-topology-key (annotation "+topology.AnnotationSegmentSize+")")
	cmd.Flags().StringVar(&req.SegmentTopologyKey, "segment-topology-key", "", "the segments' level, below --topology-key (annotation "+topology.AnnotationSegmentTopologyKey+")")
	return cmd
}

// dryRun places the requested gang on a snapshot of cl with the engine.
func dryRun(ctx context.Context, cl *inspect.Cluster, classes []resourceapi.DeviceClass, req fitRequest, opts inspect.Options) (*fitReport, error) {
	if !hasClass(classes, topology.GPUDeviceClass) {
		return nil, fmt.Errorf("fit: DeviceClass %s does not exist (is gpufabric installed?)", topology.GPUDeviceClass)
	}
	// The scheduler bounds one Allocate call at 100ms (a call cut off
	// counts as "does not fit"); a one-off dry run on a busy laptop must
	// not answer "no" for that, and compiles every CEL selector cold.
	cfg := placement.Config{Index: index.Config{Tree: topology.TreeConfig{LabelLevels: opts.Levels}, AllocateTimeout: dryRunAllocateTimeout}, LargeGangGPUs: req.LargeGangGPUs}
	snap, err := index.NewSnapshot(ctx, cfg.Index, index.SnapshotInput{
		Nodes: ptrs(cl.Nodes), Pods: ptrs(cl.Pods), ResourceSlices: ptrs(cl.Slices),
		DeviceClasses: ptrs(classes), ResourceClaims: ptrs(cl.Claims),
	})
	if err != nil {
		return nil, fmt.Errorf("fit: %w", err)
	}
	gang, err := dryRunGang(req)
	if err != nil {
		return nil, err
	}
	d, u, err := placement.Place(ctx, cfg, snap, gang)
	if err != nil {
		return nil, fmt.Errorf("fit: place: %w", err)
	}
	rep := &fitReport{Pods: req.Pods, GPUsPerPod: req.GPUsPerPod, TopologyKey: req.TopologyKey}
	switch {
	case d != nil:
		rep.Fits, rep.Level, rep.Domain, rep.Spread, rep.Segments = true, d.TopologyKey, d.Domain, d.SpreadSummary(), d.SegmentSummary()
		rep.Nodes, rep.FabricHealth = podsPerNode(d.Pods), d.FabricHealth
	case u != nil:
		rep.Message = u.Message
	default:
		return nil, errors.New("fit: the engine returned neither a placement nor a reason")
	}
	return rep, nil
}

// dryRunGang is a PodGroup "fit" of req.Pods pods, each with its own claim
// for req.GPUsPerPod GPUs; nothing of it exists in the cluster.
func dryRunGang(req fitRequest) (*placement.Gang, error) {
	const ns, name = "gpufabric-fit", "fit"
	pg := &schedulingv1beta1.PodGroup{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID("dry-run-" + name)},
		Spec: schedulingv1beta1.PodGroupSpec{SchedulingPolicy: schedulingv1beta1.PodGroupSchedulingPolicy{
			Gang: &schedulingv1beta1.GangSchedulingPolicy{MinCount: int32(req.Pods)},
		}},
	}
	if req.TopologyKey != "" {
		pg.Spec.SchedulingConstraints = &schedulingv1beta1.PodGroupSchedulingConstraints{
			Topology: []schedulingv1beta1.TopologyConstraint{{Key: req.TopologyKey}},
		}
	}
	if req.SegmentSize != 0 || req.SegmentTopologyKey != "" {
		pg.Annotations = map[string]string{topology.AnnotationSegmentSize: strconv.Itoa(req.SegmentSize), topology.AnnotationSegmentTopologyKey: req.SegmentTopologyKey}
	}
	claims := map[string]*resourceapi.ResourceClaim{}
	pods := make([]*corev1.Pod, req.Pods)
	for i := range pods {
		pod := fmt.Sprintf("%s-%d", name, i)
		claim := scenario.GPUClaim(pod+"-gpus", int64(req.GPUsPerPod))
		claim.Namespace, claim.UID = ns, types.UID("dry-run-"+claim.Name)
		claims[claim.Name] = claim
		pods[i] = scenario.Pod(pod, "0", "0", claim.Name)
		pods[i].Namespace, pods[i].UID = ns, types.UID("dry-run-"+pod)
		pods[i].Spec.SchedulingGroup = &corev1.PodSchedulingGroup{PodGroupName: &pg.Name}
	}
	g, err := placement.NewGang(pg, pods, func(_, name string) (*resourceapi.ResourceClaim, error) {
		if c := claims[name]; c != nil {
			return c, nil
		}
		return nil, fmt.Errorf("claim %s not found", name)
	})
	if err != nil {
		return nil, fmt.Errorf("fit: gang: %w", err)
	}
	return g, nil
}

func podsPerNode(pods []placement.PodPlacement) []fitNode {
	count := map[string]int{}
	for _, p := range pods {
		count[p.Node]++
	}
	out := make([]fitNode, 0, len(count))
	for n, c := range count {
		out = append(out, fitNode{Node: n, Pods: c})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Node < out[j].Node })
	return out
}

func hasClass(classes []resourceapi.DeviceClass, name string) bool {
	for _, c := range classes {
		if c.Name == name {
			return true
		}
	}
	return false
}

func ptrs[T any](v []T) []*T {
	out := make([]*T, len(v))
	for i := range v {
		out[i] = &v[i]
	}
	return out
}

// renderFit prints the verdict, then the nodes or the reason.
func renderFit(w io.Writer, r *fitReport) error {
	pods := "pods"
	if r.Pods == 1 {
		pods = "pod"
	}
	gang := fmt.Sprintf("%d %s × %d GPUs", r.Pods, pods, r.GPUsPerPod)
	if r.TopologyKey != "" {
		gang += " in one " + r.TopologyKey
	}
	if !r.Fits {
		_, err := fmt.Fprintf(w, "Fits: no: %s\n%s\n", gang, r.Message)
		return err
	}
	fmt.Fprintf(w, "Fits: yes: %s, in %s %s\n", gang, r.Level, r.Domain)
	if r.Spread != "" {
		fmt.Fprintf(w, "Spread: %s\n", r.Spread)
	}
	if r.Segments != "" {
		fmt.Fprintf(w, "Segments: %s\n", r.Segments)
	}
	if r.FabricHealth != "" {
		fmt.Fprintf(w, "Fabric health: %s\n", strings.TrimPrefix(r.FabricHealth, "fabric health: "))
	}
	t := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(t, "NODE\tPODS")
	for _, n := range r.Nodes {
		fmt.Fprintln(t, n.Node+"\t"+strconv.Itoa(n.Pods))
	}
	return t.Flush()
}
