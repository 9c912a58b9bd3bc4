package plugin

import (
	"os"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/gpufabric/gpufabric/test/integration/framework"
	"github.com/gpufabric/gpufabric/test/integration/itest"
)

// TestPluginMIGPartitions runs the plugin on an HGX node whose gpu-7 is in
// MIG mode: the apiserver accepts its partitions with their shared
// counters, the GPU is not published whole, a claim on a partition is
// prepared over the DRA socket (the GPU instance made, its MIG UUID and
// nvidia-caps nodes in the CDI spec), an overlapping partition of another
// claim is refused by the driver, and unprepare frees the slices. With
// --mig=exclude the GPU is left out with a Node event.
func TestPluginMIGPartitions(t *testing.T) {
	const nodeName = "h100-n01"
	_, admin, kubeconfig := itest.PluginEnv(t, nodeName)
	p := framework.NewPlugin(t, kubeconfig, itest.HGXFabric, nodeName)
	base, err := os.ReadFile(p.Fabric)
	itest.Must(t, "read fabric", err)
	framework.WriteFile(t, p.Fabric, string(base)+"faults:\n- node: "+nodeName+"\n  migEnabled: {gpus: [7]}\n")
	p.Start()
	var counters int
	slices := waitSlices(t, admin, nodeName, func(s []resourceapi.ResourceSlice) bool {
		counters = 0
		for _, sl := range s {
			counters += len(sl.Spec.SharedCounters)
		}
		_, part := devicesOf(s)["gpu-7-mig-3g-40gb-4"]
		return part && counters == 1
	})
	devs := devicesOf(slices)
	if _, whole := devs["gpu-7"]; whole {
		t.Error("the MIG-enabled gpu-7 is published whole")
	}
	dra := kubeletClients(t, p)
	pod := resourceapi.ResourceClaimConsumerReference{Resource: "pods", Name: "inference", UID: "pod-uid-1"}
	small := allocated(t, admin, "small", map[string][]string{"mig": {nodeName + "/gpu-7-mig-1g-10gb-4"}}, pod)
	big := allocated(t, admin, "big", map[string][]string{"mig": {nodeName + "/gpu-7-mig-3g-40gb-4"}}, pod)

	got := prepare(t, dra, small, big)
	if e := got[string(small.UID)].Error; e != "" {
		t.Fatalf("prepare small: %s", e)
	}
	if e := got[string(big.UID)].Error; !strings.Contains(e, "ERROR_INSUFFICIENT_RESOURCES") {
		t.Errorf("overlapping partition: error %q, want the driver's ERROR_INSUFFICIENT_RESOURCES", e)
	}
	spec := readSpec(t, p, small)
	for _, want := range []string{"GPUFABRIC_GPU_UUIDS=MIG-", `"path": "/dev/nvidia-caps/nvidia-cap`, `"major": 510`, "/dev/nvidia7"} {
		if !strings.Contains(spec, want) {
			t.Errorf("partition spec lacks %s:\n%s", want, spec)
		}
	}
	if r := unprepare(t, dra, small)[string(small.UID)]; r.Error != "" {
		t.Fatalf("unprepare small: %s", r.Error)
	}
	if e := prepare(t, dra, big)[string(big.UID)].Error; e != "" {
		t.Errorf("prepare big once small is gone: %s", e)
	}

	t.Run("exclude", func(t *testing.T) {
		p.Stop()
		p.ExtraArgs = []string{"--mig=exclude"}
		p.Start()
		waitSlices(t, admin, nodeName, func(s []resourceapi.ResourceSlice) bool {
			for name := range devicesOf(s) {
				if strings.HasPrefix(name, "gpu-7") {
					return false
				}
			}
			return len(devicesOf(s)) == 15
		})
		if !eventWithReason(t, admin, nodeName, "MIGGPUExcluded") {
			t.Error("no MIGGPUExcluded event")
		}
	})
}
