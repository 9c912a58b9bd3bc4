package devices

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"slices"
	"strings"

	"github.com/gpufabric/gpufabric/pkg/internal/fsutil"
)

// RailMapFileName is the rail map's file in the plugin's state directory.
const RailMapFileName = "rails.json"

// maxRailMapEntries bounds a rail map: more HCAs than any node has.
const maxRailMapEntries = 64

// RailMap remembers which rail each HCA slot had, so that rails stay where
// the cables are when an HCA goes missing: the kernel then renumbers the
// RDMA devices after it (mlx5_2 becomes mlx5_1) and a positional numbering
// would shift every later rail. A slot is the HCA's PCI path (root complex,
// ports, device); the port GUID finds a card that moved to another slot.
type RailMap struct {
	Rails []RailSlot `json:"rails"`
}

// RailSlot is one rail's HCA as last seen.
type RailSlot struct {
	Rail int `json:"rail"`
	// PCIPath is the HCA's sysfs path below the root,
	// "devices/pci0000:10/…/0000:13:00.0".
	PCIPath string `json:"pciPath"`
	// PortGUID is the GUID of the HCA's published port ("" if unknown).
	PortGUID string `json:"portGUID,omitempty"`
	// IBDevice is the kernel's name when last seen (informational).
	IBDevice string `json:"ibDevice,omitempty"`
}

// numberRails gives every NIC its rail and returns the map to remember.
//
// Without a previous map, rails come from the PCI topology when it pairs
// HCAs with GPUs (pairedRails): an InfiniBand HCA's rail is the index, in
// PCI bus id order, of the GPU behind its PCIe switch, so a missing HCA
// leaves the others on their rails even at the first discovery. Otherwise
// rails are positional: InfiniBand HCAs (see isInfiniBand) first, then the
// others (RoCE/Ethernet), each group by PCI bus id, numbered 0, 1, …; nodes
// of one hardware model get the same rail for the same slot, which is what
// rail-optimized fabrics cable.
//
// With a previous map, in this order: an HCA in a remembered slot (same PCI
// path) keeps that slot's rail; an HCA with a remembered port GUID in a new
// slot (the card moved) keeps its rail; the others take, in positional
// order, the lowest rails the map does not hold. The returned map keeps the
// slots of missing HCAs, so their rails are never given away.
func numberRails(nics []NIC, prev *RailMap, gpuPaths []string) *RailMap {
	order := make([]int, len(nics))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int {
		ia, ib := isInfiniBand(nics[a]), isInfiniBand(nics[b])
		if ia != ib {
			if ia {
				return -1
			}
			return 1
		}
		return strings.Compare(nics[a].PCI.BusID, nics[b].PCI.BusID)
	})
	taken := map[int]bool{}
	var next RailMap
	if prev != nil {
		byPath, byGUID := map[string]RailSlot{}, map[string]RailSlot{}
		for _, s := range prev.Rails {
			taken[s.Rail] = true
			byPath[s.PCIPath] = s
			if s.PortGUID != "" {
				byGUID[s.PortGUID] = s
			}
		}
		assigned := map[int]bool{}
		for _, i := range order {
			n := &nics[i]
			s, ok := byPath[n.PCI.Path]
			if !ok || n.PCI.Path == "" {
				s, ok = byGUID[n.PortGUID]
				ok = ok && n.PortGUID != ""
			}
			if ok && !assigned[s.Rail] {
				n.Rail, assigned[s.Rail] = s.Rail, true
			}
		}
		for _, s := range prev.Rails {
			if !assigned[s.Rail] {
				next.Rails = append(next.Rails, s) // missing: keep the slot
			}
		}
	}
	if prev == nil {
		pairedRails(nics, gpuPaths)
	}
	for _, n := range nics {
		if n.Rail != NoRail {
			taken[n.Rail] = true
		}
	}
	free := 0
	for _, i := range order {
		n := &nics[i]
		if n.Rail == NoRail {
			for taken[free] {
				free++
			}
			n.Rail, taken[free] = free, true
		}
		next.Rails = append(next.Rails, RailSlot{Rail: n.Rail, PCIPath: n.PCI.Path, PortGUID: n.PortGUID, IBDevice: n.IBDevice})
	}
	slices.SortFunc(next.Rails, func(a, b RailSlot) int { return a.Rail - b.Rail })
	return &next
}

