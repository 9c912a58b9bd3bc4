package freeroom

import (
	"context"
	"errors"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	resourcelisters "k8s.io/client-go/listers/resource/v1"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"

	"github.com/gpufabric/gpufabric/pkg/topology"
)

// source gives the free GPUs, the tree and the change count the test
// sets.
type source struct {
	tree    *topology.Tree
	free    map[string]int
	changes uint64
	calls   int
}

func (s *source) FreeGPUs() (map[string]int, error) { s.calls++; return s.free, nil }
func (s *source) Tree() (*topology.Tree, error)     { return s.tree, nil }
func (s *source) Changes() uint64                   { return s.changes }

// TestPublisher: the first step writes the view; a step without a change
// computes nothing; a change with the same counts writes nothing; new
// counts are written (at most one write per step, each step one
// interval); a fenced replica writes nothing and writes once the fence
// holds again; a failed write is retried at the next step; every tenth
// step recomputes even without a change.
func TestPublisher(t *testing.T) {
	ctx := context.Background()
	client := fake.NewClientset()
	applies := 0
	failNext := false
	client.PrependReactor("patch", "configmaps", func(k8stesting.Action) (bool, runtime.Object, error) {
		applies++
		if failNext {
			failNext = false
			return true, nil, errors.New("apiserver unavailable")
		}
		return false, nil, nil
	})
	src := &source{tree: fabric(t, nil, 4, map[string]map[string]string{"a-0": {"domain": "dom-a"}}), free: map[string]int{"dom-a": 4}}
	classes := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	for _, name := range []string{"gpu.gpufabric.dev", topology.FabricDomainDeviceClass} {
		if err := classes.Add(&resourceapi.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID(map[bool]string{true: "class-uid", false: "other"}[name == topology.FabricDomainDeviceClass])}}); err != nil {
			t.Fatal(err)
		}
	}
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	var fenced error
	p := &publisher{cfg: Config{Client: client, Namespace: "gpufabric-system", FreeGPUs: src.FreeGPUs, Changes: src.Changes, Tree: src,
		Fence: func() error { return fenced }, Now: func() time.Time { now = now.Add(time.Second); return now },
		Owner: ClassOwner(resourcelisters.NewDeviceClassLister(classes))}}
	read := func() *View {
		t.Helper()
		cm, err := client.CoreV1().ConfigMaps("gpufabric-system").Get(ctx, ConfigMapName, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		v, err := Decode(cm)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	steps := []struct {
		name       string
		before     func()
		wantErr    bool
		wantApply  int
		wantFree   int
		wantSource int
	}{
		{"first step writes", func() {}, false, 1, 4, 1},
		{"nothing changed: nothing computed", func() {}, false, 1, 4, 1},
		{"a change, same counts: not written", func() { src.changes++ }, false, 1, 4, 2},
		{"new counts written", func() { src.changes++; src.free = map[string]int{"dom-a": 1} }, false, 2, 1, 3},
		{"fenced: not written", func() { src.changes++; src.free = map[string]int{"dom-a": 2}; fenced = errors.New("lease lost") }, true, 2, 1, 4},
		{"fence holds again: written", func() { fenced = nil }, false, 3, 2, 5},
		{"a failed write", func() { src.changes++; src.free = map[string]int{"dom-a": 3}; failNext = true }, true, 4, 2, 6},
		{"retried at the next step", func() {}, false, 5, 3, 7},
	}
	for i, s := range steps {
		s.before()
		err := p.step(ctx, i+1)
		if (err != nil) != s.wantErr {
			t.Fatalf("step %d (%s): error %v, want error %t", i, s.name, err, s.wantErr)
		}
		if applies != s.wantApply || read().FreeGPUs != s.wantFree || src.calls != s.wantSource {
			t.Fatalf("step %d (%s): %d applies, view free %d, %d computations; want %d, %d, %d",
				i, s.name, applies, read().FreeGPUs, src.calls, s.wantApply, s.wantFree, s.wantSource)
		}
	}
	if err := p.step(ctx, refreshTicks); err != nil || src.calls != 8 || applies != 5 {
		t.Errorf("refresh step: err %v, %d computations, %d applies; want 8 (recomputed), 5 (same counts)", err, src.calls, applies)
	}
	cm, err := client.CoreV1().ConfigMaps("gpufabric-system").Get(ctx, ConfigMapName, metav1.GetOptions{})
	if err != nil || cm.Labels["app.kubernetes.io/component"] != "free-room" ||
		len(cm.OwnerReferences) != 1 || cm.OwnerReferences[0].UID != "class-uid" || cm.OwnerReferences[0].Kind != "DeviceClass" {
		t.Errorf("ConfigMap %+v (%v), want labelled free-room and owned by the fabric-domain DeviceClass", cm.ObjectMeta, err)
	}
}

// TestClassOwner: no owner without the fabric-domain DeviceClass.
func TestClassOwner(t *testing.T) {
	classes := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	if o := ClassOwner(resourcelisters.NewDeviceClassLister(classes))(); o != nil {
		t.Errorf("owner %+v without the class, want none", o)
	}
}

// TestRunStops: Run publishes at once and returns when ctx is done.
func TestRunStops(t *testing.T) {
	client := fake.NewClientset()
	src := &source{tree: fabric(t, nil, 2, map[string]map[string]string{"a-0": {"domain": "dom-a"}}), free: map[string]int{"dom-a": 2}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		Run(ctx, Config{Client: client, Namespace: "ns", Interval: time.Hour, FreeGPUs: src.FreeGPUs, Changes: src.Changes, Tree: src})
	}()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := client.CoreV1().ConfigMaps("ns").Get(ctx, ConfigMapName, metav1.GetOptions{}); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no view published at start")
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after cancel")
	}
}
