package freeroom

import (
	"encoding/json"
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/gpufabric/gpufabric/pkg/topology"
)

const (
	rackKey = "topology.gpufabric.dev/rack"
	leafKey = "topology.gpufabric.dev/ib-leaf"
)

// fabric builds nodes (name → labels) with gpus GPUs each in the NVLink
// domain named by the node's "domain" label (not a level).
func fabric(t testing.TB, levels []string, gpus int, nodes map[string]map[string]string) *topology.Tree {
	t.Helper()
	var ns []*corev1.Node
	var slices []*resourceapi.ResourceSlice
	for name, labels := range nodes {
		ns = append(ns, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}})
		s := &resourceapi.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: resourceapi.ResourceSliceSpec{Driver: topology.DriverName, NodeName: ptr.To(name),
				Pool: resourceapi.ResourcePool{Name: name, ResourceSliceCount: 1}}}
		for i := range gpus {
			s.Spec.Devices = append(s.Spec.Devices, resourceapi.Device{Name: topology.GPUDeviceName(i),
				Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
					topology.AttrType:         {StringValue: ptr.To(topology.DeviceTypeGPU)},
					topology.AttrNVLinkDomain: {StringValue: ptr.To(labels["domain"])},
				}})
		}
		slices = append(slices, s)
	}
	tree, err := topology.BuildTree(topology.TreeConfig{LabelLevels: levels}, ns, slices)
	if err != nil {
		t.Fatal(err)
	}
	return tree
}

// TestBuild: per level the domains with GPUs, their free GPUs (a rack's
// from its NVLink domains, clamped to the GPUs), the largest, the counts
// of domains with at least 1, 2, 4, 8 free, the top domains (most free,
// then most GPUs, then id) with the rest omitted; the cluster's totals.
func TestBuild(t *testing.T) {
	tree := fabric(t, []string{rackKey}, 4, map[string]map[string]string{
		"a-0": {"domain": "dom-a", rackKey: "rack-1"}, "a-1": {"domain": "dom-a", rackKey: "rack-1"},
		"b-0": {"domain": "dom-b", rackKey: "rack-2"}, "b-1": {"domain": "dom-b", rackKey: "rack-2"},
		"c-0": {"domain": "dom-c", rackKey: "rack-2"},
	})
	now := time.Date(2026, 1, 2, 3, 4, 5, 600, time.FixedZone("x", 3600))
	got := Build(tree, map[string]int{"dom-a": 0, "dom-b": 7, "dom-c": 99, "gone": 8}, now, Options{TopK: 2})
	want := &View{Version: 1, Time: time.Date(2026, 1, 2, 2, 4, 5, 0, time.UTC), GPUs: 20, FreeGPUs: 11, Levels: []Level{
		{Key: topology.TopologyKeyNVLinkDomain, Domains: 3, FreeGPUs: 11, LargestFree: 7,
			AtLeast: []Count{{1, 2}, {2, 2}, {4, 2}, {8, 0}},
			Top:     []Domain{{ID: "dom-b", GPUs: 8, Free: 7}, {ID: "dom-c", GPUs: 4, Free: 4}}, Omitted: 1},
		{Key: rackKey, Domains: 2, FreeGPUs: 11, LargestFree: 11,
			AtLeast: []Count{{1, 1}, {2, 1}, {4, 1}, {8, 1}},
			Top:     []Domain{{ID: "rack-2", GPUs: 12, Free: 11}, {ID: "rack-1", GPUs: 8, Free: 0}}},
	}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Build (-want +got):\n%s", diff)
	}
	if empty := Build(nil, nil, now, Options{}); empty.GPUs != 0 || len(empty.Levels) != 0 {
		t.Errorf("Build of no tree = %+v, want an empty view", empty)
	}
}

// TestBuildBounded: with 10,000 NVLink domains in 2,500 racks and 100
// leaves the view lists TopK domains per level, counts the rest, and
// encodes to less than 16 KiB; Decode gives it back.
func TestBuildBounded(t *testing.T) {
	nodes := map[string]map[string]string{}
	free := map[string]int{}
	for i := range 10000 {
		d := fmt.Sprintf("nvl-%05d", i)
		nodes[fmt.Sprintf("node-%05d", i)] = map[string]string{"domain": d,
			rackKey: fmt.Sprintf("rack-%04d", i/4), leafKey: fmt.Sprintf("leaf-%03d", i/100)}
		free[d] = i % 9
	}
	v := Build(fabric(t, []string{rackKey, leafKey}, 8, nodes), free, time.Now(), Options{})
	for _, l := range v.Levels {
		if len(l.Top) != DefaultTopK || len(l.Top)+l.Omitted != l.Domains {
			t.Errorf("level %s: %d listed, %d omitted, %d domains; want %d listed", l.Key, len(l.Top), l.Omitted, l.Domains, DefaultTopK)
		}
	}
	if got := []int{v.Levels[0].Domains, v.Levels[1].Domains, v.Levels[2].Domains}; !cmp.Equal(got, []int{10000, 2500, 100}) {
		t.Errorf("domains per level %v", got)
	}
	data, err := Encode(v)
	if err != nil {
		t.Fatal(err)
	}
	if len(data) > 16<<10 {
		t.Errorf("encoded view of 10,000 domains: %d bytes, want < 16 KiB", len(data))
	}
	t.Logf("encoded view of 10,000 NVLink domains, 2,500 racks, 100 leaves: %d bytes", len(data))
	back, err := Decode(&corev1.ConfigMap{Data: map[string]string{DataKey: string(data)}})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(v, back); diff != "" {
		t.Errorf("Decode(Encode) (-want +got):\n%s", diff)
	}
}

