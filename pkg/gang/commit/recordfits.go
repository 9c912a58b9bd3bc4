package commit

import (
	"fmt"

	"k8s.io/apimachinery/pkg/types"

	"github.com/gpufabric/gpufabric/pkg/gang/placement"
)

// MaxRecordTotalBytes bounds a commit record's JSON over all its parts.
const MaxRecordTotalBytes = MaxRecordChunks * MaxRecordBytes

// RecordFits says why no commit of gang g (a PodGroup's) could be
// recorded, nil when every one can: more than MaxRecordPods members, more
// than MaxRecordClaims claims, or names so long that the record could
// take more than MaxRecordTotalBytes. The error wraps
// placement.ErrUnsupported: the loop refuses the gang with it before
// placing it, instead of placing it and failing its commit at every
// backoff.
func RecordFits(g *placement.Gang) error {
	if err := fits(len(g.Members), gangClaims(g), recordBound(g)); err != nil {
		return fmt.Errorf("podgroup %s: %w: %w", g.Key(), err, placement.ErrUnsupported)
	}
	return nil
}

// RecordFitsTree is RecordFits for a tree: why no commit of the gangs of
// its leaf PodGroups under root (BeginTree) could be recorded, nil when
// every one can: more than MaxRecordGroups leaves, more than MaxRecordPods
// members or MaxRecordClaims claims in all, or a record that could take
// more than MaxRecordTotalBytes. The error wraps placement.ErrUnsupported.
func RecordFitsTree(root Root, gangs []*placement.Gang) error {
	var members, claims int
	for _, g := range gangs {
		members += len(g.Members)
		claims += gangClaims(g)
	}
	var err error
	if len(gangs) > MaxRecordGroups {
		err = fmt.Errorf("%d leaf podgroups, more than the %d a commit record holds", len(gangs), MaxRecordGroups)
	} else {
		err = fits(members, claims, treeBound(gangs))
	}
	if err != nil {
		return fmt.Errorf("%s: %w: %w", root, err, placement.ErrUnsupported)
	}
	return nil
}

// fits says why a record of members pods and claims claims, bound bytes
// at most, could not be written.
func fits(members, claims, bound int) error {
	switch {
	case members > MaxRecordPods:
		return fmt.Errorf("%d members, more than the %d a commit record holds", members, MaxRecordPods)
	case claims > MaxRecordClaims:
		return fmt.Errorf("%d claims, more than the %d a commit record holds", claims, MaxRecordClaims)
	case bound > MaxRecordTotalBytes:
		return fmt.Errorf("its commit record could take %d bytes (%d members, %d claims), more than the %d it may", bound, members, claims, MaxRecordTotalBytes)
	}
	return nil
}

// gangClaims counts the claims of g: its shared claims and each member's.
func gangClaims(g *placement.Gang) int {
	n := len(g.SharedClaims)
	for _, m := range g.Members {
		n += len(m.Claims)
	}
	return n
}

// Bounds of a record's JSON, in bytes. A byte that JSON may escape
// counts 6.
const (
	boundHeader = 256                 // keys, braces, version
	boundText   = 6 * MaxRecordText   // domain or key, escaped
	boundGroup  = 6 * (63 + 253 + 36) // namespace, name, uid
	// boundLeaf is one group of a tree's record (its names, domain and
	// key); boundGroupRef a group index and its key on a pod or claim.
	boundLeaf     = 64 + boundGroup + 2*boundText
	boundGroupRef = 12
)

// recordBound is an upper bound of the JSON of any commit record of g:
// every member placed, on a node of its own with the longest name, every
// claim allocated, and each shared claim reserved for every member (a
// claim several members name counts once per member, which is more than
// its one entry naming them all).
func recordBound(g *placement.Gang) int {
	return boundHeader + 2*boundText + boundGroup + gangBound(g)
}

// treeBound is recordBound for a tree's record of gangs: the root, each
// leaf's group, and each member and claim with its group index (a claim
// several leaves use counts once per leaf, which is more than its one
// entry).
func treeBound(gangs []*placement.Gang) int {
	n := boundHeader + 64 + boundGroup
	for _, g := range gangs {
		n += boundLeaf + gangBound(g) + boundGroupRef*(len(g.Members)+gangClaims(g))
	}
	return n
}

// gangBound bounds the nodes, pods and claims of g in a record.
func gangBound(g *placement.Gang) int {
	const (
		nodeName = 253 + 3     // a DNS subdomain, quoted, comma
		pod      = 24 + 7      // keys and quotes; index and comma
		claim    = 32 + 40 + 7 // fingerprint; keys and quotes; comma
		ref      = 6           // a pod index and its comma
	)
	n := 0
	claimBytes := func(name string, uid types.UID, refs int) int {
		return claim + jsonLen(name) + jsonLen(string(uid)) + refs*ref
	}
	for _, c := range g.SharedClaims {
		n += claimBytes(c.Name, c.UID, len(g.Members))
	}
	for _, m := range g.Members {
		n += nodeName + pod + jsonLen(m.Pod.Name) + jsonLen(string(m.Pod.UID))
		for _, c := range m.Claims {
			n += claimBytes(c.Name, c.UID, 1)
		}
	}
	return n
}

// jsonLen bounds the length of s in JSON: a byte that may be escaped
// counts 6.
func jsonLen(s string) int {
	n := len(s)
	for i := 0; i < len(s); i++ {
		if b := s[i]; b < 0x20 || b >= 0x7f || b == '"' || b == '\\' || b == '<' || b == '>' || b == '&' {
			n += 5
		}
	}
	return n
}
