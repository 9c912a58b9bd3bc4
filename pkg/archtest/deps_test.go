// Package archtest guards the project's dependency rules (DEVELOPERS.md):
// pkg/topology is the shared vocabulary; devices, claims and gang build on
// it; the placement engine and everything it needs stay pure (no
// client-go), its cluster index (pkg/gang/placement/index) a leaf below it;
// only cmd/* wires components together; production binaries never link
// test code.
package archtest

import (
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

const module = "github.com/gpufabric/gpufabric/"

// rules: for each package prefix (the longest match applies), the module
// packages it may import directly besides its own subtree and pkg/internal.
var rules = []struct {
	prefix string
	may    []string
}{
	{"pkg/topology", nil},
	{"pkg/devices", []string{"pkg/topology"}},
	{"pkg/devices/mock", []string{"pkg/devices", "pkg/topology"}},
	// Fabric health is a leaf of the node side: counters in, windows out;
	// it never imports pkg/devices (which may one day import it).
	{"pkg/devices/fabrichealth", []string{"pkg/topology"}},
	{"pkg/claims", []string{"pkg/topology"}},
	{"pkg/gang/placement", []string{"pkg/topology"}},
	// The cluster index is a leaf of the engine: nothing of the engine
	// (pkg/gang/placement) above it, only the vocabulary.
	{"pkg/gang/placement/index", []string{"pkg/topology"}},
	// The cost model is a leaf of the engine too: budgets and the memory
	// of refused and timed-out calls, no cluster view.
	{"pkg/gang/placement/cost", nil},
	// The segment planner is a leaf too: plain numbers in, picks out.
	{"pkg/gang/placement/segment", nil},
	// Fabric health ranking: domains by their nodes' sick devices.
	{"pkg/gang/placement/fabricrank", []string{"pkg/topology", "pkg/gang/placement/index"}},
	// The rail search is a leaf too: it reads the cluster index and
	// reaches the engine's cheap checks and allocator through interfaces.
	{"pkg/gang/placement/rails", []string{"pkg/topology", "pkg/gang/placement/index"}},
	// What the engine knows of extended resources backed by DRA: a leaf
	// that reads the cluster index's resource lists.
	{"pkg/gang/placement/extended", []string{"pkg/topology", "pkg/gang/placement/index"}},
	// Member order is a leaf too: a pod in, its rank out.
	{"pkg/gang/placement/rank", nil},
	// The spare-node policy is a leaf too: it reads the cluster index.
	{"pkg/gang/placement/spares", []string{"pkg/topology", "pkg/gang/placement/index"}},
	// The tree search is pure too, above the engine it drives.
	{"pkg/gang/composite", []string{"pkg/topology", "pkg/gang/placement", "pkg/gang/placement/index"}},
	{"pkg/gang/assume", []string{"pkg/topology", "pkg/gang/placement", "pkg/gang/podstate"}},
	{"pkg/gang/metrics", []string{"pkg/topology", "pkg/gang/vocab", "pkg/gang/ungate", "pkg/gang/commit", "pkg/gang/evict", "pkg/gang/replace"}},
	// Trees read and place CompositePodGroup trees; their preemption is
	// the evict room's (a plan by the pure pkg/gang/preemption, the tree
	// search behind its Placer), and the evict room reads trees only
	// through its own interface (evict.Trees), never this package.
	{"pkg/gang/trees", []string{"pkg/topology", "pkg/gang/composite", "pkg/gang/placement", "pkg/gang/assume", "pkg/gang/commit", "pkg/gang/gate",
		"pkg/gang/metrics", "pkg/gang/report", "pkg/gang/vocab", "pkg/gang/evict", "pkg/gang/preemption"}},
	{"pkg/gang/domains", []string{"pkg/topology"}},
	{"pkg/gang/freeroom", []string{"pkg/topology", "pkg/gang/placement/spares", "pkg/gang/placement/index"}},
	{"pkg/gang/vocab", []string{"pkg/topology"}},
	{"pkg/gang/gate", nil},
	{"pkg/gang/report", nil},
	{"pkg/gang/podstate", []string{"pkg/topology"}},
	{"pkg/gang/ungate", []string{"pkg/gang/podstate"}},
	{"pkg/gang/gangless", []string{"pkg/gang/report"}},
	// Membership of gpufabric-grouper's PodGroups: owner chains from its
	// own metadata informers; lone pods fall back to gangless.
	{"pkg/gang/membership", []string{"pkg/topology", "pkg/gang/vocab", "pkg/gang/report", "pkg/gang/gangless"}},
	{"pkg/gang/volumepins", []string{"pkg/topology", "pkg/gang/placement"}},
	// Extended resources backed by DRA: the special claims, made before a
	// gang is placed; read by the engine and the commit room through the
	// engine's leaf pkg/gang/placement/extended.
	{"pkg/gang/extres", []string{"pkg/topology", "pkg/gang/placement", "pkg/gang/gate"}},
	{"pkg/gang/memberevents", []string{"pkg/topology", "pkg/gang/vocab", "pkg/gang/report"}},
	// The scheduler's rooms never import the loop (pkg/gang/scheduler).
	{"pkg/gang/queue", []string{"pkg/topology", "pkg/gang/vocab", "pkg/gang/gate", "pkg/gang/report"}},
	{"pkg/gang/guard", []string{"pkg/topology", "pkg/gang/vocab", "pkg/gang/gate", "pkg/gang/report"}},
	{"pkg/gang/nodetrust", []string{"pkg/topology", "pkg/gang/vocab", "pkg/gang/report"}},
	{"pkg/gang/preemption", []string{"pkg/topology", "pkg/gang/placement"}},
	// The commit record (what it holds, its validation, its JSON) is a
	// leaf of the commit room: no API, no store, no recovery.
	{"pkg/gang/commit/recordwire", []string{"pkg/topology", "pkg/gang/vocab"}},
	{"pkg/gang/commit", []string{"pkg/topology", "pkg/gang/placement", "pkg/gang/vocab", "pkg/gang/gate", "pkg/gang/report", "pkg/gang/podstate"}},
	{"pkg/gang/replace", []string{"pkg/topology", "pkg/gang/vocab", "pkg/gang/gate", "pkg/gang/report"}},
	{"pkg/gang/evict", []string{"pkg/topology", "pkg/gang/placement", "pkg/gang/vocab", "pkg/gang/gate", "pkg/gang/report", "pkg/gang/podstate",
		"pkg/gang/preemption", "pkg/gang/commit"}},
	{"pkg/gang/scheduler", []string{"pkg/topology", "pkg/gang/placement", "pkg/gang/preemption", "pkg/gang/domains", "pkg/gang/vocab", "pkg/gang/gate", "pkg/gang/report", "pkg/gang/podstate", "pkg/gang/queue", "pkg/gang/guard",
		"pkg/gang/commit", "pkg/gang/evict", "pkg/gang/nodetrust", "pkg/gang/ungate", "pkg/gang/freeroom", "pkg/gang/memberevents", "pkg/gang/volumepins", "pkg/gang/replace", "pkg/gang/gangless", "pkg/gang/extres",
		"pkg/gang/assume", "pkg/gang/composite", "pkg/gang/metrics", "pkg/gang/trees", "pkg/gang/membership"}},
	{"pkg/sim", []string{"pkg/topology", "pkg/gang/placement", "pkg/gang/preemption", "pkg/gang/composite"}},
	// The simulator's tree jobs are a leaf of it: tree shapes, the
	// baselines' tree rules, the tree the engine's search takes, metrics;
	// nothing of the simulator's clusters or traces.
	{"pkg/sim/trees", []string{"pkg/topology", "pkg/gang/placement", "pkg/gang/composite"}},
	// The simulator's clusters (generated, from a file, indexed) are a
	// leaf of it: what kubectl gpufabric's dry runs read too.
	{"pkg/sim/fabric", []string{"pkg/topology", "pkg/gang/placement", "pkg/sim/trees"}},
	// The failure model is a leaf of the simulator: rates, the seeded
	// schedule and checkpoint arithmetic, no cluster view.
	{"pkg/sim/failures", nil},
	// The occupancy chart is a leaf: per-bucket averages in, SVG out.
	{"pkg/sim/chart", nil},
	// inspect reads priorities as the scheduler does (pure helpers), and
	// the free-room view in the format the scheduler writes.
	{"pkg/inspect", []string{"pkg/topology", "pkg/gang/vocab", "pkg/gang/preemption", "pkg/gang/freeroom", "pkg/gang/placement/spares"}},
	// The plugin's commands may also use the simulator's file format and
	// the placement engine (dry runs), not the simulator itself;
	// pkg/inspect does neither.
	{"pkg/inspect/cli", []string{"pkg/inspect", "pkg/topology", "pkg/gang/vocab", "pkg/gang/preemption", "pkg/gang/placement", "pkg/sim/fabric", "pkg/gang/freeroom", "pkg/gang/placement/spares"}},
	{"pkg/component", nil},
	// Workload grouping: the pure mapping (workload → gang plan, the pod
	// rules its admission policy is generated from) reads the scheduler's
	// vocabulary to validate annotations as the scheduler does; the
	// grouper controller builds on it and reports through the bounded
	// events of pkg/gang/report.
	{"pkg/workloads/grouping", []string{"pkg/topology", "pkg/gang/vocab"}},
	{"pkg/workloads/grouper", []string{"pkg/workloads/grouping", "pkg/gang/report", "pkg/gang/vocab", "pkg/topology"}},
}

// pure packages (with their whole dependency graph) never import
// client-go: snapshot in, decision out.
var pure = []string{"pkg/topology", "pkg/gang/composite", "pkg/gang/commit/recordwire", "pkg/gang/vocab", "pkg/gang/gate", "pkg/gang/podstate", "pkg/gang/ungate", "pkg/gang/placement", "pkg/gang/placement/index", "pkg/gang/placement/segment", "pkg/gang/placement/cost", "pkg/gang/placement/spares", "pkg/gang/placement/fabricrank", "pkg/gang/placement/rails", "pkg/gang/placement/extended", "pkg/gang/placement/rank", "pkg/gang/preemption", "pkg/sim", "pkg/sim/fabric", "pkg/sim/failures", "pkg/sim/trees", "pkg/sim/chart", "pkg/claims", "pkg/claims/cdi", "pkg/claims/checkpoint", "pkg/claims/config", "pkg/workloads/grouping"}

func goList(t *testing.T, args ...string) []string {
	t.Helper()
	touchSources(t)
	out, err := exec.Command("go", append([]string{"list", "-mod=readonly"}, args...)...).Output()
	if err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			t.Fatalf("go list %v: %v\n%s", args, err, ee.Stderr)
		}
		t.Fatalf("go list %v: %v", args, err)
	}
	return strings.Fields(string(out))
}

