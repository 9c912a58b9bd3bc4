package plugin

import (
	"os"
	"strings"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpufabric/gpufabric/pkg/topology"
	"github.com/gpufabric/gpufabric/test/integration/framework"
	"github.com/gpufabric/gpufabric/test/integration/itest"
)

// TestPluginFabricErrors raises link error counters of a running plugin's
// node (mock faults appended to its fabric file, read every 1 s health
// interval):
//   - every GPU and NIC publishes fabricErrors 0 while counters are flat;
//   - an HCA port's symbol_error rising by 50 (past the default threshold
//     10) publishes fabricErrors 50 and the taint
//     gpufabric.dev/fabric-errors=symbol_error:NoSchedule, with a
//     FabricErrors Node event naming the device, counter and increase;
//   - NVLink replays rising by 3 on a GPU publish fabricErrors 3, no taint;
//   - with the counters flat again the slices are not rewritten.
func TestPluginFabricErrors(t *testing.T) {
	const nodeName = "gb200-r1-n01"
	cp := framework.StartT(t, framework.Options{})
	admin := cp.AdminClient(t)
	ctx := t.Context()
	_, err := admin.CoreV1().Nodes().Create(ctx, itest.Node(nodeName, nil), metav1.CreateOptions{})
	itest.Must(t, "create node", err)
	rules, err := framework.LoadRules(framework.PluginRulesFile)
	itest.Must(t, "load plugin rules", err)
	p := framework.NewPlugin(t, cp.KubeconfigWithRules(t, "gpufabric-plugin", rules), itest.GB200Fabric, nodeName)
	base, err := os.ReadFile(p.Fabric)
	itest.Must(t, "read fabric", err)
	p.Start()
	waitSlices(t, admin, nodeName, func(s []resourceapi.ResourceSlice) bool {
		devs := devicesOf(s)
		for _, d := range devs {
			if fabricErrors(d) != 0 {
				return false
			}
		}
		_, nic := devs["nic-mlx5-1"]
		return len(devs) == 8 && nic
	})

	faults := "faults:\n- node: " + nodeName + "\n  ibCounters: {rail: 1, counter: symbol_error, add: 50}\n" +
		"- node: " + nodeName + "\n  nvlinkErrors: {gpu: 0, link: 4, counter: replay, add: 3}\n"
	start := time.Now()
	framework.WriteFile(t, p.Fabric, string(base)+faults)
	waitTaint(t, admin, nodeName, "nic-mlx5-1", topology.TaintFabricErrors, "symbol_error", resourceapi.DeviceTaintEffectNoSchedule)
	t.Logf("symbol errors -> fabric-errors taint in the apiserver: %v", time.Since(start))
	slices := waitSlices(t, admin, nodeName, func(s []resourceapi.ResourceSlice) bool {
		return fabricErrors(devicesOf(s)["gpu-0"]) == 3
	})
	devs := devicesOf(slices)
	if got := fabricErrors(devs["nic-mlx5-1"]); got != 50 {
		t.Errorf("nic-mlx5-1 fabricErrors %d, want 50", got)
	}
	if ts := devs["gpu-0"].Taints; len(ts) != 0 {
		t.Errorf("gpu-0 tainted by 3 NVLink replays (threshold 10): %v", ts)
	}
	events, err := admin.CoreV1().Events(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{})
	itest.Must(t, "list events", err)
	found := false
	for _, e := range events.Items {
		found = found || e.InvolvedObject.Name == nodeName && e.Reason == "FabricErrors" &&
			strings.Contains(e.Message, "nic-mlx5-1: symbol_error rose by 50")
	}
	if !found {
		t.Errorf("no FabricErrors event on %s naming nic-mlx5-1, symbol_error and 50", nodeName)
	}

	// Flat counters for two more health intervals: nothing is rewritten.
	before := resourceVersions(slices)
	time.Sleep(2500 * time.Millisecond)
	if after := resourceVersions(mustSlices(t, admin, nodeName)); after != before {
		t.Errorf("slices rewritten while the counters were flat: %s -> %s", before, after)
	}
}

func fabricErrors(d resourceapi.Device) int64 {
	a, ok := d.Attributes[topology.AttrFabricErrors]
	if !ok || a.IntValue == nil {
		return -1
	}
	return *a.IntValue
}

func resourceVersions(slices []resourceapi.ResourceSlice) string {
	var parts []string
	for _, s := range slices {
		parts = append(parts, s.Name+"@"+s.ResourceVersion)
	}
	return strings.Join(parts, ",")
}
