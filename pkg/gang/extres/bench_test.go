package extres

import (
	"fmt"
	"testing"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
)

// BenchmarkAttach: what Attach adds to every attempt of a gang of 1,000
// members whose claims exist (the informers show them), and of one whose
// pods ask for nothing DRA backs.
func BenchmarkAttach(b *testing.B) {
	for _, tc := range []struct {
		name string
		res  string
	}{{"1000-members-nvidia.com-gpu", "nvidia.com/gpu"}, {"1000-members-plain", "example.com/fpga"}} {
		b.Run(tc.name, func(b *testing.B) {
			classes := NewClasses([]*resourceapi.DeviceClass{class("gpu.gpufabric.dev", 1, "nvidia.com/gpu")})
			var pods []*v1.Pod
			var claims []*resourceapi.ResourceClaim
			for i := range 1000 {
				p := podWith(nil, container("train", tc.res, 8))
				p.Name, p.UID = fmt.Sprintf("p-%d", i), types.UID(fmt.Sprint("uid-", i))
				pods = append(pods, p)
				if r, err := RequestOf(p, classes); err == nil && r != nil {
					claims = append(claims, NewClaim(p, r))
				}
			}
			room, _ := roomFor(b, claims, nil)
			b.ResetTimer()
			for range b.N {
				if err := room.Attach(b.Context(), gangOf(pods...)); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