func TestLayering(t *testing.T) {
	lines := goList(t, "-f", `{{.ImportPath}}:{{join .Imports ","}}`, module+"pkg/...")
	checked := 0
	for _, line := range lines {
		pkg, imports, _ := strings.Cut(line, ":")
		rel := strings.TrimPrefix(pkg, module)
		rule := -1
		for i, r := range rules {
			if (rel == r.prefix || strings.HasPrefix(rel, r.prefix+"/")) && (rule < 0 || len(r.prefix) > len(rules[rule].prefix)) {
				rule = i
			}
		}
		for _, imp := range strings.Split(imports, ",") {
			dep, ok := strings.CutPrefix(imp, module)
			if !ok {
				continue
			}
			checked++
			if strings.HasPrefix(dep, "cmd/") || strings.HasPrefix(dep, "test/") {
				t.Errorf("%s imports %s: pkg/ never depends on cmd/ or test/", rel, dep)
				continue
			}
			if rule < 0 || allowed(rules[rule].prefix, rules[rule].may, dep) {
				continue
			}
			t.Errorf("%s imports %s; %s may import only %v, its own packages and pkg/internal", rel, dep, rules[rule].prefix, rules[rule].may)
		}
	}
	if checked == 0 {
		t.Fatal("no module import checked: go list returned nothing useful")
	}
}

func allowed(prefix string, may []string, dep string) bool {
	within := func(p string) bool { return dep == p || strings.HasPrefix(dep, p+"/") }
	if within(prefix) || within("pkg/internal") {
		return true
	}
	for _, m := range may {
		if within(m) {
			return true
		}
	}
	return false
}

func TestPurePackagesHaveNoClientGo(t *testing.T) {
	for _, p := range pure {
		deps := goList(t, "-deps", module+p)
		if len(deps) == 0 {
			t.Fatalf("%s: no dependencies listed", p)
		}
		for _, d := range deps {
			if strings.HasPrefix(d, "k8s.io/client-go") {
				t.Errorf("%s depends on %s: the engine side stays pure (snapshot in, decision out)", p, d)
				break
			}
		}
	}
}

// touchSources stats every Go file under pkg/, cmd/ and test/ so that go
// test's cache knows this test depends on them (go list runs in a child
// process the cache does not see).
func touchSources(t *testing.T) {
	t.Helper()
	for _, root := range []string{"..", "../../cmd", "../../test"} {
		err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") {
				return err
			}
			_, err = os.Stat(path)
			return err
		})
		if err != nil {
			t.Fatalf("walk sources: %v", err)
		}
	}
}
