package commit

import (
	"encoding/json"
	"github.com/gpufabric/gpufabric/pkg/gang/internal/objtest"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpufabric/gpufabric/pkg/gang/placement"
	"github.com/gpufabric/gpufabric/pkg/gang/vocab"
)

// validRecord is a well-formed record of PodGroup ns/pg with two members,
// a shared claim and a per-pod claim.
func validRecord() *commitRecord {
	pg := &schedulingv1beta1.PodGroup{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "pg", UID: "uid-pg"}}
	alloc := &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{
		{Request: "gpus", Driver: "gpufabric.dev", Pool: "node-a", Device: "gpu-0"},
	}}}
	d := &placement.Decision{Domain: "dom", TopologyKey: "gpufabric.dev/nvlinkDomain", Pods: []placement.PodPlacement{
		{Namespace: "ns", Name: "p0", UID: "uid-p0", Node: "node-a"},
		{Namespace: "ns", Name: "p1", UID: "uid-p1", Node: "node-b"},
	}}
	writes := []claimWrite{
		{claim: objtest.Claim("fabric", false), alloc: alloc, consumer: resourceapi.ResourceClaimConsumerReference{Resource: "podgroups", Name: "pg", UID: "uid-pg"}},
		{claim: objtest.Claim("p0-gpus", false), alloc: alloc, consumer: resourceapi.ResourceClaimConsumerReference{Resource: "pods", Name: "p0", UID: "uid-p0"}},
		{claim: objtest.Claim("user", true), consumer: resourceapi.ResourceClaimConsumerReference{Resource: "pods", Name: "p1", UID: "uid-p1"}},
	}
	return newRecord(pg, d, writes)
}

func rawRecordConfigMap(t testing.TB, raw string) *v1.ConfigMap {
	t.Helper()
	return &v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: vocab.RecordName("uid-pg"), Namespace: "gpufabric-system"}, Data: map[string]string{RecordKey: raw}}
}

// TestRecordRoundTrip: a record written by a commit decodes to itself, with
// the shared claim reserved for the group, the per-pod claim for its pod,
// and a fingerprint only for allocations the commit writes.
func TestRecordRoundTrip(t *testing.T) {
	rec := validRecord()
	cm, err := recordObject("gpufabric-system", rec)
	if err != nil {
		t.Fatal(err)
	}
	if cm.Name != "gpufabric-commit-uid-pg" || cm.Labels[vocab.LabelCommitRecord] != "true" {
		t.Errorf("object %s labels %v", cm.Name, cm.Labels)
	}
	got, err := decodeRecord(cm)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(rec, got); diff != "" {
		t.Errorf("round trip (-want +got):\n%s", diff)
	}
	if got.Claims[0].Pod != "" || got.Claims[1].Pod != "p0" || got.Claims[2].Pod != "p1" {
		t.Errorf("consumers %+v", got.Claims)
	}
	if got.Claims[0].Allocation == "" || got.Claims[2].Allocation != "" {
		t.Errorf("fingerprints %+v", got.Claims)
	}
}

// TestDecodeRecordRejects: every malformed, forged or oversized record is
// refused with an error that names what is wrong.
func TestDecodeRecordRejects(t *testing.T) {
	mutate := func(f func(r *commitRecord)) string {
		r := validRecord()
		f(r)
		raw, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		return string(raw)
	}
	valid := mutate(func(*commitRecord) {})
	tests := []struct {
		name, raw, want string
		objName         string
	}{
		{"not JSON", "{", "parse record", ""},
		{"unknown field", strings.Replace(valid, `"v":1`, `"v":1,"release":["victim"]`, 1), `unknown field "release"`, ""},
		{"trailing data", valid + `{"v":1}`, "trailing data", ""},
		{"version", mutate(func(r *commitRecord) { r.Version = 2 }), "version 2, want 1", ""},
		{"namespace", mutate(func(r *commitRecord) { r.PodGroup.Namespace = "Bad_NS" }), "podGroup.namespace", ""},
		{"pod name", mutate(func(r *commitRecord) { r.Pods[0].Name = "../p" }), "pods[0].n", ""},
		{"node name", mutate(func(r *commitRecord) { r.Pods[1].Node = "" }), "pods[1].node", ""},
		{"no pods", mutate(func(r *commitRecord) { r.Pods = nil; r.Claims = r.Claims[:1] }), "0 pods", ""},
		{"pod twice", mutate(func(r *commitRecord) { r.Pods[1].Name = "p0"; r.Claims = r.Claims[:2] }), `pod "p0" listed twice`, ""},
		{"claim of a pod not in the record", mutate(func(r *commitRecord) { r.Claims[1].Pod = "victim" }), `pod "victim" is not in the record`, ""},
		{"claim twice", mutate(func(r *commitRecord) { r.Claims[2].Name = "fabric" }), `claim "fabric" listed twice`, ""},
		{"claim uid", mutate(func(r *commitRecord) { r.Claims[0].UID = "" }), "claims[0].u", ""},
		{"fingerprint", mutate(func(r *commitRecord) { r.Claims[0].Allocation = "all" }), `claims[0].alloc "all" is not a fingerprint`, ""},
		{"record of another group", valid, "names podgroup UID", vocab.RecordName("uid-other")},
		{"no record key", "", `no "record" key`, ""},
		{"oversized", `{"v":1,"domain":"` + strings.Repeat("x", MaxRecordBytes) + `"}`, "over the limit", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cm := rawRecordConfigMap(t, tt.raw)
			if tt.raw == "" {
				cm.Data = nil
			}
			if tt.objName != "" {
				cm.Name = tt.objName
			}
			_, err := decodeRecord(cm)
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
	raw, err := json.Marshal(validRecord())
	if err != nil {
		f.Fatal(err)
	}
	f.Add(string(raw))
	f.Add(`{"v":1,"podGroup":{"namespace":"ns","name":"pg","uid":"uid-pg"},"domain":"","pods":[{"n":"a","u":"u","node":"n"}],"claims":[]}`)
	f.Add(`{"v":1,"pods":null}`)
	f.Fuzz(func(t *testing.T, raw string) {
		rec, err := decodeRecord(rawRecordConfigMap(t, raw))
		if err != nil {
			return
		}
		if err := rec.validate(); err != nil {
			t.Fatalf("decoded record does not validate: %v", err)
		}
		if rec.PodGroup.UID != "uid-pg" {
			t.Fatalf("record of group %q accepted under %s", rec.PodGroup.UID, vocab.RecordName("uid-pg"))
		}
		cm, err := recordObject("gpufabric-system", rec)
		if err != nil {
			t.Fatalf("re-encode: %v", err)
		}
		again, err := decodeRecord(cm)
		if err != nil {
			t.Fatalf("re-decode: %v", err)
		}
		if diff := cmp.Diff(rec, again); diff != "" {
			t.Fatalf("re-decode differs (-first +second):\n%s", diff)
		}
	})
}
