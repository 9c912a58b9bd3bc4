package node

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/go-logr/logr"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/klog/v2"
)

// BenchmarkPrepare8GPU8NIC measures PrepareResourceClaims for one claim of
// 8 GPUs and 8 NICs: checkpoint (Started), CDI spec write + validation,
// checkpoint (Completed). "fsync" is the production path; "no-fsync" is the
// baseline without durability; "already-prepared" is the idempotent path.
// Reports p50/p99 in ms (target: p99 < 50 ms with fsync).
func BenchmarkPrepare8GPU8NIC(b *testing.B) {
	claimN := func(i int) *resourceapi.ResourceClaim {
		return newClaim(fmt.Sprintf("bench-%d", i)).gpus("gpus", 0, 1, 2, 3, 4, 5, 6, 7).
			nics("nics", "mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3", "mlx5_4", "mlx5_5", "mlx5_6", "mlx5_7").obj()
	}
	for _, bc := range []struct {
		name      string
		noSync    bool
		unprepare bool
	}{
		{name: "fsync", unprepare: true},
		{name: "no-fsync", noSync: true, unprepare: true},
		{name: "already-prepared"},
	} {
		b.Run(bc.name, func(b *testing.B) {
			e := newEnv(b)
			e.ctx = klog.NewContext(b.Context(), logr.Discard())
			e.noSync = bc.noSync
			d := e.driver()
			fixed := claimN(-1)
			if !bc.unprepare {
				mustPrepare(b, e.ctx, d, fixed)
			}
			lat := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for i := range b.N {
				rc := fixed
				if bc.unprepare {
					rc = claimN(i)
				}
				start := time.Now()
				res, _ := d.PrepareResourceClaims(e.ctx, []*resourceapi.ResourceClaim{rc})
				lat = append(lat, time.Since(start))
				if err := res[rc.UID].Err; err != nil {
					b.Fatal(err)
				}
				if bc.unprepare {
					b.StopTimer()
					unprepare(b, e.ctx, d, rc)
					b.StartTimer()
				}
			}
			b.StopTimer()
			slices.Sort(lat)
			b.ReportMetric(ms(lat[len(lat)/2]), "p50-ms")
			b.ReportMetric(ms(lat[(len(lat)*99)/100]), "p99-ms")
		})
	}
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
