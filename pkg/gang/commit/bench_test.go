package commit

import (
	"encoding/json"
	"fmt"
	"testing"

	"k8s.io/apimachinery/pkg/types"

	"github.com/gpufabric/gpufabric/pkg/gang/commit/recordwire"
)

// largeGangSizes are the gang sizes of the large-gang benchmarks.
var largeGangSizes = []int{1000, 5000, 10000}

// BenchmarkRecord measures what a commit of a Job gang with 2 claims per
// pod does with its record before and after the API: encode (version 2)
// and split into objects, and read back (join, decode, validate). It
// reports the record's bytes and objects, and the bytes version 1 took.
//
//	go test -run '^$' -bench BenchmarkRecord -benchtime 5x ./pkg/gang/commit/
func BenchmarkRecord(b *testing.B) {
	for _, n := range largeGangSizes {
		rec := jobRecord(n, 2)
		b.Run(fmt.Sprintf("pods=%d", n), func(b *testing.B) {
			var raw []byte
			var objects int
			for b.Loop() {
				var err error
				if raw, err = recordwire.Encode(rec); err != nil {
					b.Fatal(err)
				}
				head, parts, err := CommitRecords.Objects(recordNS, validName, raw)
				if err != nil {
					b.Fatal(err)
				}
				objects = 1 + len(parts)
				joined := []byte(head.Data[RecordKey])
				for _, p := range parts {
					joined = append(joined, p.Data[RecordKey]...)
				}
				if _, err := recordwire.Decode(validName, joined); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(len(raw)), "record-bytes")
			b.ReportMetric(float64(objects), "objects")
			b.ReportMetric(float64(len(encodeV1(b, rec))), "v1-bytes")
		})
	}
}

// encodeV1 is rec as version 1 (node names inline, one pod per claim)
// wrote it, for comparison.
func encodeV1(b *testing.B, rec *commitRecord) []byte {
	type group struct {
		Namespace string    `json:"namespace"`
		Name      string    `json:"name"`
		UID       types.UID `json:"uid"`
	}
	type pod struct {
		Name string    `json:"n"`
		UID  types.UID `json:"u"`
		Node string    `json:"node"`
	}
	type claim struct {
		Name       string    `json:"n"`
		UID        types.UID `json:"u"`
		Pod        string    `json:"pod,omitempty"`
		Allocation string    `json:"alloc,omitempty"`
	}
	w := struct {
		Version     int     `json:"v"`
		PodGroup    group   `json:"podGroup"`
		Domain      string  `json:"domain"`
		TopologyKey string  `json:"key,omitempty"`
		Pods        []pod   `json:"pods"`
		Claims      []claim `json:"claims"`
	}{Version: recordwire.Version1, PodGroup: group{rec.Root.Namespace, rec.Root.Name, rec.Root.UID}, Domain: rec.Groups[0].Domain, TopologyKey: rec.Groups[0].TopologyKey}
	for _, p := range rec.Pods {
		w.Pods = append(w.Pods, pod{Name: p.Name, UID: p.UID, Node: p.Node})
	}
	for _, c := range rec.Claims {
		wc := claim{Name: c.Name, UID: c.UID, Allocation: c.Allocation}
		if len(c.Pods) > 0 {
			wc.Pod = c.Pods[0]
		}
		w.Claims = append(w.Claims, wc)
	}
	raw, err := json.Marshal(w)
	if err != nil {
		b.Fatal(err)
	}
	return raw
}

// BenchmarkCommitLargeGang commits a Job gang of 1,000, 5,000 and 10,000
// pods with 2 claims each (Txn.Run: record in parts, 2 writes per claim,
// the bindings, the condition, the record's delete) on a fake clientset
// with 16 writers: the commit room's own cost, without the apiserver's
// (test/integration/peer BenchmarkCommitLargeGangAPI measures that).
//
//	go test -run '^$' -bench BenchmarkCommitLargeGang -benchtime 3x ./pkg/gang/commit/
func BenchmarkCommitLargeGang(b *testing.B) {
	for _, n := range largeGangSizes {
		w := jobGang(n, 2, false)
		b.Run(fmt.Sprintf("pods=%d", n), func(b *testing.B) {
			raw, err := recordwire.Encode(newRecord(w.pg, w.d, planWrites(w.pg, w.g, w.d)))
			if err != nil {
				b.Fatal(err)
			}
			for b.Loop() {
				b.StopTimer()
				client := w.clientset()
				c := w.committer(client, nil, nil)
				b.StartTimer()
				if err := c.Begin(w.pg, w.g, w.d).Run(b.Context()); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(len(raw)), "record-bytes")
			b.ReportMetric(float64(len(splitRecord(raw, MaxRecordBytes))), "objects")
		})
	}
}

// BenchmarkCommitTree commits a tree of 1,024 pods (each with a claim of
// its own, each leaf with a PodGroup claim; the first member of every
// leaf names a claim they share) as 1, 8 and 64 leaf PodGroups under one
// CompositePodGroup (Txn.Run of BeginTree: one record, the union's claim
// writes, the bindings, a condition per leaf, the record's delete) on a
// fake clientset with 16 writers: what the leaves cost beside the pods.
//
//	go test -run '^$' -bench BenchmarkCommitTree -benchtime 5x ./pkg/gang/commit/
func BenchmarkCommitTree(b *testing.B) {
	for _, leaves := range []int{1, 8, 64} {
		tr := treeGang(leaves, 1024/leaves)
		b.Run(fmt.Sprintf("leaves=%d", leaves), func(b *testing.B) {
			raw, err := recordwire.Encode(newTreeRecord(tr.root, tr.leaves, planLeafWrites(tr.leaves)))
			if err != nil {
				b.Fatal(err)
			}
			for b.Loop() {
				b.StopTimer()
				client := tr.clientset()
				c := tr.committer(client, nil, nil)
				b.StartTimer()
				if err := tr.begin(b, c).Run(b.Context()); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(len(raw)), "record-bytes")
		})
	}
}
