package devices

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func nicAt(ib, path, guid string) NIC {
	return NIC{IBDevice: ib, Rail: NoRail, LinkLayer: linkLayerIB, PortGUID: guid, PCI: PCIInfo{BusID: filepath.Base(path), Path: path}}
}

// TestNumberRails checks the rail map rules on synthetic HCAs: slots keep
// their rails, a moved card follows its GUID, a missing HCA's rail is never
// given away, a new HCA takes the lowest free rail.
func TestNumberRails(t *testing.T) {
	a := nicAt("mlx5_0", "devices/pci0000:10/0000:13:00.0", "0000:0000:0000:000a")
	b := nicAt("mlx5_1", "devices/pci0000:20/0000:23:00.0", "0000:0000:0000:000b")
	c := nicAt("mlx5_2", "devices/pci0000:30/0000:33:00.0", "0000:0000:0000:000c")
	d := nicAt("mlx5_3", "devices/pci0000:40/0000:43:00.0", "0000:0000:0000:000d")
	first := numberRails([]NIC{c, a, d, b}, nil, nil)
	wantFirst := &RailMap{Rails: []RailSlot{
		{0, a.PCI.Path, a.PortGUID, "mlx5_0"}, {1, b.PCI.Path, b.PortGUID, "mlx5_1"},
		{2, c.PCI.Path, c.PortGUID, "mlx5_2"}, {3, d.PCI.Path, d.PortGUID, "mlx5_3"},
	}}
	if diff := cmp.Diff(wantFirst, first); diff != "" {
		t.Fatalf("positional map (-want +got):\n%s", diff)
	}
	rails := func(nics []NIC) map[string]int {
		m := map[string]int{}
		for _, n := range nics {
			m[n.PortGUID] = n.Rail
		}
		return m
	}
	tests := []struct {
		name      string
		nics      []NIC
		wantRails map[string]int
		wantSlots int
	}{
		{
			name:      "b missing: c and d keep 2 and 3, rail 1 stays reserved",
			nics:      []NIC{renamed(c, "mlx5_1"), a, renamed(d, "mlx5_2")},
			wantRails: map[string]int{a.PortGUID: 0, c.PortGUID: 2, d.PortGUID: 3}, wantSlots: 4,
		},
		{
			name:      "d moved to another slot: its GUID keeps rail 3",
			nics:      []NIC{a, b, c, moved(d, "devices/pci0000:50/0000:53:00.0")},
			wantRails: map[string]int{a.PortGUID: 0, b.PortGUID: 1, c.PortGUID: 2, d.PortGUID: 3}, wantSlots: 4,
		},
		{
			name:      "b replaced by a new card in its slot: the slot keeps rail 1",
			nics:      []NIC{a, withGUID(b, "0000:0000:0000:00bb"), c, d},
			wantRails: map[string]int{a.PortGUID: 0, "0000:0000:0000:00bb": 1, c.PortGUID: 2, d.PortGUID: 3}, wantSlots: 4,
		},
		{
			name:      "b missing and a new card elsewhere: it takes rail 4, not b's 1",
			nics:      []NIC{a, c, d, nicAt("mlx5_3", "devices/pci0000:60/0000:63:00.0", "0000:0000:0000:000e")},
			wantRails: map[string]int{a.PortGUID: 0, c.PortGUID: 2, d.PortGUID: 3, "0000:0000:0000:000e": 4}, wantSlots: 5,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			next := numberRails(tc.nics, first, nil)
			if diff := cmp.Diff(tc.wantRails, rails(tc.nics)); diff != "" {
				t.Errorf("rails by GUID (-want +got):\n%s", diff)
			}
			if len(next.Rails) != tc.wantSlots {
				t.Errorf("next map has %d slots, want %d: %+v", len(next.Rails), tc.wantSlots, next.Rails)
			}
			if _, err := decodeRailMap(mustJSON(t, next)); err != nil {
				t.Errorf("next map does not decode: %v", err)
			}
		})
	}
}

