package main

import (
	"errors"
	"flag"
	"fmt"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/gpufabric/gpufabric/pkg/component/envflag"
	"github.com/gpufabric/gpufabric/pkg/gang/placement"
	"github.com/gpufabric/gpufabric/pkg/gang/placement/cost"
	"github.com/gpufabric/gpufabric/pkg/gang/placement/spares"
	"github.com/gpufabric/gpufabric/pkg/gang/scheduler"
	"github.com/gpufabric/gpufabric/pkg/gang/vocab"
	"github.com/gpufabric/gpufabric/pkg/topology"
)

// options are the command-line settings.
type options struct {
	kubeconfig      string
	topologyLevels  string
	domainChannels  int
	leaderElect     bool
	leNamespace     string
	leName          string
	leIdentity      string
	leDurations     leaseDurations
	recordNS        string
	metricsAddress  string
	profiling       bool
	domainMetrics   bool
	commitWorkers   int
	commitsInFlight int
	apiQPS          float64
	apiBurst        int
	apiContentType  string
	packOrder       string
	largeGangGPUs   int
	syncTimeout     time.Duration
	budget          placementBudget
	freeRoom        time.Duration
	preemption      preemptionOptions
	replace         scheduler.ReplaceConfig
	serving         servingOptions
	// requireAdminLabels: --require-admin-topology-labels.
	requireAdminLabels bool
	// memberGuardOn: --member-guard.
	memberGuardOn bool
	// spares: --spare-nodes-per-domain, --spare-level,
	// --spares-for-new-gangs.
	spares spares.Policy
	// composites: --composite-pod-groups (auto, true, false);
	// treePlaceCalls: --tree-place-calls.
	composites     string
	treePlaceCalls int
}

// preemptionOptions are the priority settings (docs/design/preemption.md).
type preemptionOptions struct {
	disabled          bool
	nominationTimeout time.Duration
	budget            time.Duration
	starvationBound   time.Duration
	unschedulableWait time.Duration
	// reservationsPerNS bounds the starvation reservations of one
	// namespace.
	reservationsPerNS int
}

// placementBudget bounds one placement attempt (docs/design/cost.md).
type placementBudget struct {
	calls int
	time  time.Duration
}

// leaseDurations are the leader election timings.
type leaseDurations struct{ lease, renew, retry time.Duration }

