package topology

import (
	"fmt"
	"slices"
	"strings"

	v1 "k8s.io/api/core/v1"
)

// Admin-owned topology labels (docs/topology-labels.md). A node's
// ResourceSlices and most of its labels are written with the node's own
// credentials, so a compromised node could declare itself part of any
// NVLink domain or rack. Labels under AdminLabelPrefix are the admin's:
// the NodeRestriction admission plugin forbids kubelets to add, change or
// remove them.
const (
	// AdminLabelPrefix is the label prefix kubelets may not set
	// (k8s.io/api/core/v1.LabelNamespaceNodeRestriction).
	AdminLabelPrefix = v1.LabelNamespaceNodeRestriction + "/"
	// LabelAdminNVLinkDomain is the admin's word on a node's NVLink domain:
	// the nvlinkDomain its GPUs must publish. A node whose GPUs publish
	// another is refused for placement.
	LabelAdminNVLinkDomain = AdminLabelPrefix + "gpufabric.nvlink-domain"
	// LabelAdminRack and LabelAdminIBLeaf are the suggested admin-owned
	// keys of the levels above the NVLink domain (--topology-levels).
	LabelAdminRack   = AdminLabelPrefix + "gpufabric.rack"
	LabelAdminIBLeaf = AdminLabelPrefix + "gpufabric.ib-leaf"
)

// NodeRefusal is a node left out of every domain of the fabric tree
// because what its slices declare cannot be trusted.
type NodeRefusal struct {
	Node string
	// Declared are the nvlinkDomain values its GPUs publish, sorted.
	Declared []string
	// Admin is its LabelAdminNVLinkDomain label, "" when it has none.
	Admin string
	// Reason says why, in one line naming the node, the domains and the
	// label.
	Reason string
}

// CheckNodeDomain decides whether the NVLink domains a node's GPUs
// declare (info, from its slices) can be trusted, given its labels:
//   - a node-scoped domain (NodeDomainID) names its node: only that node
//     may declare it;
//   - with the admin label, every declared domain must be the label's
//     value;
//   - without it, with requireAdmin, the node may declare only its own
//     node-scoped domains (an HGX node needs no label; a multi-node NVLink
//     domain must be confirmed by the admin).
//
// It returns nil when the node is trusted. Pure.
func CheckNodeDomain(node string, labels map[string]string, info NodeGPUInfo, requireAdmin bool) *NodeRefusal {
	admin, hasAdmin := labels[LabelAdminNVLinkDomain]
	r := &NodeRefusal{Node: node, Declared: slices.Clone(info.Domains), Admin: admin}
	for _, d := range info.Domains {
		switch own, scoped := nodeScoped(d, node); {
		case scoped && !own:
			r.Reason = fmt.Sprintf("node %s publishes GPUs in NVLink domain %s, which belongs to another node", node, d)
		case hasAdmin && d != admin:
			r.Reason = fmt.Sprintf("node %s publishes GPUs in NVLink domain %s, but its label %s says %q", node, strings.Join(info.Domains, ", "), LabelAdminNVLinkDomain, admin)
		case !hasAdmin && requireAdmin && !own:
			r.Reason = fmt.Sprintf("node %s publishes GPUs in multi-node NVLink domain %s without the label %s, which --require-admin-topology-labels requires", node, d, LabelAdminNVLinkDomain)
		default:
			continue
		}
		return r
	}
	return nil
}

// nodeScoped reports whether domain is a node-scoped id, and whether it
// is node's own.
func nodeScoped(domain, node string) (own, scoped bool) {
	for _, k := range []DomainKind{DomainKindNVSwitch, DomainKindNone} {
		if domain == NodeDomainID(k, node) {
			return true, true
		}
		if strings.HasPrefix(domain, string(k)+".") {
			scoped = true
		}
	}
	return false, scoped
}

// AdminOwnedLevels checks that every label level is under
// AdminLabelPrefix (what --require-admin-topology-labels asks of
// --topology-levels).
func AdminOwnedLevels(levels []string) error {
	for _, l := range levels {
		if !strings.HasPrefix(l, AdminLabelPrefix) {
			return fmt.Errorf("topology level %q is a label kubelets can set: use one under %s, e.g. %s", l, AdminLabelPrefix, LabelAdminRack)
		}
	}
	return nil
}
