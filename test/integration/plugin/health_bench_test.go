package plugin

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/gpufabric/gpufabric/pkg/topology"
	"github.com/gpufabric/gpufabric/test/integration/framework"
	"github.com/gpufabric/gpufabric/test/integration/itest"
)

// BenchmarkXIDToTaint measures issue 16's fast-health path end to end: from
// an Xid appearing (a fault appended to the fabric file, which the mock's
// NVML event set delivers within 20 ms) to the GPU's NoExecute taint being
// visible in the real apiserver (polled every 5 ms). Each iteration is a
// new fatal Xid (another value) on one of the four GPUs of a GB200 tray.
//
//	go test ./test/integration/plugin/ -run '^$' -bench XIDToTaint -benchtime 20x
func BenchmarkXIDToTaint(b *testing.B) {
	const nodeName = "gb200-r1-n01"
	cp := framework.StartT(b, framework.Options{})
	admin := cp.AdminClient(b)
	ctx := b.Context()
	_, err := admin.CoreV1().Nodes().Create(ctx, itest.Node(nodeName, nil), metav1.CreateOptions{})
	itest.Must(b, "create node", err)
	rules, err := framework.LoadRules(framework.PluginRulesFile)
	itest.Must(b, "load rules", err)
	p := framework.NewPlugin(b, cp.KubeconfigWithRules(b, "gpufabric-plugin", rules), itest.GB200Fabric, nodeName)
	p.Start()
	base, err := os.ReadFile(p.Fabric)
	itest.Must(b, "read fabric", err)
	faults := string(base) + "faults:\n"
	fatal := []uint64{79, 48, 74, 94, 95, 119, 120, 140, 64}
	seen := func(device, value string) func(context.Context) (bool, error) {
		return func(ctx context.Context) (bool, error) {
			s, err := nodeSlices(ctx, admin, nodeName)
			if err != nil {
				return false, nil
			}
			for _, t := range devicesOf(s)[device].Taints {
				if t.Key == topology.TaintXID && t.Value == value && t.Effect == resourceapi.DeviceTaintEffectNoExecute {
					return true, nil
				}
			}
			return false, nil
		}
	}
	itest.Must(b, "wait for slices", wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		s, err := nodeSlices(ctx, admin, nodeName)
		return err == nil && len(devicesOf(s)) == 8, nil
	}))
	b.ResetTimer()
	for i := range b.N {
		// 4 GPUs and 9 Xids: a GPU never gets the value it had.
		gpu, xid := i%4, fatal[i%len(fatal)]
		faults += fmt.Sprintf("- node: %s\n  xid: {gpu: %d, xid: %d}\n", nodeName, gpu, xid)
		framework.WriteFile(b, p.Fabric, faults)
		err := wait.PollUntilContextTimeout(ctx, 5*time.Millisecond, 30*time.Second, true, seen(topology.GPUDeviceName(gpu), strconv.FormatUint(xid, 10)))
		itest.Must(b, fmt.Sprintf("wait for the taint of xid %d on gpu-%d", xid, gpu), err)
	}
}