// envTwins maps flags to their environment variables.
var envTwins = map[string]string{
	"kubeconfig":                  "KUBECONFIG",
	"topology-levels":             "GPUFABRIC_TOPOLOGY_LEVELS",
	"domain-channels":             "GPUFABRIC_DOMAIN_CHANNELS",
	"leader-elect":                "GPUFABRIC_LEADER_ELECT",
	"leader-elect-namespace":      "GPUFABRIC_LEADER_ELECT_NAMESPACE",
	"leader-elect-lease-name":     "GPUFABRIC_LEADER_ELECT_LEASE_NAME",
	"leader-elect-identity":       "GPUFABRIC_LEADER_ELECT_IDENTITY",
	"leader-elect-lease-duration": "GPUFABRIC_LEADER_ELECT_LEASE_DURATION",
	"leader-elect-renew-deadline": "GPUFABRIC_LEADER_ELECT_RENEW_DEADLINE",
	"leader-elect-retry-period":   "GPUFABRIC_LEADER_ELECT_RETRY_PERIOD",
	"commit-record-namespace":     "GPUFABRIC_COMMIT_RECORD_NAMESPACE",
	"metrics-address":             "GPUFABRIC_METRICS_ADDRESS",
	"profiling":                   "GPUFABRIC_PROFILING",
	"per-domain-metrics":          "GPUFABRIC_PER_DOMAIN_METRICS",
	"commit-parallelism":          "GPUFABRIC_COMMIT_PARALLELISM",
	"commits-in-flight":           "GPUFABRIC_COMMITS_IN_FLIGHT",
	"kube-api-qps":                "GPUFABRIC_KUBE_API_QPS",
	"kube-api-burst":              "GPUFABRIC_KUBE_API_BURST",
	"kube-api-content-type":       "GPUFABRIC_KUBE_API_CONTENT_TYPE",
	"pack-order":                  "GPUFABRIC_PACK_ORDER",
	"large-gang-gpus":             "GPUFABRIC_LARGE_GANG_GPUS",
	"disable-preemption":          "GPUFABRIC_DISABLE_PREEMPTION",
	"nomination-timeout":          "GPUFABRIC_NOMINATION_TIMEOUT",
	"preemption-budget":           "GPUFABRIC_PREEMPTION_BUDGET",
	"starvation-bound":            "GPUFABRIC_STARVATION_BOUND",
	"max-unschedulable-wait":      "GPUFABRIC_MAX_UNSCHEDULABLE_WAIT",
	"informer-sync-timeout":       "GPUFABRIC_INFORMER_SYNC_TIMEOUT",
	"placement-allocate-calls":    "GPUFABRIC_PLACEMENT_ALLOCATE_CALLS",
	"placement-time-budget":       "GPUFABRIC_PLACEMENT_TIME_BUDGET",
	"free-room-interval":          "GPUFABRIC_FREE_ROOM_INTERVAL",
	"node-failure-grace":          "GPUFABRIC_NODE_FAILURE_GRACE",
	"replacement-timeout":         "GPUFABRIC_REPLACEMENT_TIMEOUT",
	"member-loss-policy":          "GPUFABRIC_MEMBER_LOSS_POLICY",
	"v":                           "GPUFABRIC_V",
	"logging-format":              "GPUFABRIC_LOGGING_FORMAT",

	"starvation-reservations-per-namespace": "GPUFABRIC_STARVATION_RESERVATIONS_PER_NAMESPACE",

	"tls-cert-file":                    "GPUFABRIC_TLS_CERT_FILE",
	"tls-private-key-file":             "GPUFABRIC_TLS_PRIVATE_KEY_FILE",
	"authorization-always-allow-paths": "GPUFABRIC_AUTHORIZATION_ALWAYS_ALLOW_PATHS",
	"require-admin-topology-labels":    "GPUFABRIC_REQUIRE_ADMIN_TOPOLOGY_LABELS",
	"spare-nodes-per-domain":           "GPUFABRIC_SPARE_NODES_PER_DOMAIN",
	"spare-level":                      "GPUFABRIC_SPARE_LEVEL",
	"spares-for-new-gangs":             "GPUFABRIC_SPARES_FOR_NEW_GANGS",
	"member-guard":                     "GPUFABRIC_MEMBER_GUARD",
	"composite-pod-groups":             "GPUFABRIC_COMPOSITE_POD_GROUPS",
	"tree-place-calls":                 "GPUFABRIC_TREE_PLACE_CALLS",
}

