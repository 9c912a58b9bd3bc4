package grouping

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/gpufabric/gpufabric/pkg/gang/vocab"
	"github.com/gpufabric/gpufabric/pkg/topology"
)

// Workload annotations: what a gang looks like. They are read from the
// workload (and its parent: a TrainJob, a RayJob) and, for JobSets, from a
// replicated job's Job template, which wins for that replicated job.
const (
	// AnnotationMinCount: the pods of a gang that must be placed together
	// (1 to its size); default: all of them.
	AnnotationMinCount = "gpufabric.dev/min-count"
	// AnnotationTopologyKey: the level every member must share (the
	// PodGroup's schedulingConstraints.topology[0].key), e.g.
	// gpufabric.dev/nvlinkDomain or a rack label. Default: none, the
	// smallest level that fits.
	AnnotationTopologyKey = "gpufabric.dev/topology-key"
	// AnnotationGroupClaims: comma-separated names of pod claims (in the
	// pod template's spec.resourceClaims) the group shares: they become the
	// PodGroup's resourceClaims (at most 4), e.g. a fabric-domain channel.
	AnnotationGroupClaims = "gpufabric.dev/group-claims"
	// AnnotationDisruptionMode: Single (default) or All (the PodGroup's
	// disruptionMode: a lost member restarts the whole gang).
	AnnotationDisruptionMode = "gpufabric.dev/disruption-mode"
)

// Bounds of a plan: what one commit record holds (docs/design/podgroup-
// semantics.md, "Gang size"), and groups per workload.
const (
	MaxGangSize = 10000
	MaxGroups   = 512
)

// passThrough are PodGroup annotations the scheduler reads; a workload's
// are validated here and copied to its PodGroups as they are.
var passThrough = []string{
	topology.AnnotationPreferredTopologyKey, topology.AnnotationRailAlignment, topology.AnnotationTopologySpread,
	topology.AnnotationSegmentSize, topology.AnnotationSegmentTopologyKey,
	vocab.AnnotationOnMemberLoss, vocab.AnnotationReplacementTimeout,
}

// options are a gang's settings read from annotations.
type options struct {
	minCount      int32
	topologyKey   string
	claims        []string
	disruptionAll bool
	segmentSize   int
	segmentKey    string
	// annotations are the pass-through ones.
	annotations map[string]string
}

// readOptions reads layers of annotations; a later layer wins key by key.
// where names the object in problems ("JobSet", "replicated job workers").
func readOptions(where string, layers ...map[string]string) (options, []Problem) {
	merged := map[string]string{}
	for _, l := range layers {
		for k, v := range l {
			if strings.HasPrefix(k, topology.DriverName+"/") {
				merged[k] = v
			}
		}
	}
	var o options
	var problems []Problem
	bad := func(key, format string, args ...any) {
		problems = append(problems, Problem{Annotation: key, Message: fmt.Sprintf("%s: annotation %s: %s", where, key, fmt.Sprintf(format, args...))})
	}
	if v, ok := merged[AnnotationMinCount]; ok {
		n, err := strconv.ParseInt(v, 10, 32)
		if err != nil || n < 1 || n > MaxGangSize {
			bad(AnnotationMinCount, "value %s is not a whole number from 1 to %d", quote(v), MaxGangSize)
		}
		o.minCount = int32(n)
	}
	if v, ok := merged[AnnotationTopologyKey]; ok {
		if msgs := validation.IsQualifiedName(v); len(msgs) > 0 {
			bad(AnnotationTopologyKey, "value %s is not a label key or attribute name: %s", quote(v), strings.Join(msgs, "; "))
		}
		o.topologyKey = v
	}
	if v, ok := merged[AnnotationGroupClaims]; ok {
		o.claims = readClaims(v, func(f string, a ...any) { bad(AnnotationGroupClaims, f, a...) })
	}
	if v, ok := merged[AnnotationDisruptionMode]; ok {
		switch v {
		case "Single":
		case "All":
			o.disruptionAll = true
		default:
			bad(AnnotationDisruptionMode, "value %s is not one of \"Single\", \"All\"", quote(v))
		}
	}
	o.annotations = map[string]string{}
	for _, k := range passThrough {
		if v, ok := merged[k]; ok {
			o.annotations[k] = v
		}
	}
	if err := checkPassThrough(o.annotations); err != nil {
		problems = append(problems, Problem{Annotation: err.key, Message: where + ": " + err.msg})
	}
	size, key, err := topology.ParseSegments(o.annotations)
	if err == nil {
		o.segmentSize, o.segmentKey = size, key
	}
	if key != "" && key == o.topologyKey {
		bad(topology.AnnotationSegmentTopologyKey, "the segments' level %s is the gang's own topology key: segments need a level below it", quote(key))
	}
	return o, problems
}

