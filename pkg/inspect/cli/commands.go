package cli

import (
	"fmt"
	"io"
	"runtime"
	"slices"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpufabric/gpufabric/pkg/gang/freeroom"
	"github.com/gpufabric/gpufabric/pkg/gang/placement/spares"
	"github.com/gpufabric/gpufabric/pkg/inspect"
	"github.com/gpufabric/gpufabric/pkg/topology"
)

// DefaultEvents is how many events explain shows by default.
const DefaultEvents = 10

func newStatusCommand(o *options) *cobra.Command {
	barWidth := inspect.DefaultBarWidth
	var sp spares.Policy
	schedulerNS := o.cfg.Getenv(EnvSchedulerNamespace)
	if schedulerNS == "" {
		schedulerNS = DefaultSchedulerNamespace
	}
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Occupancy per NVLink domain and topology level: GPUs, channels, gangs",
		Long: `Occupancy of every NVLink domain and of every level given with
--topology-levels (rack, IB leaf, ...): nodes, GPUs (used = allocated by any
claim, tainted = not allocated with a NoSchedule/NoExecute device taint,
free = neither), fabric-domain channels used/total, an occupancy bar, and the
gangs (PodGroups, with the Job owning them; pods without PodGroup) holding
GPUs there. Then the whole cluster and the PodGroups still waiting.

A user who may not list nodes, ResourceSlices, claims or pods cluster-wide
(a tenant) sees instead the free room gpufabric-scheduler publishes for
everyone: free GPUs per domain of each level, no workloads (ConfigMap
gpufabric-free-room in --scheduler-namespace).`,
		Example: `  kubectl gpufabric status --topology-levels=topology.gpufabric.dev/rack,topology.gpufabric.dev/ib-leaf
  kubectl gpufabric status -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cl, err := o.load(cmd.Context(), inspect.Need{Fabric: true, Claims: true, Pods: true, PodGroups: true})
			if apierrors.IsForbidden(err) {
				return o.freeRoom(cmd, schedulerNS, barWidth, err)
			}
			if err != nil {
				return err
			}
			opts := o.reportOptions()
			opts.Spares = sp
			if !cmd.Flags().Changed("spare-nodes-per-domain") {
				opts.Spares = o.publishedSpares(cmd, schedulerNS)
			}
			rep, err := inspect.BuildStatus(cl, opts)
			if err != nil {
				return err
			}
			st := o.style()
			st.BarWidth = barWidth
			return inspect.Write(cmd.OutOrStdout(), o.output, rep, func(w io.Writer) error { return inspect.RenderStatus(w, rep, st) })
		},
	}
	cmd.Flags().IntVar(&sp.PerDomain, "spare-nodes-per-domain", 0, "the scheduler's --spare-nodes-per-domain: show the spare nodes each domain keeps for replacements (kept, in use); by default what the scheduler published in its free-room view")
	cmd.Flags().StringVar(&sp.Level, "spare-level", topology.TopologyKeyNVLinkDomain, "the scheduler's --spare-level")
	cmd.Flags().IntVar(&barWidth, "bar-width", barWidth, "most cells of an occupancy bar (a domain with fewer GPUs gets one cell per GPU)")
	cmd.Flags().StringVar(&schedulerNS, "scheduler-namespace", schedulerNS,
		"namespace of gpufabric-scheduler, whose free-room view is shown when listing the cluster is forbidden (default $"+EnvSchedulerNamespace+", else "+DefaultSchedulerNamespace+")")
	return cmd
}

// freeRoom prints the scheduler's free-room view in place of status, for
// a user to whom listing the cluster is forbidden (listErr); when the view
// cannot be read either, both errors are returned.
func (o *options) freeRoom(cmd *cobra.Command, ns string, barWidth int, listErr error) error {
	v, err := o.readView(cmd, ns)
	if err != nil {
		return fmt.Errorf("%w; %w", listErr, err)
	}
	rep := &inspect.FreeRoomReport{Source: ns + "/" + freeroom.ConfigMapName, Reason: listErr.Error(), View: v}
	st := o.style()
	st.BarWidth = barWidth
	return inspect.Write(cmd.OutOrStdout(), o.output, rep, func(w io.Writer) error { return inspect.RenderFreeRoom(w, rep, st) })
}

// readView reads the scheduler's free-room view from namespace ns.
func (o *options) readView(cmd *cobra.Command, ns string) (*freeroom.View, error) {
	c, err := o.client()
	if err != nil {
		return nil, err
	}
	cm, err := c.CoreV1().ConfigMaps(ns).Get(cmd.Context(), freeroom.ConfigMapName, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("the free-room view %s/%s cannot be read either (--scheduler-namespace): %w", ns, freeroom.ConfigMapName, err)
	}
	v, err := freeroom.Decode(cm)
	if err != nil {
		return nil, fmt.Errorf("the free-room view %s/%s: %w", ns, freeroom.ConfigMapName, err)
	}
	return v, nil
}

// publishedSpares is the spare-node policy the scheduler published in its
// free-room view (none when the view cannot be read or keeps none): status
// shows the spares without the user repeating the scheduler's flags.
func (o *options) publishedSpares(cmd *cobra.Command, ns string) spares.Policy {
	v, err := o.readView(cmd, ns)
	if err != nil || v.Spares == nil {
		return spares.Policy{}
	}
	return spares.Policy{PerDomain: v.Spares.PerDomain, Level: v.Spares.Level}
}

func newNodesCommand(o *options) *cobra.Command {
	return &cobra.Command{
		Use:   "nodes",
		Short: "GPUs, rails and taints per node",
		Long: `One row per node that publishes devices of gpufabric.dev: its NVLink domain
and topology-level labels, GPUs (total, used, tainted, free, model), the IB
rails of its GPUs and NICs, device taints (key=value:effect and the devices
carrying them) and node taints.`,
		Example: `  kubectl gpufabric nodes
  kubectl gpufabric nodes -o yaml`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cl, err := o.load(cmd.Context(), inspect.Need{Fabric: true, Claims: true})
			if err != nil {
				return err
			}
			rep, err := inspect.BuildNodes(cl, o.reportOptions())
			if err != nil {
				return err
			}
			return inspect.Write(cmd.OutOrStdout(), o.output, rep, func(w io.Writer) error { return inspect.RenderNodes(w, rep) })
		},
	}
}

func newExplainCommand(o *options) *cobra.Command {
	var allNamespaces bool
	events := DefaultEvents
	cmd := &cobra.Command{
		Use:   "explain [podgroup | KIND/NAME]",
		Short: "Where a PodGroup or workload went (rank → node → domain) or why it waits",
		Long: `With a PodGroup name (namespace from -n): its state, its place in the
scheduler's queue while it waits (position, priority, age), conditions (whole
messages), members by rank with their node, NVLink domain and topology-level
domains, devices and rails, why unplaced members wait (PodScheduled reason and
message, scheduling gates), its shared claims and their channel, and the last
events about it.