func renamed(n NIC, ib string) NIC    { n.IBDevice = ib; return n }
func moved(n NIC, path string) NIC    { n.PCI.Path, n.PCI.BusID = path, filepath.Base(path); return n }
func withGUID(n NIC, guid string) NIC { n.PortGUID = guid; return n }
func mustJSON(t *testing.T, m *RailMap) []byte {
	t.Helper()
	dir := t.TempDir()
	if err := SaveRailMap(filepath.Join(dir, "r.json"), m); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(dir, "r.json"))
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func TestLoadRailMap(t *testing.T) {
	tests := map[string]struct {
		content string
		wantErr bool
	}{
		"valid":          {content: `{"rails":[{"rail":0,"pciPath":"devices/pci0000:10/0000:13:00.0"}]}`},
		"unknown field":  {content: `{"rails":[],"extra":1}`, wantErr: true},
		"rail twice":     {content: `{"rails":[{"rail":0,"pciPath":"a"},{"rail":0,"pciPath":"b"}]}`, wantErr: true},
		"slot twice":     {content: `{"rails":[{"rail":0,"pciPath":"a"},{"rail":1,"pciPath":"a"}]}`, wantErr: true},
		"negative rail":  {content: `{"rails":[{"rail":-1,"pciPath":"a"}]}`, wantErr: true},
		"rail too large": {content: `{"rails":[{"rail":64,"pciPath":"a"}]}`, wantErr: true},
		"empty path":     {content: `{"rails":[{"rail":1,"pciPath":""}]}`, wantErr: true},
		"not json":       {content: `rails`, wantErr: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), RailMapFileName)
			if err := os.WriteFile(path, []byte(tc.content), 0o644); err != nil {
				t.Fatal(err)
			}
			m, err := LoadRailMap(path)
			if (err != nil) != tc.wantErr || (err == nil && m == nil) {
				t.Errorf("LoadRailMap = %v, %v; want error %v", m, err, tc.wantErr)
			}
		})
	}
	if m, err := LoadRailMap(filepath.Join(t.TempDir(), "none.json")); m != nil || err != nil {
		t.Errorf("missing file: %v, %v; want nil, nil", m, err)
	}
}

// FuzzDecodeRailMap: a decoded map has at most 64 slots, distinct rails in
// 0..63 and distinct, non-empty paths, and numbering NICs with it keeps
// those properties.
func FuzzDecodeRailMap(f *testing.F) {
	f.Add([]byte(`{"rails":[{"rail":0,"pciPath":"devices/pci0000:10/0000:13:00.0","portGUID":"0000:0000:0000:000a"}]}`))
	f.Add([]byte(`{"rails":[{"rail":3,"pciPath":"x"},{"rail":1,"pciPath":"y"}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := decodeRailMap(data)
		if err != nil {
			return
		}
		nics := []NIC{nicAt("mlx5_0", "devices/pci0000:10/0000:13:00.0", "0000:0000:0000:000a"), nicAt("mlx5_1", "x", "")}
		next := numberRails(nics, m, nil)
		seen := map[int]bool{}
		for _, n := range nics {
			if n.Rail < 0 || seen[n.Rail] {
				t.Fatalf("rail %d given twice or negative: %+v", n.Rail, nics)
			}
			seen[n.Rail] = true
		}
		if len(next.Rails) > len(m.Rails)+len(nics) {
			t.Fatalf("next map grew to %d slots from %d", len(next.Rails), len(m.Rails))
		}
	})
}

// TestPairedRails: HCAs number by the GPU behind their PCIe switch only when
// every IB HCA pairs with its own GPU; otherwise numbering is positional.
func TestPairedRails(t *testing.T) {
	sw := func(root, port, dev string) string { return "devices/" + root + "/" + port + "/" + dev }
	gpus := []string{
		sw("pci0000:10", "0000:10:01.0", "0000:11:00.0"),
		sw("pci0000:20", "0000:20:01.0", "0000:21:00.0"),
		sw("pci0000:30", "0000:30:01.0", "0000:31:00.0"),
	}
	hca := func(ib, root, port, dev string) NIC { return nicAt(ib, sw(root, port, dev), "") }
	for _, tc := range []struct {
		name string
		nics []NIC
		want map[string]int
	}{
		{"each behind its GPU's switch, first one missing", []NIC{
			hca("mlx5_0", "pci0000:20", "0000:20:01.0", "0000:22:00.0"),
			hca("mlx5_1", "pci0000:30", "0000:30:01.0", "0000:32:00.0"),
		}, map[string]int{"mlx5_0": 1, "mlx5_1": 2}},
		{"two HCAs behind one GPU's switch: positional", []NIC{
			hca("mlx5_0", "pci0000:20", "0000:20:01.0", "0000:22:00.0"),
			hca("mlx5_1", "pci0000:20", "0000:20:01.0", "0000:23:00.0"),
		}, map[string]int{"mlx5_0": 0, "mlx5_1": 1}},
		{"HCA on its own root complex: positional", []NIC{
			hca("mlx5_0", "pci0000:20", "0000:20:01.0", "0000:22:00.0"),
			hca("mlx5_1", "pci0000:90", "0000:90:01.0", "0000:91:00.0"),
		}, map[string]int{"mlx5_0": 0, "mlx5_1": 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			nics := append([]NIC(nil), tc.nics...)
			numberRails(nics, nil, gpus)
			got := map[string]int{}
			for _, n := range nics {
				got[n.IBDevice] = n.Rail
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("rails (-want +got):\n%s", diff)
			}
		})
	}
}
