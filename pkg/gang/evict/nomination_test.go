package evict

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpufabric/gpufabric/pkg/gang/commit"
	"github.com/gpufabric/gpufabric/pkg/gang/vocab"
)

func validNomination() *nominationRecord {
	return &nominationRecord{
		Version: nominationVersion, Gang: "pg:team-a/train", UID: "uid-pg", Priority: 1000,
		TopologyKey: "gpufabric.dev/nvlinkDomain", Domain: "nvl72-a",
		Nodes:   []string{"node-1", "node-2"},
		Victims: []nominatedPod{{Namespace: "team-b", Name: "job-0", UID: "uid-0", Unit: "pg:team-b/job"}},
		Claims:  []nominatedClaim{{Namespace: "team-b", Name: "job-fabric", UID: "uid-c", Group: "uid-job"}},
		Created: metav1.NewTime(time.Date(2026, 11, 23, 9, 0, 0, 0, time.UTC)),
	}
}

func nominationConfigMap(t testing.TB, name, raw string) *v1.ConfigMap {
	t.Helper()
	return &v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}, Data: map[string]string{commit.RecordKey: raw}}
}

func TestDecodeNomination(t *testing.T) {
	encode := func(mut func(r *nominationRecord)) string {
		r := validNomination()
		mut(r)
		raw, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		return string(raw)
	}
	name := vocab.NominationName("uid-pg")
	tests := []struct {
		name, object, raw string
		wantErr           string
	}{
		{name: "valid", object: name, raw: encode(func(*nominationRecord) {})},
		{name: "unknown field", object: name, raw: `{"v":1,"extra":true}`, wantErr: "unknown field"},
		{name: "trailing data", object: name, raw: encode(func(*nominationRecord) {}) + "{}", wantErr: "trailing data"},
		{name: "other gang's object", object: vocab.NominationName("uid-other"), raw: encode(func(*nominationRecord) {}), wantErr: "expected object name"},
		{name: "bad key", object: name, raw: encode(func(r *nominationRecord) { r.Gang = "team-a/train" }), wantErr: "not a gang key"},
		{name: "no victims", object: name, raw: encode(func(r *nominationRecord) { r.Victims = nil }), wantErr: "0 victims"},
		{name: "no nodes", object: name, raw: encode(func(r *nominationRecord) { r.Nodes = nil }), wantErr: "0 nodes"},
		{name: "bad node", object: name, raw: encode(func(r *nominationRecord) { r.Nodes = []string{"Not_A_Node"} }), wantErr: "nodes[0]"},
		{name: "bad victim namespace", object: name, raw: encode(func(r *nominationRecord) { r.Victims[0].Namespace = "" }), wantErr: "victims[0].ns"},
		{name: "bad victim unit", object: name, raw: encode(func(r *nominationRecord) { r.Victims[0].Unit = "job" }), wantErr: "victims[0].unit"},
		{name: "version", object: name, raw: encode(func(r *nominationRecord) { r.Version = 2 }), wantErr: "version 2"},
		{name: "no time", object: name, raw: encode(func(r *nominationRecord) { r.Created = metav1.Time{} }), wantErr: "no creation time"},
		{name: "too big", object: name, raw: strings.Repeat(" ", commit.MaxRecordBytes+1), wantErr: "over the limit"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rec, err := decodeNomination(nominationConfigMap(t, tc.object, tc.raw))
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("decode: %v", err)
				}
				if diff := cmp.Diff(validNomination(), rec); diff != "" {
					t.Fatalf("decoded (-want +got):\n%s", diff)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("error %v, want one containing %q", err, tc.wantErr)
			}
		})
	}
}

// FuzzDecodeNomination: any content either fails to decode or decodes to a
// record that validates, belongs to the gang its name says, and survives a
// round trip.
func FuzzDecodeNomination(f *testing.F) {
	raw, err := json.Marshal(validNomination())
	if err != nil {
		f.Fatal(err)
	}
	f.Add(string(raw))
	f.Add(`{"v":1,"gang":"pod:a/b","uid":"uid-pg","priority":-1,"key":"","domain":"","nodes":["n"],"victims":[{"ns":"a","n":"b","u":"c","unit":"pod:a/b"}],"created":"2026-01-01T00:00:00Z"}`)
	f.Add(`{"v":1,"victims":null}`)
	f.Fuzz(func(t *testing.T, raw string) {
		rec, err := decodeNomination(nominationConfigMap(t, vocab.NominationName("uid-pg"), raw))
		if err != nil {
			return
		}
		if err := rec.validate(); err != nil {
			t.Fatalf("decoded record does not validate: %v", err)
		}
		if rec.UID != "uid-pg" {
			t.Fatalf("nomination of %q accepted under %s", rec.UID, vocab.NominationName("uid-pg"))
		}
		cm, err := rec.object("gpufabric-system")
		if err != nil {
			t.Fatalf("re-encode: %v", err)
		}
		again, err := decodeNomination(cm)
		if err != nil {
			t.Fatalf("re-decode: %v", err)
		}
		if diff := cmp.Diff(rec, again); diff != "" {
			t.Fatalf("re-decode differs (-first +second):\n%s", diff)
		}
	})
}
