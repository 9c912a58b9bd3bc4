package topology

import (
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"

	"k8s.io/apimachinery/pkg/util/validation"
)

// PodGroup annotations read by the scheduler until the API has fields for them.
const (
	// AnnotationPreferredTopologyKey names the topology key (a level of the
	// fabric tree) the gang should be placed in when it fits there. Without
	// a fit the scheduler falls back to the levels above it.
	AnnotationPreferredTopologyKey = DriverName + "/preferred-topology-key"
	// AnnotationRailAlignment is RailAlignmentPreferred (the default) or
	// RailAlignmentRequired: whether every member's GPUs must be on the same
	// set of IB rails.
	AnnotationRailAlignment = DriverName + "/rail-alignment"

	RailAlignmentPreferred = "preferred"
	RailAlignmentRequired  = "required"

	// AnnotationTopologySpread is TopologySpreadPacked (the default) or
	// TopologySpreadBalanced: how a gang that spans several domains of the
	// level below its own is split over them. Both use the fewest such
	// domains; packed fills each in turn, balanced gives each about the
	// same number of members.
	AnnotationTopologySpread = DriverName + "/topology-spread"

	TopologySpreadPacked   = "packed"
	TopologySpreadBalanced = "balanced"

	// AnnotationSegmentSize asks for hard segments: every N consecutive
	// members in rank order (a decimal N, 1 to MaxSegmentSize) must share
	// one domain of the level AnnotationSegmentTopologyKey names, all inside
	// the gang's own domain. The two annotations go together.
	AnnotationSegmentSize = DriverName + "/segment-size"
	// AnnotationSegmentTopologyKey names the segments' level: a topology
	// key as for schedulingConstraints (a level of the fabric tree such as
	// TopologyKeyNVLinkDomain, or a node label key). It must be strictly
	// below the gang's own topology key when the PodGroup has one.
	AnnotationSegmentTopologyKey = DriverName + "/segment-topology-key"

	// AnnotationRailCoupling, on a CompositePodGroup, couples the IB rails
	// of the PodGroups below it whose pods ask for GPUs (the roles of a
	// disaggregated service: prefill rail i talks to decode rail i): every
	// such PodGroup is rail-aligned and all of them use one set of rails.
	// RailCouplingRequired refuses a tree where they cannot;
	// RailCouplingPreferred places it uncoupled then; RailCouplingNone (also
	// the only value a PodGroup may carry) leaves the subtree out of an
	// ancestor's coupling. The nearest annotated ancestor decides.
	AnnotationRailCoupling = DriverName + "/rail-coupling"

	RailCouplingRequired  = "required"
	RailCouplingPreferred = "preferred"
	RailCouplingNone      = "none"

	// MaxSegmentSize bounds AnnotationSegmentSize: more members than the
	// largest NVLink domain (576 GPUs) has GPUs.
	MaxSegmentSize = 1024
)

// ParseTopologySpread validates the value of AnnotationTopologySpread (call
// it only when the annotation is set). The match is exact and
// case-sensitive: TopologySpreadPacked gives false, TopologySpreadBalanced
// true, anything else an error naming the annotation and the allowed
// values.
func ParseTopologySpread(v string) (balanced bool, err error) {
	switch v {
	case TopologySpreadPacked:
		return false, nil
	case TopologySpreadBalanced:
		return true, nil
	}
	return false, fmt.Errorf("annotation %s: value %s is not one of %q, %q",
		AnnotationTopologySpread, quoteValue(v), TopologySpreadPacked, TopologySpreadBalanced)
}

// ParseRailAlignment validates the value of AnnotationRailAlignment (call it
// only when the annotation is set). The match is exact and case-sensitive:
// RailAlignmentPreferred gives false, RailAlignmentRequired true, anything
// else (also "" and "Required") an error naming the annotation and the
// allowed values.
func ParseRailAlignment(v string) (required bool, err error) {
	switch v {
	case RailAlignmentPreferred:
		return false, nil
	case RailAlignmentRequired:
		return true, nil
	}
	return false, fmt.Errorf("annotation %s: value %s is not one of %q, %q",
		AnnotationRailAlignment, quoteValue(v), RailAlignmentPreferred, RailAlignmentRequired)
}

