package grouping

import (
	"fmt"
	"strings"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/gpufabric/gpufabric/pkg/topology"
)

// dnsSubdomainRE is validation.IsDNS1123Subdomain's expression, anchored,
// as a CEL string literal (RE2 in both).
const dnsSubdomainRE = `'^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$'`

// PodGroupPolicy is the MutatingAdmissionPolicy that names a new pod's
// group: generated from PodRules(mode), so the admission policy and
// GroupOfPod never disagree (tested on the real apiserver). It matches
// pods being created with schedulerName gpufabric-scheduler and no
// schedulingGroup, that did not opt out, and sets
// spec.schedulingGroup.podGroupName when a rule gives a valid name. It
// never changes a pod that names a group already (the Job controller's,
// the user's).
func PodGroupPolicy(mode Mode) admissionregistrationv1.MutatingAdmissionPolicySpec {
	return admissionregistrationv1.MutatingAdmissionPolicySpec{
		MatchConstraints: podCreate(),
		MatchConditions: []admissionregistrationv1.MatchCondition{
			{Name: "gpufabric-scheduler", Expression: fmt.Sprintf("object.spec.schedulerName == '%s'", topology.SchedulerName)},
			{Name: "no-scheduling-group", Expression: "!has(object.spec.schedulingGroup) || !has(object.spec.schedulingGroup.podGroupName)"},
			{Name: "not-opted-out", Expression: fmt.Sprintf("!(%s && %s == 'false')", present(Source{Key: AnnotationGang, Annotation: true}, false), val(Source{Key: AnnotationGang, Annotation: true}))},
		},
		Variables: []admissionregistrationv1.Variable{
			{Name: "group", Expression: groupExpression(PodRules(mode))},
			{Name: "valid", Expression: "size(variables.group) > 0 && size(variables.group) <= 253 && variables.group.matches(" + dnsSubdomainRE + ")"},
		},
		Mutations: []admissionregistrationv1.Mutation{{
			PatchType: admissionregistrationv1.PatchTypeJSONPatch,
			JSONPatch: &admissionregistrationv1.JSONPatch{Expression: "variables.valid ? [JSONPatch{op: 'add', path: '/spec/schedulingGroup', value: Object.spec.schedulingGroup{podGroupName: variables.group}}] : []"},
		}},
		FailurePolicy:      ptr.To(admissionregistrationv1.Fail),
		ReinvocationPolicy: admissionregistrationv1.IfNeededReinvocationPolicy,
	}
}

// DefaultSchedulerPolicy sets schedulerName gpufabric-scheduler on pods
// created with the default scheduler; the chart binds it to the
// namespaces labelled for gpufabric (the namespace default), so workloads
// whose pod templates the user does not write (a TrainJob's) need no
// change.
func DefaultSchedulerPolicy() admissionregistrationv1.MutatingAdmissionPolicySpec {
	return admissionregistrationv1.MutatingAdmissionPolicySpec{
		MatchConstraints: podCreate(),
		MatchConditions: []admissionregistrationv1.MatchCondition{
			{Name: "default-scheduler", Expression: "!has(object.spec.schedulerName) || object.spec.schedulerName == '' || object.spec.schedulerName == 'default-scheduler'"},
		},
		Mutations: []admissionregistrationv1.Mutation{{
			PatchType: admissionregistrationv1.PatchTypeJSONPatch,
			JSONPatch: &admissionregistrationv1.JSONPatch{Expression: fmt.Sprintf("[JSONPatch{op: 'add', path: '/spec/schedulerName', value: '%s'}]", topology.SchedulerName)},
		}},
		FailurePolicy:      ptr.To(admissionregistrationv1.Fail),
		ReinvocationPolicy: admissionregistrationv1.NeverReinvocationPolicy,
	}
}

func podCreate() *admissionregistrationv1.MatchResources {
	return &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
		RuleWithOperations: admissionregistrationv1.RuleWithOperations{
			Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
			Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"}},
		},
	}}}
}

// groupExpression is the CEL of GroupOfPod's rule loop: the first rule
// whose first part (and Require) the pod carries gives the name, "" when
// another of its parts is missing; no rule: "".
func groupExpression(rules []PodRule) string {
	expr := "''"
	for i := len(rules) - 1; i >= 0; i-- {
		r := rules[i]
		applies := present(r.Parts[0], true)
		if r.Require != "" {
			applies += " && " + present(Source{Key: r.Require}, false)
		}
		name := fmt.Sprintf("'%s.'", r.Prefix)
		var rest []string
		for j, s := range r.Parts {
			if j > 0 {
				name += " + '.'"
				rest = append(rest, present(s, true))
			}
			name += " + " + val(s)
		}
		then := name
		if len(rest) > 0 {
			then = fmt.Sprintf("(%s) ? %s : ''", strings.Join(rest, " && "), name)
		}
		expr = fmt.Sprintf("(%s) ? (%s) : (%s)", applies, then, expr)
	}
	return expr
}

// present is CEL for "the pod carries s" (non-empty when nonEmpty).
func present(s Source, nonEmpty bool) string {
	m := metaMap(s)
	e := fmt.Sprintf("has(%s) && '%s' in %s", m, s.Key, m)
	if nonEmpty {
		e += fmt.Sprintf(" && %s != ''", val(s))
	}
	return e
}

func val(s Source) string { return fmt.Sprintf("%s['%s']", metaMap(s), s.Key) }

func metaMap(s Source) string {
	if s.Annotation {
		return "object.metadata.annotations"
	}
	return "object.metadata.labels"
}

// chartHeader starts the generated chart files.
const chartHeader = "# Generated from pkg/workloads/grouping (PodRules, PodGroupPolicy): do not edit.\n" +
	"# Regenerate: go test ./pkg/workloads/grouping -run TestChartPolicyFiles -update\n"

// ChartPolicyFile is the spec of a policy as the chart includes it.
func ChartPolicyFile(spec admissionregistrationv1.MutatingAdmissionPolicySpec) ([]byte, error) {
	out, err := yaml.Marshal(spec)
	if err != nil {
		return nil, fmt.Errorf("marshal policy: %w", err)
	}
	return append([]byte(chartHeader), out...), nil
}
