package commit

import (
	"slices"
	"strings"
	"testing"

	"github.com/gpufabric/gpufabric/pkg/gang/commit/recordwire"
	"github.com/gpufabric/gpufabric/pkg/gang/gate"
)

// TestBeginTree: a tree that cannot commit as one is refused before
// anything is planned; a PodGroup root that is its own one leaf is
// Begin's commit (the same writes, a version 2 record).
func TestBeginTree(t *testing.T) {
	c := New(Config{Gate: &gate.Gate{}})
	mutate := func(f func(root *Root, leaves []Leaf) []Leaf) (Root, []Leaf) {
		tr := treeGang(2, 2)
		root := tr.root
		return root, f(&root, tr.leaves)
	}
	for _, tt := range []struct {
		name string
		f    func(r *Root, l []Leaf) []Leaf
		want string
	}{
		{"kind", func(r *Root, l []Leaf) []Leaf { r.Kind = "Workload"; return l }, `kind "Workload"`},
		{"no uid", func(r *Root, l []Leaf) []Leaf { r.UID = ""; return l }, "uid are required"},
		{"no leaves", func(r *Root, l []Leaf) []Leaf { return nil }, "0 leaf podgroups, want 1..584"},
		{"too many leaves", func(r *Root, l []Leaf) []Leaf { return slices.Repeat(l[:1], MaxRecordGroups+1) }, "585 leaf podgroups"},
		{"podgroup root with two leaves", func(r *Root, l []Leaf) []Leaf { r.Kind = KindPodGroup; return l }, "a podgroup is its own one leaf"},
		{"podgroup root, another leaf", func(r *Root, l []Leaf) []Leaf { r.Kind = KindPodGroup; return l[:1] }, "is not the root podgroup"},
		{"leaf listed twice", func(r *Root, l []Leaf) []Leaf { return []Leaf{l[0], l[0]} }, "leaf podgroup leaf-0 listed twice"},
		{"leaf is the root", func(r *Root, l []Leaf) []Leaf { r.UID = l[1].PodGroup.UID; return l }, "leaf podgroup leaf-1 has the root's uid"},
		{"leaf in another namespace", func(r *Root, l []Leaf) []Leaf { l[1].PodGroup.Namespace = "other"; return l }, "leaf podgroup other/leaf-1 is not in the root's namespace"},
		{"pod in another namespace", func(r *Root, l []Leaf) []Leaf { l[1].Decision.Pods[1].Namespace = "other"; return l }, "pod other/leaf-1-worker-1"},
		{"no pod placed", func(r *Root, l []Leaf) []Leaf { l[0].Decision.Pods = nil; return l }, "leaf podgroup leaf-0: the decision places no pod"},
		{"no decision", func(r *Root, l []Leaf) []Leaf { l[1].Decision = nil; return l }, "leaf 1: podgroup, gang and decision are required"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			root, leaves := mutate(tt.f)
			txn, err := c.BeginTree(root, leaves)
			if err == nil || txn != nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("BeginTree: %v, want an error containing %q", err, tt.want)
			}
		})
	}
	w := jobGang(3, 1, true)
	flat := c.Begin(w.pg, w.g, w.d)
	txn, err := c.BeginTree(rootOf(w.pg), []Leaf{{PodGroup: w.pg, Gang: w.g, Decision: w.d}})
	if err != nil {
		t.Fatal(err)
	}
	a, b := newTreeRecord(flat.root, flat.leaves, flat.writes), newTreeRecord(txn.root, txn.leaves, txn.writes)
	if len(flat.writes) != len(txn.writes) || a.Version != recordwire.Version2 || string(encode(t, a)) != string(encode(t, b)) {
		t.Errorf("a podgroup root: %d writes and record %s; Begin: %d writes and record %s", len(txn.writes), encode(t, b), len(flat.writes), encode(t, a))
	}
}

// TestTreeDoubleAllocated: two leaves whose decisions allocate one claim
// are refused before anything is written.
func TestTreeDoubleAllocated(t *testing.T) {
	tr := treeGang(2, 1)
	tr.leaves[1].Decision.Claims = append(tr.leaves[1].Decision.Claims, tr.leaves[0].Decision.Claims[0])
	client := tr.clientset()
	err := tr.begin(t, tr.committer(client, nil, nil)).Run(t.Context())
	if err == nil || !strings.Contains(err.Error(), "allocates claim ns/leaf-0-fabric twice; nothing was written") {
		t.Fatalf("run: %v, want the double allocation refused", err)
	}
	if got, want := tr.state(t, client), tr.rolledBack(); got != want {
		t.Errorf("after the refusal %+v, want %+v", got, want)
	}
}
