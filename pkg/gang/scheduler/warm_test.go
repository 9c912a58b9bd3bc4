package scheduler

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	resourceapi "k8s.io/api/resource/v1"
)

func TestClassOrder(t *testing.T) {
	exactly := func(classes ...string) *resourceapi.DeviceClaim {
		d := &resourceapi.DeviceClaim{}
		for _, c := range classes {
			d.Requests = append(d.Requests, resourceapi.DeviceRequest{Name: "r", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: c}})
		}
		return d
	}
	firstAvailable := func(classes ...string) *resourceapi.DeviceClaim {
		r := resourceapi.DeviceRequest{Name: "r"}
		for _, c := range classes {
			r.FirstAvailable = append(r.FirstAvailable, resourceapi.DeviceSubRequest{Name: "s", DeviceClassName: c})
		}
		return &resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{r}}
	}
	for _, tc := range []struct {
		name    string
		classes []string
		specs   []*resourceapi.DeviceClaim
		want    []string
	}{
		{name: "no claims: by name", classes: []string{"nic", "gpu", "fabric"}, want: []string{"fabric", "gpu", "nic"}},
		{
			name:    "requested first, most requests first",
			classes: []string{"a", "gpu", "nic", "z"},
			specs:   []*resourceapi.DeviceClaim{exactly("gpu"), exactly("nic", "gpu"), exactly("gpu")},
			want:    []string{"gpu", "nic", "a", "z"},
		},
		{
			name:    "firstAvailable subrequests count",
			classes: []string{"a", "mig", "gpu"},
			specs:   []*resourceapi.DeviceClaim{firstAvailable("gpu", "mig")},
			want:    []string{"gpu", "mig", "a"},
		},
		{name: "a requested class that does not exist is not warmed", classes: []string{"gpu"}, specs: []*resourceapi.DeviceClaim{exactly("gone")}, want: []string{"gpu"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, classOrder(tc.classes, tc.specs)); diff != "" {
				t.Errorf("classOrder (-want +got):\n%s", diff)
			}
		})
	}
}
