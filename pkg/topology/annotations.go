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
