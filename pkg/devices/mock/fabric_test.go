package mock_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/google/go-cmp/cmp"
	"k8s.io/klog/v2/ktesting"

	"github.com/gpufabric/gpufabric/pkg/devices/mock"
)

const goodGroup = `
nodeGroups:
- name: n%02d
  count: 2
  gpus: {model: GB200}
  nvlink: {kind: mnnvl, clusterUUID: 5e0a7b3c-1d2f-4a6b-8c9d-e0f1a2b3c4d5, cliqueID: 1}
  hcas: {count: 4}
`

// TestParseErrors checks that every malformed or inconsistent fabric file
// fails with an error naming the file, the node (or group) and the field.
func TestParseErrors(t *testing.T) {
	tests := map[string]struct {
		yaml string
		want []string // substrings of the error
	}{
		"unknown top-level field": {
			yaml: goodGroup + "extra: 1\n",
			want: []string{"bad.yaml", `unknown field "extra"`},
		},
		"unknown nested field": {
			yaml: strings.Replace(goodGroup, "count: 4}", "count: 4, speed: 9}", 1),
			want: []string{"bad.yaml", `unknown field "nodeGroups[0].hcas.speed"`},
		},
		"no node groups": {
			yaml: "nodeGroups: []\n",
			want: []string{"bad.yaml", "nodeGroups", "at least one"},
		},
		"unknown gpu model": {
			yaml: strings.Replace(goodGroup, "GB200", "GB300", 1),
			want: []string{"bad.yaml", "nodeGroups[0] (n%02d)", "gpus.model", `unknown GPU model "GB300"`},
		},
		"duplicate node": {
			yaml: goodGroup + `- name: n02
  gpus: {model: H100}
  nvlink: {kind: nvswitch}
`,
			want: []string{"bad.yaml", "node n02", "nodeGroups[1].name", "duplicate node (also in nodeGroups[0])"},
		},
		"rail that does not exist": {
			yaml: strings.Replace(goodGroup, "count: 4}", "count: 4, gpuRails: [0, 1, 2, 4]}", 1),
			want: []string{"bad.yaml", "nodeGroups[0] (n%02d)", "hcas.gpuRails[3]", "rail 4 does not exist (the node has 4 HCAs)"},
		},
		"gpus claim two cliques": {
			yaml: strings.Replace(goodGroup, "cliqueID: 1}", "gpuCliqueIDs: [1, 1, 2, 2]}", 1),
			want: []string{"bad.yaml", "nodeGroups[0] (n%02d)", "nvlink.gpuCliqueIDs", "two cliques (1 and 2)"},
		},
		"clique id disagrees with gpu clique ids": {
			yaml: strings.Replace(goodGroup, "cliqueID: 1}", "cliqueID: 3, gpuCliqueIDs: [1, 1, 1, 1]}", 1),
			want: []string{"nvlink.gpuCliqueIDs", "two cliques (1 and 3)"},
		},
		"mnnvl without cluster uuid": {
			yaml: strings.Replace(goodGroup, "clusterUUID: 5e0a7b3c-1d2f-4a6b-8c9d-e0f1a2b3c4d5, ", "", 1),
			want: []string{"nvlink.clusterUUID", "non-zero UUID"},
		},
		"mnnvl on a100": {
			yaml: strings.Replace(goodGroup, "GB200", "A100", 1),
			want: []string{"nvlink.kind", "A100 cannot join a multi-node NVLink fabric"},
		},
		"clique on nvswitch": {
			yaml: "nodeGroups:\n- name: a\n  gpus: {model: H100}\n  nvlink: {kind: nvswitch, cliqueID: 2}\n",
			want: []string{"nodeGroups[0] (a)", "nvlink", "only for kind mnnvl"},
		},
		"bad nvlink kind": {
			yaml: "nodeGroups:\n- name: a\n  gpus: {model: H100}\n  nvlink: {kind: nvl72}\n",
			want: []string{"nvlink.kind", `got "nvl72"`},
		},
		"count without pattern": {
			yaml: "nodeGroups:\n- name: a\n  count: 3\n  gpus: {model: H100}\n  nvlink: {kind: nvswitch}\n",
			want: []string{"nodeGroups[0] (a)", "name", "needs a name pattern"},
		},
		"pattern with two verbs": {
			yaml: "nodeGroups:\n- name: a%d-%d\n  count: 3\n  gpus: {model: H100}\n  nvlink: {kind: nvswitch}\n",
			want: []string{"name", "exactly one %d verb"},
		},
		"invalid node name": {
			yaml: "nodeGroups:\n- name: Node_%d\n  count: 1\n  gpus: {model: H100}\n  nvlink: {kind: nvswitch}\n",
			want: []string{"node Node_1", "nodeGroups[0].name"},
		},
		"bad label": {
			yaml: "nodeGroups:\n- name: a\n  labels: {rack: 'two words'}\n  gpus: {model: H100}\n  nvlink: {kind: nvswitch}\n",
			want: []string{"labels.rack", "two words"},
		},
		"too many gpus": {
			yaml: "nodeGroups:\n- name: a\n  gpus: {model: H100, count: 17}\n  nvlink: {kind: nvswitch}\n",
			want: []string{"gpus.count", "1..16"},
		},
		"unknown link layer": {
			yaml: "nodeGroups:\n- name: a\n  gpus: {model: H100}\n  nvlink: {kind: nvswitch}\n  hcas: {count: 1, linkLayer: OmniPath}\n",
			want: []string{"hcas.linkLayer", "OmniPath"},
		},
		"bad allocatable": {
			yaml: "nodeGroups:\n- name: a\n  gpus: {model: H100}\n  nvlink: {kind: nvswitch}\n  allocatable: {cpu: lots}\n",
			want: []string{"allocatable.cpu"},
		},
		"fault on unknown node": {
			yaml: goodGroup + "faults:\n- node: n09\n  portDown: {rail: 0}\n",
			want: []string{"bad.yaml", "faults[0]", `unknown node "n09"`},
		},
		"fault on a rail that does not exist": {
			yaml: goodGroup + "faults:\n- node: n01\n  portDown: {rail: 4}\n",
			want: []string{"bad.yaml", "node n01", "faults[0].portDown.rail", "rail 4 does not exist"},
		},
		"fault on a gpu that does not exist": {
			yaml: goodGroup + "faults:\n- node: n02\n  nvlinkDegraded: {gpu: 4, linksDown: 1}\n",
			want: []string{"node n02", "faults[0].nvlinkDegraded.gpu", "GPU 4 does not exist"},
		},
		"too many links down": {
			yaml: goodGroup + "faults:\n- node: n02\n  nvlinkDegraded: {gpu: 1, linksDown: 19}\n",
			want: []string{"node n02", "nvlinkDegraded.linksDown", "1..18"},
		},
		"fault naming nothing": {
			yaml: goodGroup + "faults:\n- node: n02\n",
			want: []string{"node n02", "faults[0]", "names no fault"},
		},
		"unknown nvml call": {
			yaml: goodGroup + "faults:\n- node: n02\n  nvmlError: {gpu: 0, call: GetPowerUsage}\n",
			want: []string{"nvmlError.call", "GetPowerUsage"},
		},
		"unknown fabric state": {
			yaml: goodGroup + "faults:\n- node: n02\n  fabricNotCompleted: {state: Sleeping}\n",
			want: []string{"fabricNotCompleted.state", "Sleeping"},
		},
		"fabric fault on a100": {
			yaml: "nodeGroups:\n- name: a\n  gpus: {model: A100}\n  nvlink: {kind: nvswitch}\nfaults:\n- node: a\n  fabricNotCompleted: {}\n",
			want: []string{"node a", "fabricNotCompleted", "no fabric registration"},
		},
		"unknown sysfs breakage": {
			yaml: goodGroup + "faults:\n- node: n02\n  sysfs: {rail: 0, break: melted}\n",
			want: []string{"sysfs.break", "melted"},
		},
		"imex daemon fault on a node without mnnvl": {
			yaml: "nodeGroups:\n- name: h\n  gpus: {model: H100}\n  nvlink: {kind: nvswitch}\nfaults:\n- node: h\n  imex: {daemon: NotReady}\n",
			want: []string{"node h", "faults[0].imex.daemon", "runs no IMEX daemon"},
		},
		"unknown imex daemon state": {
			yaml: goodGroup + "faults:\n- node: n02\n  imex: {daemon: Sleepy}\n",
			want: []string{"node n02", "faults[0].imex.daemon", `"Sleepy"`},
		},
		"imex channel count out of range": {
			yaml: goodGroup + "faults:\n- node: n02\n  imex: {channels: 0}\n",
			want: []string{"node n02", "faults[0].imex.channels", "must be 1..1048576, got 0"},
		},
		"xid out of range": {
			yaml: goodGroup + "faults:\n- node: n02\n  xid: {gpu: 0, xid: 0}\n",
			want: []string{"node n02", "faults[0].xid.xid", "must be 1..65535, got 0"},
		},
		"xid on a gpu that does not exist": {
			yaml: goodGroup + "faults:\n- node: n02\n  xid: {gpu: 4, xid: 79}\n",
			want: []string{"node n02", "faults[0].xid.gpu", "GPU 4 does not exist"},
		},
		"unknown ecc type": {
			yaml: goodGroup + "faults:\n- node: n02\n  ecc: {gpu: 1, type: TripleBit}\n",
			want: []string{"node n02", "faults[0].ecc.type", `"TripleBit"`},
		},
		"nvlink error counter unknown": {
			yaml: goodGroup + "faults:\n- node: n02\n  nvlinkErrors: {gpu: 0, link: 0, counter: bogus, add: 1}\n",
			want: []string{"node n02", "faults[0].nvlinkErrors.counter", `"bogus"`},
		},
		"nvlink error on a link that does not exist": {
			yaml: goodGroup + "faults:\n- node: n02\n  nvlinkErrors: {gpu: 0, link: 18, counter: replay, add: 1}\n",
			want: []string{"node n02", "faults[0].nvlinkErrors.link", "must be 0..17", "got 18"},
		},
		"nvlink error with set and add": {
			yaml: goodGroup + "faults:\n- node: n02\n  nvlinkErrors: {gpu: 0, link: 0, counter: replay, add: 1, set: 2}\n",
			want: []string{"node n02", "faults[0].nvlinkErrors", "exactly one of set and add"},
		},
		"ib counter without a value": {
			yaml: goodGroup + "faults:\n- node: n02\n  ibCounters: {rail: 0, counter: symbol_error}\n",
			want: []string{"node n02", "faults[0].ibCounters", "exactly one of set and add"},
		},
		"ib counter unknown": {
			yaml: goodGroup + "faults:\n- node: n02\n  ibCounters: {rail: 0, counter: port_xmit_wait, add: 1}\n",
			want: []string{"node n02", "faults[0].ibCounters.counter", `"port_xmit_wait"`},
		},
		"ib counter on a rail that does not exist": {
			yaml: goodGroup + "faults:\n- node: n02\n  ibCounters: {rail: 4, counter: link_downed, add: 1}\n",
			want: []string{"node n02", "faults[0].ibCounters.rail", "rail 4 does not exist"},
		},
		"ib counter negative": {
			yaml: goodGroup + "faults:\n- node: n02\n  ibCounters: {rail: 0, counter: link_downed, add: -1}\n",
			want: []string{"bad.yaml", "ibCounters.add"},
		},
		"event set failures out of range": {
			yaml: goodGroup + "faults:\n- node: n02\n  eventSet: {createFailures: 0}\n",
			want: []string{"node n02", "faults[0].eventSet.createFailures", "must be 1..1000, got 0"},
		},
		"not yaml": {
			yaml: "nodeGroups: [",
			want: []string{"bad.yaml"},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			_, err := mock.Parse("bad.yaml", []byte(tc.yaml))
			if err == nil {
				t.Fatal("Parse succeeded, want an error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

func TestLoadFileNamesFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "broken.yaml")
	if err := os.WriteFile(path, []byte(strings.Replace(goodGroup, "GB200", "X1", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := mock.LoadFile(path)
	if err == nil || !strings.Contains(err.Error(), path) {
		t.Fatalf("error %v does not name %s", err, path)
	}
}

// TestFixturesNodes checks the fixture fabrics expand to the nodes the
// issue asks for.
func TestFixturesNodes(t *testing.T) {
	type shape struct {
		Nodes, GPUs, HCAs int
		Models            string
	}
	tests := map[string]shape{
		"gb200-nvl72x2.yaml": {Nodes: 36, GPUs: 144, HCAs: 144, Models: "GB200"},
		"hgx-h100x8.yaml":    {Nodes: 8, GPUs: 64, HCAs: 64, Models: "H100"},
		"mixed.yaml":         {Nodes: 8, GPUs: 60, HCAs: 41, Models: "A100,A100-40GB,A100-PCIE,B200,H200"},
		"faults.yaml":        {Nodes: 6, GPUs: 32, HCAs: 32, Models: "GB200,H100"},
	}
	for file, want := range tests {
		t.Run(file, func(t *testing.T) {
			f, err := mock.LoadFile(filepath.Join("fabrics", file))
			if err != nil {
				t.Fatal(err)
			}
			var got shape
			models := map[string]bool{}
			for _, n := range f.Nodes() {
				got.Nodes++
				got.GPUs += n.GPUs
				got.HCAs += n.HCAs
				models[n.GPUModel] = true
			}
			var names []string
			for m := range models {
				names = append(names, m)
			}
			slices.Sort(names)
			got.Models = strings.Join(names, ",")
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// TestMockSetsOnlyWhatDiscoveryCalls checks that the mock keeps the
// library's behaviour for calls discovery does not make: they panic.
func TestMockSetsOnlyWhatDiscoveryCalls(t *testing.T) {
	f, err := mock.LoadFile("fabrics/hgx-h100x8.yaml")
	if err != nil {
		t.Fatal(err)
	}
	b, err := f.Backend("h100-n01", t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	dev, ret := b.NVML().DeviceGetHandleByIndex(3)
	if ret != nvml.SUCCESS {
		t.Fatal(ret)
	}
	pci, _ := dev.GetPciInfo()
	var busID []byte
	for _, c := range pci.BusId {
		if c == 0 {
			break
		}
		busID = append(busID, byte(c))
	}
	if diff := cmp.Diff("00000000:2C:00.0", string(busID)); diff != "" {
		t.Errorf("bus id (-want +got):\n%s", diff)
	}
	if _, err := os.Lstat(filepath.Join(b.SysfsRoot(), "bus/pci/devices/0000:2c:00.0")); err != nil {
		t.Errorf("bus id not in the fake sysfs: %v", err)
	}
	defer func() {
		if recover() == nil {
			t.Error("GetPowerUsage did not panic; the mock must leave calls discovery does not make unset")
		}
	}()
	dev.GetPowerUsage()
}

// TestDiscoverAll checks the helper scheduler tests use: one entry per
// node with its labels and slices.
func TestDiscoverAll(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f, err := mock.LoadFile("fabrics/faults.yaml")
	if err != nil {
		t.Fatal(err)
	}
	all, err := f.DiscoverAll(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	type row struct {
		Node, Rack string
		Devices    int
		Slices     int
	}
	var got []row
	for _, nr := range all {
		n := 0
		for _, s := range nr.Slices {
			n += len(s.Spec.Devices)
		}
		got = append(got, row{nr.Node.Name, nr.Node.Labels["topology.gpufabric.dev/rack"], n, len(nr.Slices)})
	}
	want := []row{
		{"gb200-n01", "rack-1", 8, 1}, {"gb200-n02", "rack-1", 8, 1}, {"gb200-n03", "rack-1", 8, 1},
		// h100-n01's gpu-7 is in MIG mode: 28 partitions, and its counter
		// set in a slice of its own.
		{"gb200-n04", "rack-1", 8, 1}, {"h100-n01", "rack-2", 41, 2}, {"h100-n02", "rack-2", 15, 1},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

// TestBounds checks every limit of a fabric file: the error names the
// file, the group (or faults) and the field; the limit itself is accepted.
func TestBounds(t *testing.T) {
	group := func(name, extra string) string {
		return "- name: " + name + "\n  gpus: {model: H100}\n  nvlink: {kind: nvswitch}\n" + extra
	}
	faults := func(n int) string {
		return "faults:\n" + strings.Repeat("- node: n0001\n  migEnabled: {}\n", n)
	}
	tests := map[string]struct {
		yaml string
		want []string // substrings of the error; none: accepted
	}{
		"count zero":        {yaml: group("n%04d", "  count: 0\n"), want: []string{"nodeGroups[0] (n%04d)", "count", "1..10000, got 0"}},
		"count above limit": {yaml: group("n%04d", "  count: 10001\n"), want: []string{"nodeGroups[0] (n%04d)", "count", "1..10000, got 10001"}},
		"count at limit":    {yaml: group("n%04d", "  count: 10000\n")},
		"nodes over all groups": {yaml: group("n%04d", "  count: 6000\n") + group("m%04d", "  count: 4001\n"),
			want: []string{"nodeGroups[1] (m%04d)", "count", "4001 more nodes make 10001, more than the limit of 10000"}},
		"negative start":     {yaml: group("n%d", "  start: -1\n"), want: []string{"nodeGroups[0] (n%d)", "start", "0..1000000, got -1"}},
		"start above limit":  {yaml: group("n%d", "  start: 1000001\n"), want: []string{"start", "0..1000000"}},
		"start zero":         {yaml: group("n%d", "  start: 0\n")},
		"gpus per node":      {yaml: "nodeGroups:\n- name: a\n  gpus: {model: H100, count: 17}\n  nvlink: {kind: nvswitch}\n", want: []string{"nodeGroups[0] (a)", "gpus.count", "1..16, got 17"}},
		"hcas per node":      {yaml: group("a", "  hcas: {count: 17}\n"), want: []string{"nodeGroups[0] (a)", "hcas.count", "0..16, got 17"}},
		"hcas at limit":      {yaml: group("a", "  hcas: {count: 16}\n")},
		"numa nodes":         {yaml: group("a", "  numaNodes: 9\n"), want: []string{"numaNodes", "1..8, got 9"}},
		"port rate":          {yaml: group("a", "  hcas: {count: 1, rateGbps: 100001}\n"), want: []string{"hcas.rateGbps", "1..100000, got 100001"}},
		"pattern width":      {yaml: group("n%003d", "  count: 2\n"), want: []string{"nodeGroups[0] (n%003d)", "name", "width at most two digits"}},
		"faults above limit": {yaml: group("n%04d", "  count: 1\n") + faults(10001), want: []string{"faults", "10001 entries, more than the limit of 10000"}},
		"faults at limit":    {yaml: group("n%04d", "  count: 1\n") + faults(10000)},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			data := tc.yaml
			if !strings.HasPrefix(data, "nodeGroups:") {
				data = "nodeGroups:\n" + data
			}
			_, err := mock.Parse("big.yaml", []byte(data))
			if len(tc.want) == 0 {
				if err != nil {
					t.Fatalf("a file at the limit is refused: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatal("Parse succeeded, want an error")
			}
			for _, w := range append([]string{"big.yaml: "}, tc.want...) {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

// TestFileSizeLimit checks that a file over 8 MiB is refused before it is
// parsed, by Parse and by LoadFile (which does not read it).
func TestFileSizeLimit(t *testing.T) {
	big := make([]byte, mock.MaxFileSize+1)
	if _, err := mock.Parse("big.yaml", big); err == nil || !strings.Contains(err.Error(), "big.yaml: file is 8388609 bytes, more than the limit") {
		t.Errorf("Parse error = %v", err)
	}
	path := filepath.Join(t.TempDir(), "huge.yaml")
	if err := os.WriteFile(path, []byte(goodGroup), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(path, 1<<30); err != nil { // sparse: a 1 GiB file that LoadFile must not read
		t.Fatal(err)
	}
	if _, err := mock.LoadFile(path); err == nil || !strings.Contains(err.Error(), path+": file is 1073741824 bytes") {
		t.Errorf("LoadFile error = %v", err)
	}
}
