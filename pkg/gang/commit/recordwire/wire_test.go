package recordwire

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpufabric/gpufabric/pkg/gang/vocab"
)

var (
	flatName = vocab.RecordName("uid-pg")
	treeName = vocab.RecordName("uid-root")
)

// fingerprint is a well-formed allocation fingerprint, one per n.
func fingerprint(n int) string { return fmt.Sprintf("%032x", n+1) }

// flatRecord is a well-formed record of PodGroup ns/pg with three
// members, a shared claim, per-pod claims, a claim only reserved for a
// member (allocated before the commit) and a claim two members share.
func flatRecord() *Record {
	return &Record{Version: Version2, Root: Root{Kind: KindPodGroup, Namespace: "ns", Name: "pg", UID: "uid-pg"},
		Groups: []Group{{Namespace: "ns", Name: "pg", UID: "uid-pg", Domain: "dom", TopologyKey: "gpufabric.dev/nvlinkDomain"}},
		Pods:   []Pod{{Name: "p0", UID: "uid-p0", Node: "node-a"}, {Name: "p1", UID: "uid-p1", Node: "node-b"}, {Name: "p2", UID: "uid-p2", Node: "node-a"}},
		Claims: []Claim{
			{Name: "fabric", UID: "uid-fabric", Allocation: "0a945083b774b41a31aa4e56b9132850"},
			{Name: "p0-gpus", UID: "uid-p0-gpus", Pods: []string{"p0"}, Allocation: "0a945083b774b41a31aa4e56b9132850"},
			{Name: "user", UID: "uid-user", Pods: []string{"p1"}},
			{Name: "pair", UID: "uid-pair", Pods: []string{"p1", "p2"}, Allocation: "0a945083b774b41a31aa4e56b9132850"},
		}}
}

// treeRecord is a well-formed record of CompositePodGroup ns/job with 3
// leaves of 2 pods: a PodGroup claim per leaf (first), a claim per pod,
// and a claim the first pod of every leaf names.
func treeRecord() *Record {
	r := &Record{Version: VersionTree, Root: Root{Kind: KindCompositePodGroup, Namespace: "ns", Name: "job", UID: "uid-root"}}
	for g := range 3 {
		name := fmt.Sprintf("leaf-%d", g)
		r.Groups = append(r.Groups, Group{Namespace: "ns", Name: name, UID: types.UID("uid-" + name), Domain: fmt.Sprintf("rack-%d", g), TopologyKey: "gpufabric.dev/rack"})
		r.Claims = append(r.Claims, Claim{Name: name + "-fabric", UID: types.UID("uid-" + name + "-fabric"), Groups: []int{g}, Allocation: fingerprint(g)})
	}
	dataset := Claim{Name: "dataset", UID: "uid-dataset"}
	for g := range 3 {
		for i := range 2 {
			pod := fmt.Sprintf("leaf-%d-worker-%d", g, i)
			r.Pods = append(r.Pods, Pod{Name: pod, UID: types.UID("uid-" + pod), Node: fmt.Sprintf("node-%d", g), Group: g})
			r.Claims = append(r.Claims, Claim{Name: pod + "-gpus", UID: types.UID("uid-" + pod + "-gpus"), Pods: []string{pod}, Allocation: fingerprint(10 + 2*g + i)})
			if i == 0 {
				dataset.Pods = append(dataset.Pods, pod)
			}
		}
	}
	r.Claims = append(r.Claims, dataset)
	return r
}