func readClaims(v string, bad func(string, ...any)) []string {
	var out []string
	for _, c := range strings.Split(v, ",") {
		c = strings.TrimSpace(c)
		switch {
		case len(validation.IsDNS1123Label(c)) > 0:
			bad("%s is not a pod claim name", quote(c))
			return nil
		case slices.Contains(out, c):
			bad("claim %s is named twice", quote(c))
			return nil
		}
		out = append(out, c)
	}
	if len(out) > 4 {
		bad("%d claims: a PodGroup shares at most 4", len(out))
		return nil
	}
	return out
}

type annotationError struct{ key, msg string }

// checkPassThrough validates the scheduler's PodGroup annotations as the
// scheduler will (pkg/topology's parsers; the replace room's values).
func checkPassThrough(a map[string]string) *annotationError {
	if v, ok := a[topology.AnnotationPreferredTopologyKey]; ok {
		if _, err := topology.ParsePreferredTopologyKey(v); err != nil {
			return &annotationError{topology.AnnotationPreferredTopologyKey, err.Error()}
		}
	}
	if v, ok := a[topology.AnnotationRailAlignment]; ok {
		if _, err := topology.ParseRailAlignment(v); err != nil {
			return &annotationError{topology.AnnotationRailAlignment, err.Error()}
		}
	}
	if v, ok := a[topology.AnnotationTopologySpread]; ok {
		if _, err := topology.ParseTopologySpread(v); err != nil {
			return &annotationError{topology.AnnotationTopologySpread, err.Error()}
		}
	}
	if _, _, err := topology.ParseSegments(a); err != nil {
		key := topology.AnnotationSegmentSize
		if strings.Contains(err.Error(), "annotation "+topology.AnnotationSegmentTopologyKey+":") {
			key = topology.AnnotationSegmentTopologyKey
		}
		return &annotationError{key, err.Error()}
	}
	if v, ok := a[vocab.AnnotationOnMemberLoss]; ok && !slices.Contains([]string{vocab.PolicyWait, vocab.PolicyRestart, vocab.PolicyFail}, v) {
		return &annotationError{vocab.AnnotationOnMemberLoss, fmt.Sprintf("annotation %s: value %s is not one of %q, %q, %q",
			vocab.AnnotationOnMemberLoss, quote(v), vocab.PolicyWait, vocab.PolicyRestart, vocab.PolicyFail)}
	}
	if v, ok := a[vocab.AnnotationReplacementTimeout]; ok {
		if d, err := time.ParseDuration(v); err != nil || d < 0 || d > time.Hour {
			return &annotationError{vocab.AnnotationReplacementTimeout, fmt.Sprintf("annotation %s: value %s is not a duration from 0s to 1h",
				vocab.AnnotationReplacementTimeout, quote(v))}
		}
	}
	return nil
}

// gang builds a leaf group of size pods from templates (the pod templates
// its pods come from) and options, and says what is wrong with it.
func gang(name, template, role string, size int32, o options, templates []*corev1.PodTemplateSpec) (Group, []Problem) {
	g := Group{Name: name, Template: template, Role: role, Size: size, MinCount: size,
		TopologyKey: o.topologyKey, DisruptionAll: o.disruptionAll, Annotations: maps.Clone(o.annotations)}
	var problems []Problem
	bad := func(key, format string, args ...any) {
		problems = append(problems, Problem{Annotation: key, Message: fmt.Sprintf("%s: %s", role, fmt.Sprintf(format, args...))})
	}
	switch {
	case size > MaxGangSize:
		bad("", "%d pods: gpufabric places gangs of at most %d", size, MaxGangSize)
	case o.minCount > size:
		bad(AnnotationMinCount, "annotation %s: %d is more than the %d pods of the gang", AnnotationMinCount, o.minCount, size)
	case o.minCount > 0:
		g.MinCount = o.minCount
	}
	if o.segmentSize > 0 && size%int32(o.segmentSize) != 0 {
		bad(topology.AnnotationSegmentSize, "annotation %s: %d pods are not a whole number of segments of %d (a partial segment would wait for ever)",
			topology.AnnotationSegmentSize, size, o.segmentSize)
	}
	classes := map[string]bool{}
	for _, t := range templates {
		classes[t.Spec.PriorityClassName] = true
	}
	if len(classes) > 1 {
		bad("", "its pod templates have different priorityClassNames %s: one gang has one priority", quote(strings.Join(slices.Sorted(maps.Keys(classes)), ", ")))
	} else if len(templates) > 0 {
		g.PriorityClassName = templates[0].Spec.PriorityClassName
	}
	claims, p := groupClaims(role, o.claims, templates)
	g.Claims = claims
	return g, append(problems, p...)
}

// quote quotes a value a tenant wrote, cut to 64 bytes (whole UTF-8
// sequences): it ends up in events and conditions.
func quote(s string) string {
	if len(s) > 64 {
		cut := 61
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		s = s[:cut] + "..."
	}
	return strconv.Quote(s)
}