func bindFlags(fs *flag.FlagSet) *options {
	o := &options{}
	fs.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig file; empty: in-cluster config")
	fs.StringVar(&o.topologyLevels, "topology-levels", "", "comma-separated node label keys of the fabric levels above the NVLink domain, innermost first")
	fs.IntVar(&o.domainChannels, "domain-channels", 8, "channels per fabric-domain pool (PodGroups that can share one NVLink domain); 0 disables the publisher")
	fs.BoolVar(&o.leaderElect, "leader-elect", true, "run only while holding the Lease")
	fs.StringVar(&o.leNamespace, "leader-elect-namespace", "kube-system", "namespace of the Lease")
	fs.StringVar(&o.leName, "leader-elect-lease-name", topology.SchedulerName, "name of the Lease")
	fs.StringVar(&o.leIdentity, "leader-elect-identity", "", "identity in the Lease: the pod name, which the chart's admission policy fences writes with; default: hostname")
	fs.DurationVar(&o.leDurations.lease, "leader-elect-lease-duration", 15*time.Second, "how long other replicas wait after the last renewal before they take the Lease")
	fs.DurationVar(&o.leDurations.renew, "leader-elect-renew-deadline", 10*time.Second, "how long the leader keeps writing after its last renewal; must be less than the lease duration")
	fs.DurationVar(&o.leDurations.retry, "leader-elect-retry-period", 2*time.Second, "how often replicas try to acquire or renew the Lease")
	fs.StringVar(&o.recordNS, "commit-record-namespace", "kube-system", "namespace of the commit records (ConfigMaps only the scheduler may write; the chart uses its release namespace) and of the free-room view")
	fs.DurationVar(&o.freeRoom, "free-room-interval", 10*time.Second, "the leader publishes the free GPUs per fabric domain for tenants (ConfigMap gpufabric-free-room in --commit-record-namespace; kubectl gpufabric status reads it when it may not list nodes), rewritten when they changed, at most once per this interval; 0 disables it")
	fs.StringVar(&o.metricsAddress, "metrics-address", ":8080", "address of /metrics and of the health endpoints /livez, /readyz and /healthz; empty disables them")
	fs.BoolVar(&o.profiling, "profiling", false, "serve Go's profiles (CPU, heap, goroutines, execution trace) under /debug/pprof/ on --metrics-address, as kube-scheduler's --profiling does on its port, to users RBAC allows the non-resource URL /debug/pprof/*")
	o.serving.bind(fs)
	fs.BoolVar(&o.requireAdminLabels, "require-admin-topology-labels", false, "place gangs only on nodes whose multi-node NVLink domain an admin confirmed with the node label "+topology.LabelAdminNVLinkDomain+
		", and only with --topology-levels under "+topology.AdminLabelPrefix+" (docs/topology-labels.md); a node whose slices contradict that label is refused either way")
	fs.BoolVar(&o.domainMetrics, "per-domain-metrics", false, "also export gpufabric_scheduler_domain_free_gpus{domain}: one series per NVLink domain (one per node on HGX); off: only the per-level aggregates")
	fs.IntVar(&o.commitWorkers, "commit-parallelism", scheduler.DefaultCommitParallelism, "writes of one commit phase (claim writes, bindings) in flight at once")
	fs.IntVar(&o.commitsInFlight, "commits-in-flight", scheduler.DefaultCommitsInFlight, "gangs whose commits run at once while the next gangs are placed (1..256)")
	fs.Float64Var(&o.apiQPS, "kube-api-qps", 200, "client-side rate limit of API requests per second")
	fs.StringVar(&o.apiContentType, "kube-api-content-type", runtime.ContentTypeProtobuf, "encoding of requests to the apiserver: "+runtime.ContentTypeProtobuf+" (as kube-scheduler; less CPU to decode watch events) or "+runtime.ContentTypeJSON)
	fs.IntVar(&o.apiBurst, "kube-api-burst", 2000, "client-side burst of API requests (a 512-pod gang's commit is ~1,540 writes)")
	fs.StringVar(&o.packOrder, "pack-order", string(placement.PackLeastSpread), "how a gang takes a domain's nodes: "+string(placement.PackLeastSpread)+
		" (the fewest racks and NVLink domains below it) or "+string(placement.PackFullestNodes)+" (the fullest nodes first: fewer holes, more domains per gang)")
	fs.IntVar(&o.largeGangGPUs, "large-gang-gpus", defaultLargeGangGPUs, "a gang of at least this many GPUs tries the domains (NVLink domains, racks, leaves) whose devices report no link errors or degraded links before the others; 0: fabric health never ranks domains")
	fs.DurationVar(&o.syncTimeout, "informer-sync-timeout", 2*time.Minute, "how long the leader's informers may take to sync before /readyz and the log name what is missing (an API not served, RBAC) instead of \"waiting\"")
	fs.IntVar(&o.budget.calls, "placement-allocate-calls", cost.DefaultCalls, fmt.Sprintf("allocator calls one placement attempt may make, plus %d per member of the gang; a gang that needs more is refused as timed out and backs off harder", cost.CallsPerMember))
	fs.DurationVar(&o.budget.time, "placement-time-budget", cost.DefaultTime, fmt.Sprintf("wall time one placement attempt may spend in allocator calls, plus %s per member; past it the attempt stops at the next call and the gang is refused as timed out", cost.TimePerMember))
	fs.DurationVar(&o.replace.NodeFailureGrace, "node-failure-grace", 30*time.Second, "a node whose Ready condition is False or Unknown this long has lost its gang members, which are replaced in place (0s..1h; docs/design/health.md)")
	fs.DurationVar(&o.replace.ReplacementTimeout, "replacement-timeout", 60*time.Second, "how long a lost member's replacement may take before --member-loss-policy applies, unless the PodGroup's annotation "+vocab.AnnotationReplacementTimeout+" says otherwise (0s..1h)")
	fs.StringVar(&o.replace.Policy, "member-loss-policy", vocab.PolicyRestart, "what happens to a gang whose lost member found no replacement in time, unless the PodGroup's annotation "+vocab.AnnotationOnMemberLoss+" says otherwise: "+
		vocab.PolicyWait+" (keep waiting), "+vocab.PolicyRestart+" (restart the whole gang wherever it fits best) or "+vocab.PolicyFail+" (fail the PodGroup)")
	fs.IntVar(&o.spares.PerDomain, "spare-nodes-per-domain", 0, fmt.Sprintf("wholly free nodes every domain of --spare-level keeps for replacements (late members of a placed gang, a gang restarting into its previous domain): a new gang never takes them; 0..%d, 0: off", spares.MaxPerDomain))
	fs.StringVar(&o.spares.Level, "spare-level", topology.TopologyKeyNVLinkDomain, "the fabric level whose domains keep spare nodes: "+topology.TopologyKeyNVLinkDomain+" or one of --topology-levels (e.g. a rack label)")
	fs.BoolVar(&o.spares.ForNewGangs, "spares-for-new-gangs", false, "let new gangs take spare nodes too: spares are still counted and shown (kubectl gpufabric status, the free-room view), not kept")
	fs.BoolVar(&o.memberGuardOn, "member-guard", true, "place as members of a PodGroup gpufabric-grouper made only pods whose controllers (Job, StatefulSet, leader pod) lead to its workload; others get a NotGroupMember event (needs list/watch of jobs and statefulsets)")
	fs.StringVar(&o.composites, "composite-pod-groups", compositesAuto, "place CompositePodGroup trees (scheduling.k8s.io/v1alpha3, gate CompositePodGroup) as one decision each: "+
		"auto (when the apiserver serves the API), true (the API must be served) or false (a PodGroup with a parent is placed as a flat gang)")
	fs.IntVar(&o.treePlaceCalls, "tree-place-calls", 0, "placement calls one CompositePodGroup tree's search may make (0: 64 plus 8 per PodGroup of the tree); past it the greedy order's placement stands")
	p := &o.preemption
	fs.BoolVar(&p.disabled, "disable-preemption", false, "never evict: a gang that does not fit waits for room whatever its priority")
	fs.DurationVar(&p.nominationTimeout, "nomination-timeout", 5*time.Minute, "how long nodes stay held for a preempting gang whose victims have not all gone")
	fs.DurationVar(&p.budget, "preemption-budget", 2*time.Second, "wall time one preemption evaluation may take")
	fs.DurationVar(&p.starvationBound, "starvation-bound", defaultStarvationBound, "a gang waiting longer holds the domain closest to fitting it; 0 disables reservations")
	fs.IntVar(&p.reservationsPerNS, "starvation-reservations-per-namespace", scheduler.DefaultStarvationReservationsPerNamespace,
		"starving gangs of one namespace that may hold a domain at once (the others wait without one): one tenant's gangs cannot reserve every domain")
	fs.DurationVar(&p.unschedulableWait, "max-unschedulable-wait", time.Minute, "how long an unschedulable gang waits for a cluster change before it is retried anyway")
	return o
}