With KIND/NAME of a workload (job/, jobset/, lws/, raycluster/, trainjob/,
rayjob/): the same for each PodGroup behind it: those the workload owns or
labels, and those its pods (labelled batch.kubernetes.io/job-name,
jobset.sigs.k8s.io/jobset-name, leaderworkerset.sigs.k8s.io/name or
ray.io/cluster = NAME) name. A bare name
that is no PodGroup is tried as each of these kinds in that order; when
nothing matches, the PodGroup is reported NotFound with the pods that name it.

Without a name: one line per PodGroup of the namespace (or of all namespaces
with -A).`,
		Example: `  kubectl gpufabric explain llm-train -n team-a
  kubectl gpufabric explain job/llm-train -n team-a
  kubectl gpufabric explain -A`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := o.check(); err != nil {
				return err
			}
			if len(args) == 0 {
				return o.listGroups(cmd, allNamespaces)
			}
			if allNamespaces {
				return fmt.Errorf("explain %s: --all-namespaces needs no name", args[0])
			}
			return o.explain(cmd, args[0], events)
		},
	}
	cmd.Flags().BoolVarP(&allNamespaces, "all-namespaces", "A", false, "list the PodGroups of every namespace")
	cmd.Flags().IntVar(&events, "events", events, "how many of the last events to show")
	return cmd
}

func (o *options) explain(cmd *cobra.Command, ref string, events int) error {
	ns, err := o.namespace()
	if err != nil {
		return err
	}
	c, err := o.client()
	if err != nil {
		return err
	}
	need := inspect.Need{Namespace: ns, Fabric: true, FabricOptional: true, Claims: true, Pods: true, PodGroups: true, Composites: true}
	cl, err := inspect.Load(cmd.Context(), c, need)
	if err != nil {
		return err
	}
	res, err := inspect.ResolveRef(cl, ns, ref)
	if err != nil {
		return err
	}
	var reps []*inspect.ExplainReport
	for _, name := range res.Groups {
		evs, err := inspect.Load(cmd.Context(), c, inspect.Need{Namespace: ns, EventsAbout: name})
		if err != nil {
			return err
		}
		one := *cl
		one.Events, one.Warnings = evs.Events, append(slices.Clone(cl.Warnings), evs.Warnings...)
		rep, err := inspect.BuildExplain(&one, o.reportOptions(), ns, name, events)
		if err != nil {
			return err
		}
		rep.Workload, rep.Tree = res.Workload, res.Tree
		reps = append(reps, rep)
	}
	st := o.style()
	if len(reps) == 1 {
		return inspect.Write(cmd.OutOrStdout(), o.output, reps[0], func(w io.Writer) error { return inspect.RenderExplain(w, reps[0], st) })
	}
	list := inspect.ExplainList{Items: reps}
	return inspect.Write(cmd.OutOrStdout(), o.output, list, func(w io.Writer) error { return inspect.RenderExplainList(w, list, st) })
}

func (o *options) listGroups(cmd *cobra.Command, all bool) error {
	ns := ""
	if !all {
		var err error
		if ns, err = o.namespace(); err != nil {
			return err
		}
	}
	c, err := o.client()
	if err != nil {
		return err
	}
	cl, err := inspect.Load(cmd.Context(), c, inspect.Need{Namespace: ns, Fabric: true, FabricOptional: true, Pods: true, PodGroups: true})
	if err != nil {
		return err
	}
	rep, err := inspect.BuildGroups(cl, o.reportOptions())
	if err != nil {
		return err
	}
	return inspect.Write(cmd.OutOrStdout(), o.output, rep, func(w io.Writer) error { return inspect.RenderGroups(w, rep, all) })
}

// versionInfo is what `version -o json|yaml` prints.
type versionInfo struct {
	Version   string `json:"version"`
	GoVersion string `json:"goVersion"`
	Platform  string `json:"platform"`
}

func newVersionCommand(o *options) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the plugin's version",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.check(); err != nil {
				return err
			}
			v := versionInfo{Version: o.cfg.Version, GoVersion: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
			return inspect.Write(cmd.OutOrStdout(), o.output, v, func(w io.Writer) error {
				_, err := fmt.Fprintf(w, "kubectl-gpufabric %s (%s, %s)\n", v.Version, v.GoVersion, v.Platform)
				return err
			})
		},
	}
}
