package plugin

import (
	"os"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	resourceapi "k8s.io/api/resource/v1"
	drahealthv1 "k8s.io/kubelet/pkg/apis/dra-health/v1"
	"k8s.io/utils/ptr"

	"github.com/gpufabric/gpufabric/pkg/topology"
	"github.com/gpufabric/gpufabric/test/integration/framework"
	"github.com/gpufabric/gpufabric/test/integration/itest"
)

// waitHealth reads health reports until device has want.
func waitHealth(t *testing.T, stream grpc.ServerStreamingClient[drahealthv1.NodeWatchResourcesResponse], device string, want drahealthv1.HealthStatus) {
	t.Helper()
	for range 100 {
		resp, err := stream.Recv()
		itest.Must(t, "receive health report", err)
		for _, d := range resp.Devices {
			if d.Device.DeviceName == device && d.Health == want {
				return
			}
		}
	}
	t.Fatalf("no health report with %s %v", device, want)
}

func hasTaint(d resourceapi.Device, key string) bool {
	for _, t := range d.Taints {
		if t.Key == key {
			return true
		}
	}
	return false
}

// TestPluginPublishesSlices runs two real plugin processes (a GB200 tray and
// an 8-GPU HGX node) with the plugin's shipped RBAC rules: their pools show
// up with fabric attributes, follow a fault injected into the fabric file,
// and one node's plugin never touches the other node's slices.
func TestPluginPublishesSlices(t *testing.T) {
	_, admin, kubeconfig := itest.PluginEnv(t, "gb200-r1-n01", "h100-n01")
	ctx := t.Context()
	framework.PluginBinary(t) // build before timing

	gb := framework.NewPlugin(t, kubeconfig, itest.GB200Fabric, "gb200-r1-n01")
	hgx := framework.NewPlugin(t, kubeconfig, itest.HGXFabric, "h100-n01")
	start := time.Now()
	hgx.Start()
	hgxSlices := waitSlices(t, admin, "h100-n01", func(s []resourceapi.ResourceSlice) bool { return len(devicesOf(s)) == 16 })
	t.Logf("8-GPU node: slices visible %v after the plugin process started", time.Since(start).Round(time.Millisecond))
	gb.Start()
	gbDevs := devicesOf(waitSlices(t, admin, "gb200-r1-n01", func(s []resourceapi.ResourceSlice) bool { return len(devicesOf(s)) == 8 }))

	// Fabric attributes: one multi-node NVLink domain for the tray's GPUs,
	// one rail per GPU; the HGX node is its own NVSwitch domain.
	domains := map[string]bool{}
	for i := range 4 {
		d := gbDevs[topology.GPUDeviceName(i)]
		domains[ptr.Deref(d.Attributes[topology.AttrNVLinkDomain].StringValue, "")] = true
		if kind := ptr.Deref(d.Attributes[topology.AttrNVLinkDomainKind].StringValue, ""); kind != string(topology.DomainKindMNNVL) {
			t.Errorf("gpu-%d nvlinkDomainKind = %q, want mnnvl", i, kind)
		}
		if rail := d.Attributes[topology.AttrIBRail].IntValue; rail == nil || *rail != int64(i) {
			t.Errorf("gpu-%d ibRail = %v, want %d", i, rail, i)
		}
	}
	if len(domains) != 1 || domains[""] {
		t.Errorf("GB200 tray GPUs carry nvlinkDomain values %v, want exactly one", domains)
	}
	hgxGPU := devicesOf(hgxSlices)[topology.GPUDeviceName(0)]
	if want := topology.NodeDomainID(topology.DomainKindNVSwitch, "h100-n01"); ptr.Deref(hgxGPU.Attributes[topology.AttrNVLinkDomain].StringValue, "") != want {
		t.Errorf("HGX gpu-0 nvlinkDomain = %v, want %s", hgxGPU.Attributes[topology.AttrNVLinkDomain].StringValue, want)
	}
	hgxVersions := map[string]string{}
	for _, s := range hgxSlices {
		hgxVersions[s.Name] = s.ResourceVersion
	}

	// The kubelet's health stream reports every device, healthy for now.
	stream, err := healthClient(t, gb).NodeWatchResources(ctx, &drahealthv1.NodeWatchResourcesRequest{})
	itest.Must(t, "watch device health", err)
	waitHealth(t, stream, "gpu-2", drahealthv1.HealthStatus_HEALTHY)

	// Inject faults into the tray's fabric file: the plugin re-reads it.
	fabric, err := os.ReadFile(gb.Fabric)
	itest.Must(t, "read fabric", err)
	framework.WriteFile(t, gb.Fabric, string(fabric)+"faults:\n- node: gb200-r1-n01\n  nvlinkDegraded: {gpu: 2, linksDown: 2}\n  portDown: {rail: 3}\n")
	waitSlices(t, admin, "gb200-r1-n01", func(s []resourceapi.ResourceSlice) bool {
		devs := devicesOf(s)
		return hasTaint(devs["gpu-2"], topology.TaintNVLinkDegraded) && !hasTaint(devs["gpu-1"], topology.TaintNVLinkDegraded) &&
			hasTaint(devs[topology.NICDeviceName("mlx5_3")], topology.TaintPortDown)
	})
	waitHealth(t, stream, "gpu-2", drahealthv1.HealthStatus_UNHEALTHY)

	// Repaired: the taints go away.
	framework.WriteFile(t, gb.Fabric, string(fabric))
	waitSlices(t, admin, "gb200-r1-n01", func(s []resourceapi.ResourceSlice) bool {
		for _, d := range devicesOf(s) {
			if len(d.Taints) > 0 {
				return false
			}
		}
		return true
	})

	// Hardware that disappears leaves no stale devices: two GPUs go away.
	writeFabric := strings.Replace(string(fabric), "gpus: {model: GB200, count: 4}", "gpus: {model: GB200, count: 2}", 1)
	framework.WriteFile(t, gb.Fabric, writeFabric)
	waitSlices(t, admin, "gb200-r1-n01", func(s []resourceapi.ResourceSlice) bool {
		devs := devicesOf(s)
		_, gone := devs["gpu-2"]
		return len(devs) == 6 && !gone
	})
	framework.WriteFile(t, gb.Fabric, string(fabric))
	waitSlices(t, admin, "gb200-r1-n01", func(s []resourceapi.ResourceSlice) bool { return len(devicesOf(s)) == 8 })

	// The other node's slices were never rewritten.
	after, err := nodeSlices(ctx, admin, "h100-n01")
	itest.Must(t, "list hgx slices", err)
	for _, s := range after {
		if hgxVersions[s.Name] != s.ResourceVersion {
			t.Errorf("slice %s of h100-n01 changed (resourceVersion %s → %s) while only gb200-r1-n01 changed", s.Name, hgxVersions[s.Name], s.ResourceVersion)
		}
	}
	if len(after) != len(hgxVersions) {
		t.Errorf("h100-n01 has %d slices, had %d", len(after), len(hgxVersions))
	}
}
