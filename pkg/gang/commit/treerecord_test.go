package commit

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	resourceapi "k8s.io/api/resource/v1"

	"github.com/gpufabric/gpufabric/pkg/gang/commit/recordwire"
	"github.com/gpufabric/gpufabric/pkg/gang/internal/objtest"
	"github.com/gpufabric/gpufabric/pkg/gang/placement"
	"github.com/gpufabric/gpufabric/pkg/gang/vocab"
)

var treeName = vocab.RecordName("uid-root")

// TestTreeRecordRoundTrip: a tree's record is version 3: the root, the
// leaves with their domains, each pod's leaf (left out for the first),
// each claim's leaves (the PodGroup claims'); it decodes to itself.
func TestTreeRecordRoundTrip(t *testing.T) {
	tr := treeGang(3, 2)
	rec := newTreeRecord(tr.root, tr.leaves, planLeafWrites(tr.leaves))
	raw := string(encode(t, rec))
	for _, want := range []string{
		`{"v":3,"root":{"kind":"CompositePodGroup","namespace":"ns","name":"job","uid":"uid-root"},"groups":[{"namespace":"ns","name":"leaf-0","uid":"` + string(uuid(9, 0)) + `","domain":"rack-0","key":"gpufabric.dev/rack"},`,
		`{"n":"leaf-0-worker-1","u":"` + string(uuid(40, 1)) + `","o":0},{"n":"leaf-1-worker-0","u":"` + string(uuid(41, 0)) + `","o":1,"g":1}`,
		`{"n":"leaf-2-fabric","u":"` + string(uuid(22, 1<<20)) + `","a":"` + AllocationFingerprint(&tr.leaves[2].Decision.Claims[0].Allocation) + `","g":[2]}`,
		`{"n":"dataset","u":"uid-dataset","p":[0,2,4]}`,
	} {
		if !strings.Contains(raw, want) {
			t.Errorf("record %s\nwant %s", raw, want)
		}
	}
	got, err := recordwire.Decode(treeName, []byte(raw))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(rec, got); diff != "" {
		t.Errorf("round trip (-want +got):\n%s", diff)
	}
}

// TestRecordFitsTree: a tree whose record cannot be written is refused
// before it is placed (ErrUnsupported, naming the root and the limit):
// more leaves than a record holds, or more members, claims or bytes over
// all its leaves than a flat gang's record may hold.
func TestRecordFitsTree(t *testing.T) {
	root := Root{Kind: KindCompositePodGroup, Namespace: "ns", Name: "job", UID: "uid-root"}
	gangs := func(leaves, pods, claims, nameLen int) []*placement.Gang {
		var out []*placement.Gang
		c := objtest.Claim(strings.Repeat("c", nameLen), false)
		for range leaves {
			g := jobGang(pods, 0, false).g
			for i := range g.Members {
				g.Members[i].Claims = slices.Repeat([]*resourceapi.ResourceClaim{c}, claims)
			}
			out = append(out, g)
		}
		return out
	}
	tests := []struct {
		name string
		g    []*placement.Gang
		want string
	}{
		{"8 leaves of 1,250 pods × 2 claims", gangs(8, 1250, 2, 60), ""},
		{"584 leaves", gangs(MaxRecordGroups, 1, 1, 60), ""},
		{"585 leaves", gangs(MaxRecordGroups+1, 1, 1, 60), "585 leaf podgroups, more than the 584 a commit record holds"},
		{"10,002 pods in all", gangs(2, 5001, 0, 0), "10002 members, more than the 10000"},
		{"too many claims in all", gangs(2, 500, 321, 60), "321000 claims, more than the 320004"},
		{"too many bytes in all", gangs(2, 5000, 32, 253), "more than the 58982400 it may"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := RecordFitsTree(root, tt.g)
			if tt.want == "" {
				if err != nil {
					t.Errorf("refused: %v", err)
				}
				return
			}
			if !errors.Is(err, placement.ErrUnsupported) || !strings.Contains(err.Error(), tt.want) || !strings.HasPrefix(err.Error(), "compositepodgroup ns/job: ") {
				t.Errorf("error %v, want ErrUnsupported for compositepodgroup ns/job with %q", err, tt.want)
			}
		})
	}
}

// TestTreeBoundHolds: the bound RecordFitsTree checks is at least the
// size of the record a tree's commit writes.
func TestTreeBoundHolds(t *testing.T) {
	for _, size := range [][2]int{{1, 1}, {3, 2}, {8, 125}, {64, 20}} {
		tr := treeGang(size[0], size[1])
		var gangs []*placement.Gang
		for _, l := range tr.leaves {
			gangs = append(gangs, l.Gang)
		}
		raw := encode(t, newTreeRecord(tr.root, tr.leaves, planLeafWrites(tr.leaves)))
		if bound := treeBound(gangs); len(raw) > bound {
			t.Errorf("%d leaves of %d pods: record %d bytes, bound %d", size[0], size[1], len(raw), bound)
		}
	}
}

// TestPlanLeafWrites: the writes of a tree are every leaf's PodGroup
// claims first, then every member's claims, leaf by leaf; a claim members
// of several leaves name is written once, for all of them.
func TestPlanLeafWrites(t *testing.T) {
	tr := treeGang(2, 2)
	var got []string
	for _, w := range planLeafWrites(tr.leaves) {
		got = append(got, fmt.Sprintf("%s alloc=%v shared=%v for=%s", w.claim.Name, w.alloc != nil, w.shared, strings.Join(consumersOf(w), ",")))
	}
	want := []string{
		"leaf-0-fabric alloc=true shared=true for=podgroups/leaf-0",
		"leaf-1-fabric alloc=true shared=true for=podgroups/leaf-1",
		"leaf-0-worker-0-gpus alloc=true shared=false for=pods/leaf-0-worker-0",
		"dataset alloc=false shared=false for=pods/leaf-0-worker-0,pods/leaf-1-worker-0",
		"leaf-0-worker-1-gpus alloc=true shared=false for=pods/leaf-0-worker-1",
		"leaf-1-worker-0-gpus alloc=true shared=false for=pods/leaf-1-worker-0",
		"leaf-1-worker-1-gpus alloc=true shared=false for=pods/leaf-1-worker-1",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("writes (-want +got):\n%s", diff)
	}
}

func consumersOf(w claimWrite) []string {
	var out []string
	for _, c := range w.consumers {
		out = append(out, c.Resource+"/"+c.Name)
	}
	return out
}