func encode(t testing.TB, rec *Record) []byte {
	t.Helper()
	raw, err := Encode(rec)
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

// TestEncode: a flat gang's record is version 2, byte for byte what the
// previous release wrote; a tree's is version 3 (the root, the groups,
// each pod's group left out for the first, each claim's groups); both
// decode to themselves.
func TestEncode(t *testing.T) {
	const previous = `{"v":2,"podGroup":{"namespace":"ns","name":"pg","uid":"uid-pg"},"domain":"dom","key":"gpufabric.dev/nvlinkDomain","nodes":["node-a","node-b"],` +
		`"pods":[{"n":"p0","u":"uid-p0","o":0},{"n":"p1","u":"uid-p1","o":1},{"n":"p2","u":"uid-p2","o":0}],` +
		`"claims":[{"n":"fabric","u":"uid-fabric","a":"0a945083b774b41a31aa4e56b9132850"},{"n":"p0-gpus","u":"uid-p0-gpus","p":[0],"a":"0a945083b774b41a31aa4e56b9132850"},` +
		`{"n":"user","u":"uid-user","p":[1]},{"n":"pair","u":"uid-pair","p":[1,2],"a":"0a945083b774b41a31aa4e56b9132850"}]}`
	if got := string(encode(t, flatRecord())); got != previous {
		t.Errorf("flat record\n%s\nwant the previous release's\n%s", got, previous)
	}
	raw := string(encode(t, treeRecord()))
	for _, want := range []string{
		`{"v":3,"root":{"kind":"CompositePodGroup","namespace":"ns","name":"job","uid":"uid-root"},"groups":[{"namespace":"ns","name":"leaf-0","uid":"uid-leaf-0","domain":"rack-0","key":"gpufabric.dev/rack"},`,
		`"pods":[{"n":"leaf-0-worker-0","u":"uid-leaf-0-worker-0","o":0},{"n":"leaf-0-worker-1","u":"uid-leaf-0-worker-1","o":0},{"n":"leaf-1-worker-0","u":"uid-leaf-1-worker-0","o":1,"g":1}`,
		`{"n":"leaf-2-fabric","u":"uid-leaf-2-fabric","a":"` + fingerprint(2) + `","g":[2]}`,
		`{"n":"dataset","u":"uid-dataset","p":[0,2,4]}`,
	} {
		if !strings.Contains(raw, want) {
			t.Errorf("tree record %s\nwant %s", raw, want)
		}
	}
	for name, rec := range map[string]*Record{flatName: flatRecord(), treeName: treeRecord()} {
		got, err := Decode(name, encode(t, rec))
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(rec, got); diff != "" {
			t.Errorf("round trip of %s (-want +got):\n%s", name, diff)
		}
	}
}

// TestRecordVersion1StillRead: a record an older scheduler left (version
// 1: one pod per claim, node names inline) is recovered.
func TestRecordVersion1StillRead(t *testing.T) {
	raw := `{"v":1,"podGroup":{"namespace":"ns","name":"pg","uid":"uid-pg"},"domain":"dom","pods":[{"n":"p0","u":"uid-p0","node":"node-a"}],` +
		`"claims":[{"n":"fabric","u":"uid-fabric","alloc":"0123456789abcdef0123456789abcdef"},{"n":"p0-gpus","u":"uid-p0-gpus","pod":"p0"}]}`
	got, err := Decode(flatName, []byte(raw))
	if err != nil {
		t.Fatal(err)
	}
	want := &Record{Version: 1, Root: Root{Kind: KindPodGroup, Namespace: "ns", Name: "pg", UID: "uid-pg"},
		Groups: []Group{{Namespace: "ns", Name: "pg", UID: "uid-pg", Domain: "dom"}},
		Pods:   []Pod{{Name: "p0", UID: "uid-p0", Node: "node-a"}},
		Claims: []Claim{{Name: "fabric", UID: "uid-fabric", Allocation: "0123456789abcdef0123456789abcdef"}, {Name: "p0-gpus", UID: "uid-p0-gpus", Pods: []string{"p0"}}}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("version 1 (-want +got):\n%s", diff)
	}
}

// TestDecodeRecordRejects: every malformed or forged record is refused
// with an error that names what is wrong.
func TestDecodeRecordRejects(t *testing.T) {
	mutate := func(f func(r *Record)) string {
		r := flatRecord()
		f(r)
		return string(encode(t, r))
	}
	valid := mutate(func(*Record) {})
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
		{"namespace", mutate(func(r *Record) { r.Root.Namespace, r.Groups[0].Namespace = "Bad_NS", "Bad_NS" }), "podGroup.namespace", ""},
		{"pod name", mutate(func(r *Record) { r.Pods[0].Name = "../p"; r.Claims[1].Pods = nil }), "pods[0].n", ""},
		{"node name", mutate(func(r *Record) { r.Pods[1].Node = "" }), "pods[1].node", ""},
		{"node index", strings.Replace(valid, `"o":1`, `"o":7`, 1), "pods[1].o: node 7 of 2", ""},
		{"negative node index", strings.Replace(valid, `"o":1`, `"o":-1`, 1), "pods[1].o: node -1 of 2", ""},
		{"no pods", mutate(func(r *Record) { r.Pods = nil; r.Claims = r.Claims[:1] }), "0 pods", ""},
		{"pod twice", mutate(func(r *Record) { r.Pods[1].Name = "p0"; r.Claims = r.Claims[:2] }), `pod "p0" listed twice`, ""},
		{"claim of a pod not in the record", strings.Replace(valid, `"p":[1,2]`, `"p":[1,9]`, 1), "claims[3].p: pod 9 of 3", ""},
		{"claim's pod twice", strings.Replace(valid, `"p":[1,2]`, `"p":[2,2]`, 1), `claims[3]: pod "p2" listed twice`, ""},
		{"claim twice", mutate(func(r *Record) { r.Claims[2].Name = "fabric" }), `claim "fabric" listed twice`, ""},
		{"claim uid", mutate(func(r *Record) { r.Claims[0].UID = "" }), "claims[0].u", ""},
		{"fingerprint", mutate(func(r *Record) { r.Claims[0].Allocation = "all" }), `claims[0].alloc "all" is not a fingerprint`, ""},
		{"record of another group", valid, "names podgroup UID", vocab.RecordName("uid-other")},
		{"no pods key", `{"v":2,"podGroup":{"namespace":"ns","name":"pg","uid":"uid-pg"},"domain":""}`, "parse record pods", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			name := flatName
			if tt.objName != "" {
				name = tt.objName
			}
			_, err := Decode(name, []byte(tt.raw))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %v, want one containing %q", err, tt.want)
			}
		})
	}
}

