package placement

import (
	"errors"
	"fmt"

	v1 "k8s.io/api/core/v1"
)

// ErrUnsupported marks a pod that uses a scheduling feature the engine does
// not model: such a gang is refused with the field named, never placed as
// if the field were not there.
var ErrUnsupported = errors.New("not supported by gpufabric-scheduler")

// CheckPodAntiAffinity counts nodes refused by required pod anti-affinity
// (the member's terms, or an existing pod's terms against the member).
const CheckPodAntiAffinity = "pod anti-affinity"

// CheckVolumeAffinity counts nodes outside a bound volume's node affinity.
const CheckVolumeAffinity = "volume node affinity conflict"

// Unsupported lists the fields of a pod the engine does not model and does
// not ignore: required pod affinity, required anti-affinity terms with a
// namespace selector or match/mismatch label keys, hard topology spread
// constraints, and host ports. Preferred (soft) terms are ignored, as a
// scheduler may. Pure.
func Unsupported(p *v1.Pod) []string {
	var out []string
	if a := p.Spec.Affinity; a != nil {
		if pa := a.PodAffinity; pa != nil && len(pa.RequiredDuringSchedulingIgnoredDuringExecution) > 0 {
			out = append(out, "spec.affinity.podAffinity.requiredDuringSchedulingIgnoredDuringExecution")
		}
		if pa := a.PodAntiAffinity; pa != nil {
			for i, t := range pa.RequiredDuringSchedulingIgnoredDuringExecution {
				f := fmt.Sprintf("spec.affinity.podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution[%d]", i)
				if t.NamespaceSelector != nil && (len(t.NamespaceSelector.MatchLabels) > 0 || len(t.NamespaceSelector.MatchExpressions) > 0) {
					out = append(out, f+".namespaceSelector")
				}
				if len(t.MatchLabelKeys) > 0 || len(t.MismatchLabelKeys) > 0 {
					out = append(out, f+".matchLabelKeys/mismatchLabelKeys")
				}
			}
		}
	}
	for i, c := range p.Spec.TopologySpreadConstraints {
		if c.WhenUnsatisfiable == v1.DoNotSchedule {
			out = append(out, fmt.Sprintf("spec.topologySpreadConstraints[%d] (whenUnsatisfiable: DoNotSchedule)", i))
		}
	}
	for _, set := range []struct {
		field      string
		containers []v1.Container
	}{{"containers", p.Spec.Containers}, {"initContainers", p.Spec.InitContainers}} {
		for i, c := range set.containers {
			for j, port := range c.Ports {
				if port.HostPort != 0 {
					out = append(out, fmt.Sprintf("spec.%s[%d].ports[%d].hostPort", set.field, i, j))
				}
			}
		}
	}
	return out
}
