package extres

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/gpufabric/gpufabric/pkg/gang/placement"
)

const gpu = v1.ResourceName("nvidia.com/gpu")

// class is a DeviceClass created at second sec, naming ext when set.
func class(name string, sec int64, ext string) *resourceapi.DeviceClass {
	dc := &resourceapi.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: name, CreationTimestamp: metav1.NewTime(time.Unix(sec, 0))}}
	if ext != "" {
		dc.Spec.ExtendedResourceName = ptr.To(ext)
	}
	return dc
}

// TestClasses: kube-scheduler 1.37's mapping: every class backs its
// implicit name; an explicit name goes to the newest class naming it
// (ties: the lower name), whatever the list order; names DRA may not back
// (native resources, quota names) map to nothing.
func TestClasses(t *testing.T) {
	old, young := class("gpu.old.dev", 10, "nvidia.com/gpu"), class("gpu.new.dev", 20, "nvidia.com/gpu")
	twinA, twinB := class("b.twin.dev", 30, "example.com/twin"), class("a.twin.dev", 30, "example.com/twin")
	for _, order := range [][]*resourceapi.DeviceClass{{old, young, twinA, twinB}, {twinB, young, twinA, old}} {
		c := NewClasses(order)
		for name, want := range map[v1.ResourceName]string{
			"nvidia.com/gpu":   "gpu.new.dev",
			"example.com/twin": "a.twin.dev",
			"deviceclass.resource.kubernetes.io/gpu.old.dev": "gpu.old.dev",
			"deviceclass.resource.kubernetes.io/gpu.new.dev": "gpu.new.dev",
			"deviceclass.resource.kubernetes.io/b.twin.dev":  "b.twin.dev",
			"deviceclass.resource.kubernetes.io/none.dev":    "",
			"example.com/unmapped":                           "",
			"cpu":                                            "",
			"requests.nvidia.com/gpu":                        "",
			"kubernetes.io/gpu":                              "",
		} {
			got := ""
			if dc := c.For(name); dc != nil {
				got = dc.Name
			}
			if got != want {
				t.Errorf("For(%s) = %q, want %q", name, got, want)
			}
		}
	}
}

// container is a container asking n of each resource (pairs of name,
// count), and 1 cpu.
func container(name string, kv ...any) v1.Container {
	req := v1.ResourceList{v1.ResourceCPU: resource.MustParse("1")}
	for i := 0; i < len(kv); i += 2 {
		req[v1.ResourceName(kv[i].(string))] = *resource.NewQuantity(int64(kv[i+1].(int)), resource.DecimalSI)
	}
	return v1.Container{Name: name, Resources: v1.ResourceRequirements{Requests: req, Limits: req}}
}

func sidecar(c v1.Container) v1.Container {
	c.RestartPolicy = ptr.To(v1.ContainerRestartPolicyAlways)
	return c
}

func podWith(init []v1.Container, containers ...v1.Container) *v1.Pod {
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p", UID: "uid-p"},
		Spec:       v1.PodSpec{InitContainers: init, Containers: containers},
	}
}

func req(name, class string, n int64) resourceapi.DeviceRequest {
	return resourceapi.DeviceRequest{Name: name, Exactly: &resourceapi.ExactDeviceRequest{
		DeviceClassName: class, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: n,
	}}
}

func mapTo(c, res, request string) v1.ContainerExtendedResourceRequest {
	return v1.ContainerExtendedResourceRequest{ContainerName: c, ResourceName: res, RequestName: request}
}