// pairedRails numbers the InfiniBand HCAs by the GPUs they pair with, when
// every one of them pairs: the HCA and the GPU are each other's only
// nearest (most shared PCI ancestors, at least a root port below the root
// complex), as on DGX/HGX boards where each GPU and its HCA sit behind one
// PCIe switch. A rail is the GPU's index in gpuPaths (PCI bus id order).
// When any IB HCA does not pair, no rail is set and numbering stays
// positional.
func pairedRails(nics []NIC, gpuPaths []string) {
	nearest := func(path string, others []string) (int, int) {
		best, score, ties := -1, -1, 0
		for j, o := range others {
			switch s := sharedPCIAncestors(path, o); {
			case s > score:
				best, score, ties = j, s, 1
			case s == score:
				ties++
			}
		}
		if ties != 1 || score < 2 {
			return -1, score
		}
		return best, score
	}
	var ib []int
	var ibPaths []string
	for i, n := range nics {
		if isInfiniBand(n) {
			ib, ibPaths = append(ib, i), append(ibPaths, n.PCI.Path)
		}
	}
	if len(ib) == 0 || len(ib) > len(gpuPaths) {
		return
	}
	rails := make([]int, len(ib))
	for k, i := range ib {
		g, _ := nearest(nics[i].PCI.Path, gpuPaths)
		if g < 0 {
			return
		}
		if back, _ := nearest(gpuPaths[g], ibPaths); back != k {
			return
		}
		rails[k] = g
	}
	for k, i := range ib {
		nics[i].Rail = rails[k]
	}
}

// LoadRailMap reads a rail map; a missing file is no map (nil, nil). A file
// that is not a valid map (bad JSON, unknown fields, more than 64 rails, a
// rail or slot twice, a rail outside 0..63) is an error: the caller starts
// over with positional rails.
func LoadRailMap(path string) (*RailMap, error) {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read rail map: %w", err)
	}
	defer func() { _ = f.Close() }()
	data, err := io.ReadAll(io.LimitReader(f, 1<<20))
	if err != nil {
		return nil, fmt.Errorf("read rail map: %w", err)
	}
	m, err := decodeRailMap(data)
	if err != nil {
		return nil, fmt.Errorf("rail map %s: %w", path, err)
	}
	return m, nil
}

func decodeRailMap(data []byte) (*RailMap, error) {
	var m RailMap
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&m); err != nil {
		return nil, err
	}
	if len(m.Rails) > maxRailMapEntries {
		return nil, fmt.Errorf("%d rails, more than %d", len(m.Rails), maxRailMapEntries)
	}
	rails, paths := map[int]bool{}, map[string]bool{}
	for _, s := range m.Rails {
		switch {
		case s.Rail < 0 || s.Rail >= maxRailMapEntries:
			return nil, fmt.Errorf("rail %d outside 0..%d", s.Rail, maxRailMapEntries-1)
		case rails[s.Rail]:
			return nil, fmt.Errorf("rail %d twice", s.Rail)
		case s.PCIPath == "" || paths[s.PCIPath]:
			return nil, fmt.Errorf("rail %d: empty or repeated pci path %q", s.Rail, s.PCIPath)
		}
		rails[s.Rail], paths[s.PCIPath] = true, true
	}
	return &m, nil
}

// SaveRailMap writes m durably.
func SaveRailMap(path string, m *RailMap) error {
	data, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return fmt.Errorf("encode rail map: %w", err)
	}
	if err := fsutil.WriteFileAtomic(path, append(data, '\n'), 0o644, true, nil); err != nil {
		return fmt.Errorf("write rail map: %w", err)
	}
	return nil
}