// defaultLargeGangGPUs is --large-gang-gpus' default: 16 GPUs span at
// least two 8-GPU nodes, whose all-reduce crosses the fabric a sick link
// slows (docs/design/health.md, "Sick fabric").
const defaultLargeGangGPUs = 16

// defaultStarvationBound is --starvation-bound's default: the simulator's
// 30-minute bound (docs/benchmarks.md, "Starvation").
const defaultStarvationBound = 30 * time.Minute

// validate checks what flag parsing cannot.
func (o *options) validate() error {
	p := o.preemption
	for _, d := range []struct {
		name string
		v    time.Duration
		min  time.Duration
	}{
		{"nomination-timeout", p.nominationTimeout, time.Second},
		{"preemption-budget", p.budget, 10 * time.Millisecond},
		{"starvation-bound", p.starvationBound, 0},
		{"max-unschedulable-wait", p.unschedulableWait, time.Second},
		{"informer-sync-timeout", o.syncTimeout, time.Second},
		{"placement-time-budget", o.budget.time, 10 * time.Millisecond},
		{"free-room-interval", o.freeRoom, 0},
	} {
		if d.v < d.min {
			return fmt.Errorf("--%s must be at least %s, got %s", d.name, d.min, d.v)
		}
	}
	if o.replace.NodeFailureGrace <= 0 || o.replace.ReplacementTimeout <= 0 {
		return fmt.Errorf("--node-failure-grace and --replacement-timeout must be more than 0s, got %s and %s", o.replace.NodeFailureGrace, o.replace.ReplacementTimeout)
	}
	if _, err := o.replace.WithDefaults(); err != nil {
		return fmt.Errorf("--node-failure-grace, --replacement-timeout, --member-loss-policy: %w", err)
	}
	if p.reservationsPerNS < 1 {
		return fmt.Errorf("--starvation-reservations-per-namespace must be at least 1, got %d", p.reservationsPerNS)
	}
	if p.starvationBound > 0 && p.starvationBound < time.Second {
		return fmt.Errorf("--starvation-bound must be 0 (off) or at least 1s, got %s", p.starvationBound)
	}
	if o.freeRoom > 0 && o.freeRoom < time.Second {
		return fmt.Errorf("--free-room-interval must be 0 (off) or at least 1s, got %s", o.freeRoom)
	}
	if o.apiContentType != runtime.ContentTypeProtobuf && o.apiContentType != runtime.ContentTypeJSON {
		return fmt.Errorf("--kube-api-content-type must be %s or %s, got %q", runtime.ContentTypeProtobuf, runtime.ContentTypeJSON, o.apiContentType)
	}
	if err := o.serving.validate(); err != nil {
		return err
	}
	if o.requireAdminLabels {
		if err := topology.AdminOwnedLevels(o.levels()); err != nil {
			return fmt.Errorf("--require-admin-topology-labels: %w", err)
		}
	}
	if o.profiling && o.metricsAddress == "" {
		return errors.New("--profiling needs --metrics-address: the profiles are served beside /metrics")
	}
	if o.budget.calls < 1 {
		return fmt.Errorf("--placement-allocate-calls must be at least 1, got %d", o.budget.calls)
	}
	if o.largeGangGPUs < 0 {
		return fmt.Errorf("--large-gang-gpus must be 0 (off) or more, got %d", o.largeGangGPUs)
	}
	if o.commitsInFlight < 1 || o.commitsInFlight > 256 {
		return fmt.Errorf("--commits-in-flight must be 1..256, got %d", o.commitsInFlight)
	}
	if err := o.spares.Validate(o.levels()); err != nil {
		return fmt.Errorf("--spare-nodes-per-domain, --spare-level: %w", err)
	}
	if _, err := placement.ParsePackOrder(o.packOrder); err != nil {
		return fmt.Errorf("--pack-order: %w", err)
	}
	if o.composites != compositesAuto && o.composites != "true" && o.composites != "false" {
		return fmt.Errorf("--composite-pod-groups must be auto, true or false, got %q", o.composites)
	}
	if o.treePlaceCalls < 0 || o.treePlaceCalls > 100000 {
		return fmt.Errorf("--tree-place-calls must be 0 (the default) to 100000, got %d", o.treePlaceCalls)
	}
	return nil
}

// compositesAuto is --composite-pod-groups' default: trees are placed when
// the apiserver serves CompositePodGroups.
const compositesAuto = "auto"

// applyEnv sets every flag not given on the command line from its
// environment twin (envTwins).
func applyEnv(fs *flag.FlagSet, lookup func(string) (string, bool)) error {
	return envflag.Apply(fs, envTwins, lookup)
}

func (o *options) restConfig() (*rest.Config, error) {
	if o.kubeconfig == "" {
		return rest.InClusterConfig()
	}
	return clientcmd.BuildConfigFromFlags("", o.kubeconfig)
}

func (o *options) levels() []string {
	var out []string
	for _, l := range strings.Split(o.topologyLevels, ",") {
		if l = strings.TrimSpace(l); l != "" {
			out = append(out, l)
		}
	}
	return out
}