// TestRequestOf: the special claim's requests and the pod's mappings, by
// kube-scheduler 1.37's rules: a request per long-lived container, named
// by the container's index (init containers first) and the resource's
// index among its sorted requests; init containers reuse the requests of
// the long-lived containers from their position on, and share the
// largest remainder; resources sorted; pods asking for nothing DRA backs
// get nil.
func TestRequestOf(t *testing.T) {
	classes := NewClasses([]*resourceapi.DeviceClass{class("gpu.gpufabric.dev", 1, "nvidia.com/gpu"), class("nic.gpufabric.dev", 1, "")})
	const nic = "deviceclass.resource.kubernetes.io/nic.gpufabric.dev"
	tests := map[string]struct {
		pod      *v1.Pod
		want     *Request
		wantErr  string
		wantKind error
	}{
		"one container, 8 GPUs": {
			pod: podWith(nil, container("train", "nvidia.com/gpu", 8)),
			want: &Request{Names: []v1.ResourceName{gpu}, Classes: []string{"gpu.gpufabric.dev"}, Counts: []int64{8},
				Requests: []resourceapi.DeviceRequest{req("container-0-request-1", "gpu.gpufabric.dev", 8)},
				Mappings: []v1.ContainerExtendedResourceRequest{mapTo("train", "nvidia.com/gpu", "container-0-request-1")}},
		},
		"two containers, two resources (implicit name)": {
			pod: podWith(nil, container("a", "nvidia.com/gpu", 2, nic, 1), container("b", "nvidia.com/gpu", 1)),
			want: &Request{Names: []v1.ResourceName{nic, gpu}, Classes: []string{"nic.gpufabric.dev", "gpu.gpufabric.dev"}, Counts: []int64{1, 3},
				// a's requests sorted: cpu, deviceclass…/nic, nvidia.com/gpu.
				Requests: []resourceapi.DeviceRequest{req("container-0-request-1", "nic.gpufabric.dev", 1), req("container-0-request-2", "gpu.gpufabric.dev", 2), req("container-1-request-1", "gpu.gpufabric.dev", 1)},
				Mappings: []v1.ContainerExtendedResourceRequest{
					mapTo("a", nic, "container-0-request-1"),
					mapTo("a", "nvidia.com/gpu", "container-0-request-2"), mapTo("b", "nvidia.com/gpu", "container-1-request-1"),
				}},
		},
		"init containers reuse the later containers' requests and share the largest remainder": {
			pod: podWith([]v1.Container{container("fetch", "nvidia.com/gpu", 3), container("warm", "nvidia.com/gpu", 5), sidecar(container("log", "nvidia.com/gpu", 1))},
				container("train", "nvidia.com/gpu", 2)),
			want: &Request{Names: []v1.ResourceName{gpu}, Classes: []string{"gpu.gpufabric.dev"}, Counts: []int64{5},
				// fetch (3) reuses log's 1 and train's 2; warm (5) reuses
				// both and needs 2 more: its own request.
				Requests: []resourceapi.DeviceRequest{req("container-1-request-1", "gpu.gpufabric.dev", 2), req("container-2-request-1", "gpu.gpufabric.dev", 1), req("container-3-request-1", "gpu.gpufabric.dev", 2)},
				Mappings: []v1.ContainerExtendedResourceRequest{
					mapTo("log", "nvidia.com/gpu", "container-2-request-1"), mapTo("train", "nvidia.com/gpu", "container-3-request-1"),
					mapTo("fetch", "nvidia.com/gpu", "container-2-request-1"), mapTo("fetch", "nvidia.com/gpu", "container-3-request-1"),
					mapTo("warm", "nvidia.com/gpu", "container-2-request-1"), mapTo("warm", "nvidia.com/gpu", "container-3-request-1"),
					mapTo("warm", "nvidia.com/gpu", "container-1-request-1"),
				}},
		},
		"init containers' own requests: the largest is shared": {
			pod: podWith([]v1.Container{container("a", "nvidia.com/gpu", 2), container("b", "nvidia.com/gpu", 4)}, container("train", "cpu", 1)),
			want: &Request{Names: []v1.ResourceName{gpu}, Classes: []string{"gpu.gpufabric.dev"}, Counts: []int64{4},
				Requests: []resourceapi.DeviceRequest{req("container-1-request-1", "gpu.gpufabric.dev", 4)},
				Mappings: []v1.ContainerExtendedResourceRequest{mapTo("a", "nvidia.com/gpu", "container-1-request-1"), mapTo("b", "nvidia.com/gpu", "container-1-request-1")}},
		},
		"nothing DRA backs": {pod: podWith(nil, container("train", "example.com/fpga", 1))},
		"zero":              {pod: podWith(nil, container("train", "nvidia.com/gpu", 0))},
		"more devices than a claim holds": {
			pod:     podWith(nil, container("train", "nvidia.com/gpu", 33)),
			wantErr: "pod ns/p: its extended resources backed by DRA (nvidia.com/gpu) ask for 33 devices, more than the 32 one ResourceClaim holds", wantKind: placement.ErrUnsupported,
		},
	}
	many := podWith(nil)
	for i := range resourceapi.DeviceRequestsMaxSize + 1 {
		many.Spec.Containers = append(many.Spec.Containers, container(string(rune('a'+i%26))+string(rune('a'+i/26)), "nvidia.com/gpu", 1))
	}
	tests["more requests than a claim holds"] = struct {
		pod      *v1.Pod
		want     *Request
		wantErr  string
		wantKind error
	}{pod: many, wantErr: "make 33 device requests, more than the 32 one ResourceClaim holds", wantKind: placement.ErrUnsupported}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := RequestOf(tc.pod, classes)
			if tc.wantErr != "" {
				if !errors.Is(err, tc.wantKind) || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %v with %q", err, tc.wantKind, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("request (-want +got):\n%s", diff)
			}
		})
	}
}