// TestViewHasNoTenantData: the encoded view has only these fields, and
// its only strings are the time, level keys and domain ids: there is no
// place for a namespace, workload or per-tenant count.
func TestViewHasNoTenantData(t *testing.T) {
	tree := fabric(t, []string{rackKey}, 4, map[string]map[string]string{"a-0": {"domain": "dom-a", rackKey: "rack-1"}})
	data, err := Encode(Build(tree, map[string]int{"dom-a": 2}, time.Now(), Options{}))
	if err != nil {
		t.Fatal(err)
	}
	var doc any
	if err := json.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	keys, strs := map[string]bool{}, map[string]bool{}
	var walk func(path string, v any)
	walk = func(path string, v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, x := range v {
				keys[k] = true
				walk(k, x)
			}
		case []any:
			for _, x := range v {
				walk(path, x)
			}
		case string:
			strs[path] = true
		}
	}
	walk("", doc)
	allowed := []string{"atLeast", "domains", "free", "freeGPUs", "gpus", "id", "key", "largestFree", "levels", "omitted", "time", "top", "version"}
	if diff := cmp.Diff(allowed, sorted(keys)); diff != "" {
		t.Errorf("fields (-allowed +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"id", "key", "time"}, sorted(strs)); diff != "" {
		t.Errorf("string fields (-allowed +got):\n%s", diff)
	}
}

func sorted(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// TestDecodeRefuses: no view, an oversized one, a newer version, bad JSON.
func TestDecodeRefuses(t *testing.T) {
	big := make([]byte, MaxBytes+1)
	for i := range big {
		big[i] = ' '
	}
	for name, data := range map[string]map[string]string{
		"no view":       {"other": "{}"},
		"oversized":     {DataKey: string(big)},
		"newer version": {DataKey: `{"version": 2}`},
		"not json":      {DataKey: `{`},
	} {
		if _, err := Decode(&corev1.ConfigMap{Data: data}); err == nil {
			t.Errorf("%s: decoded", name)
		}
	}
}

// BenchmarkBuild: the view of 10,000 NVLink domains in 2,500 racks (the
// tree built once), as the publisher computes it when something changed.
func BenchmarkBuild(b *testing.B) {
	nodes, free := map[string]map[string]string{}, map[string]int{}
	for i := range 10000 {
		d := fmt.Sprintf("nvl-%05d", i)
		nodes[fmt.Sprintf("node-%05d", i)] = map[string]string{"domain": d, rackKey: fmt.Sprintf("rack-%04d", i/4)}
		free[d] = i % 9
	}
	tree := fabric(b, []string{rackKey}, 8, nodes)
	b.ResetTimer()
	for b.Loop() {
		Build(tree, free, time.Now(), Options{})
	}
}

// BenchmarkTree: topology.BuildTree of 10,000 nodes of 8 GPUs from the
// listers, what the scheduler's Source costs when nodes or slices changed.
func BenchmarkTree(b *testing.B) {
	var ns []*corev1.Node
	var slices []*resourceapi.ResourceSlice
	for i := range 10000 {
		name := fmt.Sprintf("node-%05d", i)
		ns = append(ns, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{rackKey: fmt.Sprintf("rack-%04d", i/4)}}})
		s := &resourceapi.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: resourceapi.ResourceSliceSpec{Driver: topology.DriverName,
			NodeName: ptr.To(name), Pool: resourceapi.ResourcePool{Name: name, ResourceSliceCount: 1}}}
		for g := range 8 {
			s.Spec.Devices = append(s.Spec.Devices, resourceapi.Device{Name: topology.GPUDeviceName(g), Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
				topology.AttrType: {StringValue: ptr.To(topology.DeviceTypeGPU)}, topology.AttrNVLinkDomain: {StringValue: ptr.To(fmt.Sprintf("nvl-%05d", i))}}})
		}
		slices = append(slices, s)
	}
	b.ResetTimer()
	for b.Loop() {
		if _, err := topology.BuildTree(topology.TreeConfig{LabelLevels: []string{rackKey}}, ns, slices); err != nil {
			b.Fatal(err)
		}
	}
}
