package plugin

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/gpufabric/gpufabric/test/integration/framework"
	"github.com/gpufabric/gpufabric/test/integration/itest"
)

// TestPluginDriverFilesUnavailable: a node whose driver files are not
// there (a driver container still starting) gets a DriverFilesUnavailable
// Node event, and a GPU claim fails to prepare with an error that says so
// (no CDI spec written); once the files appear, the kubelet's retry
// prepares it with the driver's libraries in the spec, without a restart.
func TestPluginDriverFilesUnavailable(t *testing.T) {
	const nodeName = "h100-n01"
	_, admin, kubeconfig := itest.PluginEnv(t, nodeName)
	p := framework.NewPlugin(t, kubeconfig, itest.HGXFabric, nodeName)
	base, err := os.ReadFile(p.Fabric)
	itest.Must(t, "read fabric", err)
	framework.WriteFile(t, p.Fabric, string(base)+"faults:\n- node: "+nodeName+"\n  driverFiles: {missing: true}\n")
	p.Start()
	waitSlices(t, admin, nodeName, func(s []resourceapi.ResourceSlice) bool { return len(devicesOf(s)) >= 8 })
	itest.Poll(t, "DriverFilesUnavailable event", 30*time.Second, func(context.Context) error {
		if !eventWithReason(t, admin, nodeName, "DriverFilesUnavailable") {
			return fmt.Errorf("no event yet")
		}
		return nil
	})
	dra := kubeletClients(t, p)
	pod := resourceapi.ResourceClaimConsumerReference{Resource: "pods", Name: "train", UID: "pod-uid-1"}
	claim := allocated(t, admin, "gpus", map[string][]string{"gpu": {nodeName + "/gpu-0"}}, pod)
	if e := prepare(t, dra, claim)[string(claim.UID)].Error; !strings.Contains(e, "driver files") {
		t.Fatalf("prepare without driver files: error %q, want one naming the driver files", e)
	}
	if _, err := os.Stat(cdiSpecPath(p, claim.UID)); !os.IsNotExist(err) {
		t.Errorf("a CDI spec was written for the failed claim (err %v)", err)
	}

	framework.WriteFile(t, p.Fabric, string(base))
	var got string
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		if got = prepare(t, dra, claim)[string(claim.UID)].Error; got == "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("prepare once the driver files are there: %s", got)
		}
	}
	if spec := readSpec(t, p, claim); !strings.Contains(spec, "libcuda.so") {
		t.Errorf("the spec lacks the driver's libraries:\n%s", spec)
	}
}