// ParseRailCoupling validates the value of AnnotationRailCoupling (call it
// only when the annotation is set): RailCouplingRequired,
// RailCouplingPreferred or RailCouplingNone, matched exactly; anything
// else (also "") is an error naming the annotation and the allowed values.
func ParseRailCoupling(v string) (string, error) {
	switch v {
	case RailCouplingRequired, RailCouplingPreferred, RailCouplingNone:
		return v, nil
	}
	return "", fmt.Errorf("annotation %s: value %s is not one of %q, %q, %q",
		AnnotationRailCoupling, quoteValue(v), RailCouplingRequired, RailCouplingPreferred, RailCouplingNone)
}

// ParsePreferredTopologyKey validates the value of
// AnnotationPreferredTopologyKey (call it only when the annotation is set)
// and returns it unchanged. A topology key is a qualified name, the common
// form of node label keys ("topology.gpufabric.dev/rack", "rack") and
// device attribute names (TopologyKeyNVLinkDomain): an optional DNS
// subdomain prefix of at most 253 characters and "/", then a name of at
// most 63 characters of alphanumerics, '-', '_' and '.' that starts and
// ends alphanumeric. The value is not trimmed or case-folded; "" is an
// error.
func ParsePreferredTopologyKey(v string) (string, error) {
	if msgs := validation.IsQualifiedName(v); len(msgs) > 0 {
		return "", fmt.Errorf("annotation %s: value %s is not a label key or attribute name: %s",
			AnnotationPreferredTopologyKey, quoteValue(v), strings.Join(msgs, "; "))
	}
	return v, nil
}

// ParseSegments reads the segment annotations of a PodGroup: the segment
// size and level, or 0 and "" when neither is set. One without the other,
// a size that is not a decimal number from 1 to MaxSegmentSize (no sign,
// no spaces, no leading zeros), or a level that is not a qualified name
// (as ParsePreferredTopologyKey) is an error that names the annotation
// and quotes at most 64 bytes of the value.
func ParseSegments(annotations map[string]string) (size int, key string, err error) {
	sv, hasSize := annotations[AnnotationSegmentSize]
	kv, hasKey := annotations[AnnotationSegmentTopologyKey]
	switch {
	case !hasSize && !hasKey:
		return 0, "", nil
	case !hasKey:
		return 0, "", fmt.Errorf("annotation %s is set without %s: segments need a level", AnnotationSegmentSize, AnnotationSegmentTopologyKey)
	case !hasSize:
		return 0, "", fmt.Errorf("annotation %s is set without %s: segments need a size", AnnotationSegmentTopologyKey, AnnotationSegmentSize)
	}
	if size, err = ParseSegmentSize(sv); err != nil {
		return 0, "", err
	}
	if msgs := validation.IsQualifiedName(kv); len(msgs) > 0 {
		return 0, "", fmt.Errorf("annotation %s: value %s is not a label key or attribute name: %s",
			AnnotationSegmentTopologyKey, quoteValue(kv), strings.Join(msgs, "; "))
	}
	return size, kv, nil
}

// ParseSegmentSize validates the value of AnnotationSegmentSize: a decimal
// number from 1 to MaxSegmentSize, digits only, without leading zeros.
func ParseSegmentSize(v string) (int, error) {
	ok := v != "" && len(v) <= 4 && v[0] != '0'
	for i := 0; ok && i < len(v); i++ {
		ok = v[i] >= '0' && v[i] <= '9'
	}
	n := 0
	if ok {
		n, _ = strconv.Atoi(v) // at most 4 digits
	}
	if !ok || n < 1 || n > MaxSegmentSize {
		return 0, fmt.Errorf("annotation %s: value %s is not a whole number of members from 1 to %d",
			AnnotationSegmentSize, quoteValue(v), MaxSegmentSize)
	}
	return n, nil
}

// maxQuotedValue bounds an annotation value quoted in a Parse* error: the
// error becomes a refusal message, copied into every waiting member's
// status, and a value may be up to 256 KiB.
const maxQuotedValue = 128

// quoteValue quotes v (as %q does) cut to maxQuotedValue bytes, ending in
// "..." when cut, without splitting a UTF-8 sequence.
func quoteValue(v string) string {
	if len(v) > maxQuotedValue {
		cut := maxQuotedValue - 3
		for cut > 0 && !utf8.RuneStart(v[cut]) {
			cut--
		}
		v = v[:cut] + "..."
	}
	return strconv.Quote(v)
}
