package commit

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpufabric/gpufabric/pkg/gang/commit/recordwire"
	"github.com/gpufabric/gpufabric/pkg/gang/gate"
	"github.com/gpufabric/gpufabric/pkg/gang/internal/objtest"
	"github.com/gpufabric/gpufabric/pkg/gang/placement"
	"github.com/gpufabric/gpufabric/pkg/gang/vocab"
)

var validName = vocab.RecordName("uid-pg")

// validRecord is a well-formed record of PodGroup ns/pg with three
// members, a shared claim, per-pod claims and a claim two members share.
func validRecord() *commitRecord {
	pg := &schedulingv1beta1.PodGroup{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "pg", UID: "uid-pg"}}
	alloc := &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{
		{Request: "gpus", Driver: "gpufabric.dev", Pool: "node-a", Device: "gpu-0"},
	}}}
	d := &placement.Decision{Domain: "dom", TopologyKey: "gpufabric.dev/nvlinkDomain", Pods: []placement.PodPlacement{
		{Namespace: "ns", Name: "p0", UID: "uid-p0", Node: "node-a"},
		{Namespace: "ns", Name: "p1", UID: "uid-p1", Node: "node-b"},
		{Namespace: "ns", Name: "p2", UID: "uid-p2", Node: "node-a"},
	}}
	ref := func(resource, name string) resourceapi.ResourceClaimConsumerReference {
		return resourceapi.ResourceClaimConsumerReference{Resource: resource, Name: name, UID: types.UID("uid-" + name)}
	}
	writes := []claimWrite{
		{claim: objtest.Claim("fabric", false), alloc: alloc, consumers: []resourceapi.ResourceClaimConsumerReference{ref("podgroups", "pg")}, shared: true},
		{claim: objtest.Claim("p0-gpus", false), alloc: alloc, consumers: []resourceapi.ResourceClaimConsumerReference{ref("pods", "p0")}},
		{claim: objtest.Claim("user", true), consumers: []resourceapi.ResourceClaimConsumerReference{ref("pods", "p1")}},
		{claim: objtest.Claim("pair", false), alloc: alloc, consumers: []resourceapi.ResourceClaimConsumerReference{ref("pods", "p1"), ref("pods", "p2")}},
	}
	return newRecord(pg, d, writes)
}

func encode(t testing.TB, rec *commitRecord) []byte {
	t.Helper()
	raw, err := recordwire.Encode(rec)
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

// TestRecordRoundTrip: a record written by a commit decodes to itself, with
// the shared claim reserved for the group, the per-pod claims for their
// pods, the pair for both, nodes in a table, and a fingerprint only for
// allocations the commit writes. A small record is one object.
func TestRecordRoundTrip(t *testing.T) {
	rec := validRecord()
	raw := encode(t, rec)
	if want := `"nodes":["node-a","node-b"],"pods":[{"n":"p0","u":"uid-p0","o":0},{"n":"p1","u":"uid-p1","o":1},{"n":"p2","u":"uid-p2","o":0}]`; !strings.Contains(string(raw), want) {
		t.Errorf("record %s\nwant the node table and indices %s", raw, want)
	}
	head, parts, err := CommitRecords.Objects("gpufabric-system", validName, raw)
	if err != nil {
		t.Fatal(err)
	}
	if head.Name != "gpufabric-commit-uid-pg" || head.Labels[vocab.LabelCommitRecord] != "true" || len(parts) != 0 || head.Data[RecordPartsKey] != "" {
		t.Errorf("object %s labels %v, %d parts", head.Name, head.Labels, len(parts))
	}
	got, err := recordwire.Decode(head.Name, []byte(head.Data[RecordKey]))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(rec, got); diff != "" {
		t.Errorf("round trip (-want +got):\n%s", diff)
	}
	var pods [][]string
	for _, c := range got.Claims {
		pods = append(pods, c.Pods)
	}
	if diff := cmp.Diff([][]string{nil, {"p0"}, {"p1"}, {"p1", "p2"}}, pods); diff != "" {
		t.Errorf("consumers (-want +got):\n%s", diff)
	}
	if got.Claims[0].Allocation == "" || got.Claims[2].Allocation != "" {
		t.Errorf("fingerprints %+v", got.Claims)
	}
}

// rawRecordConfigMap is a one-object record holding raw.
func rawRecordConfigMap(raw string) *v1.ConfigMap {
	return &v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: validName, Namespace: "gpufabric-system"}, Data: map[string]string{RecordKey: raw}}
}

