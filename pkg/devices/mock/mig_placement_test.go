package mock_test

import (
	"fmt"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	"github.com/gpufabric/gpufabric/pkg/devices/mock"
	"github.com/gpufabric/gpufabric/pkg/gang/placement"
	"github.com/gpufabric/gpufabric/pkg/gang/placement/index"
	"github.com/gpufabric/gpufabric/pkg/topology"
)

// TestEnginePacksMIGByCounters: the scheduler's engine places gangs on the
// MIG partitions discovery publishes, and the partitions' shared counters
// (memory slices of the GPU) keep it from giving out partitions that
// overlap. An H100 has 7 memory slices: 4g+3g fills it, 3g+3g+1g fits
// (3g at 0 and 4, 1g at 3), 4g+3g+1g does not although a distinct device
// exists for each.
func TestEnginePacksMIGByCounters(t *testing.T) {
	const fabric = `nodeGroups:
- name: h100-n1
  gpus: {model: H100}
  nvlink: {kind: nvswitch}
faults:
- node: h100-n1
  migEnabled: {gpus: [7]}
`
	f, err := mock.Parse("mig.yaml", []byte(fabric))
	if err != nil {
		t.Fatal(err)
	}
	_, ctx := ktesting.NewTestContext(t)
	nr, err := f.DiscoverNode(ctx, "h100-n1", t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	in := index.SnapshotInput{Nodes: []*v1.Node{nr.Node}, DeviceClasses: []*resourceapi.DeviceClass{migClass()}}
	for i := range nr.Slices {
		in.ResourceSlices = append(in.ResourceSlices, &nr.Slices[i])
	}
	for _, tc := range []struct {
		profiles []string
		fits     bool
	}{
		{[]string{"4g.40gb", "3g.40gb"}, true},
		{[]string{"3g.40gb", "3g.40gb", "1g.10gb"}, true},
		{[]string{"1g.10gb", "1g.10gb", "1g.10gb", "1g.10gb", "1g.10gb", "1g.10gb", "1g.10gb"}, true},
		{[]string{"4g.40gb", "3g.40gb", "1g.10gb"}, false},
		{[]string{"7g.80gb", "1g.10gb"}, false},
		{[]string{"4g.40gb", "4g.40gb"}, false},
	} {
		t.Run(strings.Join(tc.profiles, "+"), func(t *testing.T) {
			snap, err := index.NewSnapshot(ctx, index.Config{}, in)
			if err != nil {
				t.Fatal(err)
			}
			d, u, err := placement.Place(ctx, placement.Config{}, snap, migGang(t, tc.profiles))
			if err != nil {
				t.Fatal(err)
			}
			if got := d != nil; got != tc.fits {
				t.Fatalf("placed = %v, want %v (unschedulable: %+v)", got, tc.fits, u)
			}
			if d == nil {
				return
			}
			seen := map[string]bool{}
			for _, c := range d.Claims {
				for _, r := range c.Allocation.Devices.Results {
					if seen[r.Device] || !strings.HasPrefix(r.Device, "gpu-7-mig-") {
						t.Errorf("device %s given twice or not a partition of gpu-7", r.Device)
					}
					seen[r.Device] = true
				}
			}
		})
	}
}

func migClass() *resourceapi.DeviceClass {
	return &resourceapi.DeviceClass{
		ObjectMeta: metav1.ObjectMeta{Name: topology.MIGDeviceClass},
		Spec: resourceapi.DeviceClassSpec{Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{
			Expression: fmt.Sprintf(`device.driver == %q && device.attributes[%q].type == %q`, topology.DriverName, topology.DriverName, topology.DeviceTypeMIG),
		}}}},
	}
}

// migGang is a gang of one pod per profile, each with a claim for one
// partition of that profile.
func migGang(t *testing.T, profiles []string) *placement.Gang {
	t.Helper()
	pg := &schedulingv1beta1.PodGroup{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "mig", UID: "pg-mig"},
		Spec: schedulingv1beta1.PodGroupSpec{SchedulingPolicy: schedulingv1beta1.PodGroupSchedulingPolicy{
			Gang: &schedulingv1beta1.GangSchedulingPolicy{MinCount: int32(len(profiles))},
		}},
	}
	claims := map[string]*resourceapi.ResourceClaim{}
	var pods []*v1.Pod
	for i, profile := range profiles {
		name := fmt.Sprintf("mig-%d", i)
		claims[name] = &resourceapi.ResourceClaim{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID("claim-" + name)},
			Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{
				Name: "mig",
				Exactly: &resourceapi.ExactDeviceRequest{
					DeviceClassName: topology.MIGDeviceClass, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 1,
					Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{
						Expression: fmt.Sprintf(`device.attributes[%q].%s == %q`, topology.DriverName, topology.AttrMIGProfile, profile),
					}}},
				},
			}}}},
		}
		pods = append(pods, &v1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID("pod-" + name)},
			Spec: v1.PodSpec{
				SchedulerName:   topology.SchedulerName,
				SchedulingGroup: &v1.PodSchedulingGroup{PodGroupName: ptr.To("mig")},
				Containers:      []v1.Container{{Name: "main"}},
				ResourceClaims:  []v1.PodResourceClaim{{Name: "mig", ResourceClaimName: ptr.To(name)}},
			},
		})
	}
	g, err := placement.NewGang(pg, pods, func(_, name string) (*resourceapi.ResourceClaim, error) {
		if c := claims[name]; c != nil {
			return c, nil
		}
		return nil, fmt.Errorf("claim %s not found", name)
	})
	if err != nil {
		t.Fatal(err)
	}
	return g
}
