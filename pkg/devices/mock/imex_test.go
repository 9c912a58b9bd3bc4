package mock_test

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/klog/v2/ktesting"

	"github.com/gpufabric/gpufabric/pkg/devices"
	"github.com/gpufabric/gpufabric/pkg/devices/mock"
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
		"gb1":  {IMEX: devices.IMEXInfo{Major: mock.IMEXMajor, Channels: 2048}, Status: "READY"},
		"gb2":  {IMEX: devices.IMEXInfo{Major: mock.IMEXMajor, Channels: 2048}, Status: "NOT_READY"},
		"gb3":  {IMEX: devices.IMEXInfo{Major: mock.IMEXMajor, Channels: 64}, Problem: "no imex daemon answers"},
		"gb4":  {IMEX: devices.IMEXInfo{Channels: 2048}, Status: "READY"},
		"gb5":  {IMEX: devices.IMEXInfo{Major: mock.IMEXMajor, Channels: 2048}, Status: "READY"},
		"h100": {IMEX: devices.IMEXInfo{Major: mock.IMEXMajor, Channels: 2048}, Problem: "no imex daemon answers"},
		"a100": {IMEX: devices.IMEXInfo{Channels: 2048}, Problem: "no imex daemon answers"},
	}
	f, err := mock.Parse("imex.yaml", []byte(fabric))
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

// TestRefreshSwapsTrees: a process that rebuilds a node from an edited
// fabric file (Refresh) replaces its trees without a moment where a reader
// finds none: the IMEX daemon answers throughout, first NOT_READY, then
// READY once the fault is gone; device paths stay where they were.
func TestRefreshSwapsTrees(t *testing.T) {
	const base = `nodeGroups:
- name: gb
  gpus: {model: GB200}
  nvlink: {kind: mnnvl, clusterUUID: 5e0a7b3c-1d2f-4a6b-8c9d-e0f1a2b3c4d5, cliqueID: 1}
`
	notReady, err := mock.Parse("f.yaml", []byte(base+"faults:\n- node: gb\n  imex: {daemon: NotReady}\n"))
	if err != nil {
		t.Fatal(err)
	}
	ready, err := mock.Parse("f.yaml", []byte(base))
	if err != nil {
		t.Fatal(err)
	}
	_, ctx := ktesting.NewTestContext(t)
	dir := t.TempDir() + "/node"
	first, err := notReady.Refresh("gb", dir)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	answers := make(chan []string)
	go func() {
		var seen []string
		for {
			select {
			case <-done:
				answers <- seen
				return
			default:
			}
			s, err := first.IMEXStatus(ctx)
			if err != nil {
				s = "error: " + err.Error()
			}
			if len(seen) == 0 || seen[len(seen)-1] != s {
				seen = append(seen, s)
			}
		}
	}()
	var last *mock.Backend
	for i := range 20 {
		f := notReady
		if i >= 10 {
			f = ready
		}
		if last, err = f.Refresh("gb", dir); err != nil {
			t.Fatal(err)
		}
	}
	close(done)
	if diff := cmp.Diff([]string{"NOT_READY", "READY"}, <-answers); diff != "" {
		t.Errorf("answers while the trees were swapped (-want +got):\n%s", diff)
	}
	if last.DevRoot() != first.DevRoot() || !strings.HasPrefix(last.DevRoot(), dir) {
		t.Errorf("dev root moved: %s, then %s", first.DevRoot(), last.DevRoot())
	}
}