// TestRecordFits: a gang whose record cannot be written is refused before
// it is placed (ErrUnsupported, with the limit in the message): more
// members or claims than a record holds, or names so long that the record
// could pass MaxRecordTotalBytes. A 10,000-pod Job gang with 2 claims per
// pod, and one with 16 claims of 60-character names, are accepted.
func TestRecordFits(t *testing.T) {
	long := func(g *placement.Gang, claims, nameLen int) *placement.Gang {
		c := objtest.Claim(strings.Repeat("c", nameLen), false)
		for i := range g.Members {
			g.Members[i].Claims = slices.Repeat([]*resourceapi.ResourceClaim{c}, claims)
		}
		return g
	}
	tests := []struct {
		name string
		g    *placement.Gang
		want string
	}{
		{"10,000 pods × 2 claims", jobGang(MaxRecordPods, 2, true).g, ""},
		{"10,000 pods × 16 claims", long(jobGang(MaxRecordPods, 0, false).g, 16, 60), ""},
		{"10,001 pods", jobGang(MaxRecordPods+1, 0, false).g, "10001 members, more than the 10000 a commit record holds"},
		{"too many claims", long(jobGang(1000, 0, false).g, 321, 60), "321000 claims, more than the 320004"},
		{"too many bytes", long(jobGang(MaxRecordPods, 0, false).g, 32, 253), "more than the 58982400 it may"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := RecordFits(tt.g)
			if tt.want == "" {
				if err != nil {
					t.Errorf("refused: %v", err)
				}
				return
			}
			if !errors.Is(err, placement.ErrUnsupported) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %v, want ErrUnsupported with %q", err, tt.want)
			}
		})
	}
}

// TestRecordBoundHolds: the bound RecordFits checks is at least the size
// of the record a commit writes.
func TestRecordBoundHolds(t *testing.T) {
	for _, n := range []int{1, 7, 3000} {
		for _, shared := range []bool{false, true} {
			w := jobGang(n, 2, shared)
			raw := encode(t, newRecord(w.pg, w.d, planWrites(w.pg, w.g, w.d)))
			if bound := recordBound(w.g); len(raw) > bound {
				t.Errorf("%d pods, shared %v: record %d bytes, bound %d", n, shared, len(raw), bound)
			}
		}
	}
}

// TestFlatRecordStillVersion2: a flat gang's commit writes the record the
// previous release wrote, byte for byte (it reads it back after a rolling
// upgrade or a rollback), and that record is recovered: a gang killed in
// its bindings is finished from it.
func TestFlatRecordStillVersion2(t *testing.T) {
	const previous = `{"v":2,"podGroup":{"namespace":"ns","name":"pg","uid":"uid-pg"},"domain":"dom","key":"gpufabric.dev/nvlinkDomain","nodes":["node-a","node-b"],` +
		`"pods":[{"n":"p0","u":"uid-p0","o":0},{"n":"p1","u":"uid-p1","o":1},{"n":"p2","u":"uid-p2","o":0}],` +
		`"claims":[{"n":"fabric","u":"uid-fabric","a":"0a945083b774b41a31aa4e56b9132850"},{"n":"p0-gpus","u":"uid-p0-gpus","p":[0],"a":"0a945083b774b41a31aa4e56b9132850"},` +
		`{"n":"user","u":"uid-user","p":[1]},{"n":"pair","u":"uid-pair","p":[1,2],"a":"0a945083b774b41a31aa4e56b9132850"}]}`
	if got := string(encode(t, validRecord())); got != previous {
		t.Errorf("flat record\n%s\nwant the previous release's\n%s", got, previous)
	}
	w := jobGang(4, 1, false)
	w.parallelism = 1
	client := w.clientset()
	err := w.committer(client, killAt(gate.StepBind, 2), nil).Begin(w.pg, w.g, w.d).Run(t.Context())
	if !errors.Is(err, gate.ErrAborted) {
		t.Fatalf("run ended with %v, want the kill", err)
	}
	head, err := client.CoreV1().ConfigMaps(recordNS).Get(t.Context(), vocab.RecordName(w.pg.UID), metav1.GetOptions{})
	must(t, err)
	if !strings.HasPrefix(head.Data[RecordKey], `{"v":2,"podGroup":{"namespace":"ns","name":"train","uid":"uid-pg"},"domain":"rack-1","nodes":`) {
		t.Errorf("record %s, want version 2", Shorten(head.Data[RecordKey], 200))
	}
	must(t, w.committer(client, nil, nil).RecoverAll(t.Context()))
	if got, want := w.state(t, client), (state{bound: 4, allocated: 4, reserved: 4}); got != want {
		t.Errorf("after recovery %+v, want %+v", got, want)
	}
}
