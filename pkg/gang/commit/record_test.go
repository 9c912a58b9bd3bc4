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
	raw, err := encodeRecord(rec)
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
	got, err := decodeRecord(head.Name, []byte(head.Data[RecordKey]))
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

// TestRecordVersion1StillRead: a record an older scheduler left (version
// 1: one pod per claim, node names inline) is recovered.
func TestRecordVersion1StillRead(t *testing.T) {
	raw := `{"v":1,"podGroup":{"namespace":"ns","name":"pg","uid":"uid-pg"},"domain":"dom","pods":[{"n":"p0","u":"uid-p0","node":"node-a"}],` +
		`"claims":[{"n":"fabric","u":"uid-fabric","alloc":"0123456789abcdef0123456789abcdef"},{"n":"p0-gpus","u":"uid-p0-gpus","pod":"p0"}]}`
	got, err := decodeRecord(validName, []byte(raw))
	if err != nil {
		t.Fatal(err)
	}
	want := &commitRecord{Version: 1, Root: Root{Kind: KindPodGroup, Namespace: "ns", Name: "pg", UID: "uid-pg"},
		Groups: []recordGroup{{Namespace: "ns", Name: "pg", UID: "uid-pg", Domain: "dom"}},
		Pods:   []recordPod{{Name: "p0", UID: "uid-p0", Node: "node-a"}},
		Claims: []recordClaim{{Name: "fabric", UID: "uid-fabric", Allocation: "0123456789abcdef0123456789abcdef"}, {Name: "p0-gpus", UID: "uid-p0-gpus", Pods: []string{"p0"}}}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("version 1 (-want +got):\n%s", diff)
	}
}

// TestDecodeRecordRejects: every malformed or forged record is refused
// with an error that names what is wrong.
func TestDecodeRecordRejects(t *testing.T) {
	mutate := func(f func(r *commitRecord)) string {
		r := validRecord()
		f(r)
		return string(encode(t, r))
	}
	valid := mutate(func(*commitRecord) {})
	tests := []struct {
		name, raw, want string
		objName         string
	}{
		{"not JSON", "{", "parse record", ""},
		{"unknown field", strings.Replace(valid, `"v":2`, `"v":2,"release":["victim"]`, 1), `unknown field "release"`, ""},
		{"unknown pod field", strings.Replace(valid, `"o":1`, `"o":1,"bind":"x"`, 1), `unknown field "bind"`, ""},
		{"trailing data", valid + `{"v":2}`, "trailing data", ""},
		{"version", strings.Replace(valid, `"v":2`, `"v":4`, 1), "version 4, want 1, 2 or 3", ""},
		{"version 1 with a node table", strings.Replace(valid, `"v":2`, `"v":1`, 1), "version 1 has no nodes", ""},
		{"namespace", mutate(func(r *commitRecord) { r.Root.Namespace, r.Groups[0].Namespace = "Bad_NS", "Bad_NS" }), "podGroup.namespace", ""},
		{"pod name", mutate(func(r *commitRecord) { r.Pods[0].Name = "../p"; r.Claims[1].Pods = nil }), "pods[0].n", ""},
		{"node name", mutate(func(r *commitRecord) { r.Pods[1].Node = "" }), "pods[1].node", ""},
		{"node index", strings.Replace(valid, `"o":1`, `"o":7`, 1), "pods[1].o: node 7 of 2", ""},
		{"negative node index", strings.Replace(valid, `"o":1`, `"o":-1`, 1), "pods[1].o: node -1 of 2", ""},
		{"no pods", mutate(func(r *commitRecord) { r.Pods = nil; r.Claims = r.Claims[:1] }), "0 pods", ""},
		{"pod twice", mutate(func(r *commitRecord) { r.Pods[1].Name = "p0"; r.Claims = r.Claims[:2] }), `pod "p0" listed twice`, ""},
		{"claim of a pod not in the record", strings.Replace(valid, `"p":[1,2]`, `"p":[1,9]`, 1), "claims[3].p: pod 9 of 3", ""},
		{"claim's pod twice", strings.Replace(valid, `"p":[1,2]`, `"p":[2,2]`, 1), `claims[3]: pod "p2" listed twice`, ""},
		{"claim twice", mutate(func(r *commitRecord) { r.Claims[2].Name = "fabric" }), `claim "fabric" listed twice`, ""},
		{"claim uid", mutate(func(r *commitRecord) { r.Claims[0].UID = "" }), "claims[0].u", ""},
		{"fingerprint", mutate(func(r *commitRecord) { r.Claims[0].Allocation = "all" }), `claims[0].alloc "all" is not a fingerprint`, ""},
		{"record of another group", valid, "names podgroup UID", vocab.RecordName("uid-other")},
		{"no pods key", `{"v":2,"podGroup":{"namespace":"ns","name":"pg","uid":"uid-pg"},"domain":""}`, "parse record pods", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			name := validName
			if tt.objName != "" {
				name = tt.objName
			}
			_, err := decodeRecord(name, []byte(tt.raw))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %v, want one containing %q", err, tt.want)
			}
		})
	}
}

// FuzzDecodeRecord: any content either fails to decode or decodes to a
// record that validates, belongs to the group its name says, and encodes to
// a record that decodes to the same value.
func FuzzDecodeRecord(f *testing.F) {
	f.Add(string(encode(f, validRecord())))
	f.Add(`{"v":1,"podGroup":{"namespace":"ns","name":"pg","uid":"uid-pg"},"domain":"","pods":[{"n":"a","u":"u","node":"n"}],"claims":[]}`)
	f.Add(`{"v":2,"podGroup":{"namespace":"ns","name":"pg","uid":"uid-pg"},"domain":"","nodes":["n"],"pods":[{"n":"a","u":"u","o":0}],"claims":[{"n":"c","u":"v","p":[0]}]}`)
	f.Add(`{"v":2,"pods":null}`)
	tree := validTreeRecord()
	tree.Root.UID = "uid-pg"
	f.Add(string(encode(f, tree)))
	f.Fuzz(func(t *testing.T, raw string) {
		rec, err := decodeRecord(validName, []byte(raw))
		if err != nil {
			return
		}
		if err := rec.validate(); err != nil {
			t.Fatalf("decoded record does not validate: %v", err)
		}
		if rec.Root.UID != "uid-pg" {
			t.Fatalf("record of group %q accepted under %s", rec.Root.UID, validName)
		}
		again, err := decodeRecord(validName, encode(t, rec))
		if err != nil {
			t.Fatalf("re-decode: %v", err)
		}
		again.Version = rec.Version // re-encoded as the current version
		if diff := cmp.Diff(rec, again); diff != "" {
			t.Fatalf("re-decode differs (-first +second):\n%s", diff)
		}
	})
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