// TestDecodeTreeRecordRejects: every malformed or forged tree record is
// refused, naming what is wrong: indices out of range, leaves listed
// twice, in another namespace, the root itself, without a pod, too many,
// fields of another version, a claim reserved for nothing.
func TestDecodeTreeRecordRejects(t *testing.T) {
	mutate := func(f func(r *Record)) string {
		r := treeRecord()
		f(r)
		return string(encode(t, r))
	}
	valid := mutate(func(*Record) {})
	fabric := func(r *Record) *Claim {
		return &r.Claims[slices.IndexFunc(r.Claims, func(c Claim) bool { return c.Name == "leaf-0-fabric" })]
	}
	rootJSON := `"root":{"kind":"CompositePodGroup","namespace":"ns","name":"job","uid":"uid-root"},`
	tests := []struct {
		name, raw, want string
		objName         string
	}{
		{"pod's group out of range", mutate(func(r *Record) { r.Pods[2].Group = 7 }), "pods[2].g: group 7 of 3", ""},
		{"negative group", mutate(func(r *Record) { r.Pods[2].Group = -1 }), "pods[2].g: group -1 of 3", ""},
		{"claim's group out of range", mutate(func(r *Record) { fabric(r).Groups = []int{5} }), "claims[0].g: group 5 of 3", ""},
		{"claim's group twice", mutate(func(r *Record) { fabric(r).Groups = []int{0, 0} }), "claims[0].g: group 0 listed twice", ""},
		{"claim with more groups than the record", mutate(func(r *Record) { fabric(r).Groups = []int{0, 1, 2, 0} }), "claims[0].g: 4 groups of 3", ""},
		{"claim reserved for nothing", mutate(func(r *Record) { fabric(r).Groups = nil }), "claims[0]: reserved for no pod and no group", ""},
		{"too many groups", mutate(func(r *Record) {
			r.Groups = slices.Repeat(r.Groups[:1], MaxGroups+1)
		}), "585 groups, want 1..584", ""},
		{"empty groups", mutate(func(r *Record) { r.Groups = nil }), "0 groups, want 1..584", ""},
		{"group in another namespace", mutate(func(r *Record) { r.Groups[1].Namespace = "other" }), `groups[1].namespace "other" is not the root's`, ""},
		{"group is the root", mutate(func(r *Record) { r.Groups[1].UID = "uid-root" }), `groups[1]: uid "uid-root" is the root's`, ""},
		{"group twice", mutate(func(r *Record) { r.Groups[2] = r.Groups[1] }), `groups[2]: podgroup "leaf-1" listed twice`, ""},
		{"group name", mutate(func(r *Record) { r.Groups[0].Name = "Bad_Name" }), "groups[0].name", ""},
		{"group uid", mutate(func(r *Record) { r.Groups[0].UID = "" }), "groups[0].uid", ""},
		{"group's domain too long", mutate(func(r *Record) { r.Groups[1].Domain = strings.Repeat("d", MaxText+1) }), "groups[1]: domain or key longer than 256 bytes", ""},
		{"group without a pod", mutate(func(r *Record) {
			for i := range r.Pods {
				if r.Pods[i].Group == 2 {
					r.Pods[i].Group = 1
				}
			}
		}), "groups[2] (leaf-2) has no pod", ""},
		{"unknown group field", strings.Replace(valid, `"key":"gpufabric.dev/rack"}`, `"key":"gpufabric.dev/rack","bind":"x"}`, 1), `unknown field "bind"`, ""},
		{"unknown pod field", strings.Replace(valid, `"g":1}`, `"g":1,"bind":"x"}`, 1), `unknown field "bind"`, ""},
		{"root of kind podgroup", strings.Replace(valid, `"kind":"CompositePodGroup"`, `"kind":"PodGroup"`, 1), `version 3 with a root of kind "PodGroup"`, ""},
		{"no root", strings.Replace(valid, rootJSON, "", 1), "version 3 has no root", ""},
		{"podGroup in version 3", strings.Replace(valid, `"v":3,`, `"v":3,"podGroup":{"namespace":"ns","name":"job","uid":"uid-root"},`, 1), "version 3 has no podGroup, domain or key", ""},
		{"domain in version 3", strings.Replace(valid, `"v":3,`, `"v":3,"domain":"x",`, 1), "version 3 has no podGroup, domain or key", ""},
		{"version 2 with a root", strings.Replace(string(encode(t, flatRecord())), `"v":2,`, `"v":2,`+rootJSON, 1), "version 2 has no root or groups", ""},
		{"version 2 with groups", strings.Replace(string(encode(t, flatRecord())), `"v":2,`, `"v":2,"groups":[],`, 1), "version 2 has no root or groups", ""},
		{"version 2 with a pod's group", strings.Replace(string(encode(t, flatRecord())), `"o":1}`, `"o":1,"g":0}`, 1), `unknown field "g"`, ""},
		{"record of another root", valid, "names compositepodgroup UID", flatName},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			name := treeName
			if tt.objName != "" {
				name = tt.objName
			}
			_, err := Decode(name, []byte(tt.raw))
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
	f.Add(string(encode(f, flatRecord())))
	f.Add(`{"v":1,"podGroup":{"namespace":"ns","name":"pg","uid":"uid-pg"},"domain":"","pods":[{"n":"a","u":"u","node":"n"}],"claims":[]}`)
	f.Add(`{"v":2,"podGroup":{"namespace":"ns","name":"pg","uid":"uid-pg"},"domain":"","nodes":["n"],"pods":[{"n":"a","u":"u","o":0}],"claims":[{"n":"c","u":"v","p":[0]}]}`)
	f.Add(`{"v":2,"pods":null}`)
	tree := treeRecord()
	tree.Root.UID = "uid-pg"
	f.Add(string(encode(f, tree)))
	f.Fuzz(func(t *testing.T, raw string) {
		rec, err := Decode(flatName, []byte(raw))
		if err != nil {
			return
		}
		if err := rec.Validate(); err != nil {
			t.Fatalf("decoded record does not validate: %v", err)
		}
		if rec.Root.UID != "uid-pg" {
			t.Fatalf("record of group %q accepted under %s", rec.Root.UID, flatName)
		}
		again, err := Decode(flatName, encode(t, rec))
		if err != nil {
			t.Fatalf("re-decode: %v", err)
		}
		again.Version = rec.Version // re-encoded as the current version
		if diff := cmp.Diff(rec, again); diff != "" {
			t.Fatalf("re-decode differs (-first +second):\n%s", diff)
		}
	})
}
