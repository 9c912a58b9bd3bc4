package devices

import (
	"context"
	"strings"

	"k8s.io/klog/v2"
)

// assignRails gives each GPU the rail and IB device of its nearest HCA.
// Rules: candidates are the InfiniBand HCAs, or all HCAs when the node has
// no InfiniBand one; nearest means most shared PCI ancestors (same PCIe
// switch first, then same root port, then same root complex), then same
// NUMA node, then the lowest rail. A GPU whose PCI path is unknown, or a
// node without HCAs, gets NoRail. Port state does not matter: the rail is
// cabling, health is the NIC's taint.
func assignRails(ctx context.Context, gpus []GPU, nics []NIC) {
	logger := klog.FromContext(ctx)
	candidates := railCandidates(nics)
	for i := range gpus {
		g := &gpus[i]
		if g.PCI.Path == "" || len(candidates) == 0 {
			continue
		}
		best, bestScore := -1, -1
		for j, n := range candidates {
			score := 2 * sharedPCIAncestors(g.PCI.Path, n.PCI.Path)
			if sameNUMA(g.PCI.NUMANode, n.PCI.NUMANode) {
				score++
			}
			if score > bestScore || score == bestScore && n.Rail < candidates[best].Rail {
				best, bestScore = j, score
			}
		}
		g.IBRail, g.IBDevice = candidates[best].Rail, candidates[best].IBDevice
		logger.V(4).Info("Nearest HCA", "gpu", g.Name, "ibDevice", g.IBDevice, "rail", g.IBRail, "score", bestScore)
	}
}

func railCandidates(nics []NIC) []NIC {
	var ib []NIC
	for _, n := range nics {
		if isInfiniBand(n) {
			ib = append(ib, n)
		}
	}
	if len(ib) == 0 {
		return nics
	}
	return ib
}

func sameNUMA(a, b *int) bool {
	return a != nil && b != nil && *a == *b
}

// isInfiniBand reports whether an HCA's port runs InfiniBand: its link layer
// says so, or, when the link layer is unknown, its PCI class is 0x0207xx
// (a ConnectX in IB mode).
func isInfiniBand(n NIC) bool {
	if n.LinkLayer != "" {
		return n.LinkLayer == linkLayerIB
	}
	return strings.HasPrefix(n.PCIClass, "0x0207")
}
