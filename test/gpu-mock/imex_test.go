package gpumock_test

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/klog/v2/ktesting"

	"github.com/gpufabric/gpufabric/pkg/devices"
	gpumock "github.com/gpufabric/gpufabric/test/gpu-mock"
)

// TestIMEX checks what discovery and the IMEX daemon report per node: a
// multi-node NVLink node has the driver's IMEX channels and a READY
// daemon; the imex fault changes the daemon, the count or the driver; an
// NVSwitch node has the channels but no daemon; an A100 has neither.
func TestIMEX(t *testing.T) {
	const fabric = `nodeGroups:
- name: gb%d
  count: 5
  gpus: {model: GB200}
  nvlink: {kind: mnnvl, clusterUUID: 5e0a7b3c-1d2f-4a6b-8c9d-e0f1a2b3c4d5, cliqueID: 1}
- name: h100
  gpus: {model: H100}
  nvlink: {kind: nvswitch}
- name: a100
  gpus: {model: A100}
  nvlink: {kind: nvswitch}
faults:
- node: gb2
  imex: {daemon: NotReady}
- node: gb3
  imex: {daemon: Down, channels: 64}
- node: gb4
  imex: {noDriverSupport: true}
`
	type view struct {
		IMEX    devices.IMEXInfo
		Status  string
		Problem string
	}
	want := map[string]view{
		"gb1":  {IMEX: devices.IMEXInfo{Major: gpumock.IMEXMajor, Channels: 2048}, Status: "READY"},
		"gb2":  {IMEX: devices.IMEXInfo{Major: gpumock.IMEXMajor, Channels: 2048}, Status: "NOT_READY"},
		"gb3":  {IMEX: devices.IMEXInfo{Major: gpumock.IMEXMajor, Channels: 64}, Problem: "no imex daemon answers"},
		"gb4":  {IMEX: devices.IMEXInfo{Channels: 2048}, Status: "READY"},
		"gb5":  {IMEX: devices.IMEXInfo{Major: gpumock.IMEXMajor, Channels: 2048}, Status: "READY"},
		"h100": {IMEX: devices.IMEXInfo{Major: gpumock.IMEXMajor, Channels: 2048}, Problem: "no imex daemon answers"},
		"a100": {IMEX: devices.IMEXInfo{Channels: 2048}, Problem: "no imex daemon answers"},
	}
	f, err := gpumock.Parse("imex.yaml", []byte(fabric))
	if err != nil {
		t.Fatal(err)
	}
	_, ctx := ktesting.NewTestContext(t)
	dir := t.TempDir()
	for _, n := range f.Nodes() {
		b, err := f.Backend(n.Name, dir+"/"+n.Name)
		if err != nil {
			t.Fatal(err)
		}
		inv, err := devices.Discover(ctx, b, n.Name)
		if err != nil {
			t.Fatal(err)
		}
		got := view{IMEX: inv.IMEX}
		got.Status, err = b.IMEXStatus(ctx)
		if err != nil {
			got.Problem = err.Error()
			if strings.Contains(got.Problem, "no imex daemon answers") {
				got.Problem = "no imex daemon answers"
			}
		}
		if diff := cmp.Diff(want[n.Name], got); diff != "" {
			t.Errorf("node %s (-want +got):\n%s", n.Name, diff)
		}
	}
}
