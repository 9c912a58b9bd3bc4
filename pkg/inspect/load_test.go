package inspect

import (
	"errors"
	"testing"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/klog/v2/ktesting"
)

// fakeClient serves the scenario's objects.
func fakeClient(t *testing.T) *fake.Clientset {
	t.Helper()
	c := scenario().c
	var objs []runtime.Object
	for i := range c.Nodes {
		objs = append(objs, &c.Nodes[i])
	}
	for i := range c.Slices {
		objs = append(objs, &c.Slices[i])
	}
	for i := range c.Claims {
		objs = append(objs, &c.Claims[i])
	}
	for i := range c.Pods {
		objs = append(objs, &c.Pods[i])
	}
	for i := range c.PodGroups {
		objs = append(objs, &c.PodGroups[i])
	}
	return fake.NewClientset(objs...)
}

func TestLoad(t *testing.T) {
	tests := []struct {
		name      string
		need      Need
		forbid    string
		wantErr   bool
		wantCount [5]int // nodes, slices, claims, pods, podgroups
		warnings  int
	}{
		{name: "status: everything", need: Need{Fabric: true, Claims: true, Pods: true, PodGroups: true},
			wantCount: [5]int{5, 6, 9, 8, 2}},
		{name: "nodes: fabric and claims", need: Need{Fabric: true, Claims: true}, wantCount: [5]int{5, 6, 9, 0, 0}},
		{name: "one namespace", need: Need{Namespace: "team-a", Claims: true, Pods: true, PodGroups: true},
			wantCount: [5]int{0, 0, 3, 2, 1}},
		{name: "forbidden nodes are an error", need: Need{Fabric: true}, forbid: "nodes", wantErr: true},
		{name: "forbidden optional nodes are a warning", need: Need{Fabric: true, FabricOptional: true}, forbid: "nodes",
			wantCount: [5]int{0, 6, 0, 0, 0}, warnings: 1},
		{name: "forbidden events are a warning", need: Need{Namespace: "team-b", EventsAbout: "big"}, forbid: "events", warnings: 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			c := fakeClient(t)
			if tc.forbid != "" {
				c.PrependReactor("list", tc.forbid, func(k8stesting.Action) (bool, runtime.Object, error) {
					return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: tc.forbid}, "", errors.New("no"))
				})
			}
			got, err := Load(ctx, c, tc.need)
			if tc.wantErr {
				if err == nil {
					t.Fatal("no error")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			counts := [5]int{len(got.Nodes), len(got.Slices), len(got.Claims), len(got.Pods), len(got.PodGroups)}
			if counts != tc.wantCount || len(got.Warnings) != tc.warnings {
				t.Errorf("counts %v, warnings %q; want %v and %d warnings", counts, got.Warnings, tc.wantCount, tc.warnings)
			}
		})
	}
}

// TestLoadEvents: events are listed with a field selector on the
// PodGroup's name, in its namespace.
func TestLoadEvents(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	c := fake.NewClientset(&eventsv1.Event{ObjectMeta: metav1.ObjectMeta{Namespace: "team-b", Name: "e1"},
		Regarding: corev1.ObjectReference{Kind: "PodGroup", Name: "big"}})
	var selector, ns string
	c.PrependReactor("list", "events", func(a k8stesting.Action) (bool, runtime.Object, error) {
		l := a.(k8stesting.ListAction)
		selector, ns = l.GetListRestrictions().Fields.String(), l.GetNamespace()
		return false, nil, nil
	})
	got, err := Load(ctx, c, Need{Namespace: "team-b", EventsAbout: "big"})
	if err != nil {
		t.Fatal(err)
	}
	if selector != "regarding.name=big" || ns != "team-b" || len(got.Events) != 1 {
		t.Errorf("listed events in %q with selector %q, got %d; want team-b, regarding.name=big, 1", ns, selector, len(got.Events))
	}
}
