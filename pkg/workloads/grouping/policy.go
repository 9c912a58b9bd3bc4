package grouping

import (
	"fmt"
	"strings"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/gpufabric/gpufabric/pkg/topology"
)

// dnsSubdomainRE is validation.IsDNS1123Subdomain's expression, anchored,
// as a CEL string literal (RE2 in both).
const dnsSubdomainRE = `'^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$'`

// LabelNamespaceDefault = "true" on a namespace makes gpufabric-scheduler
// its pods' default: PodGroupPolicy sets schedulerName gpufabric-scheduler
// on its pods created with the default scheduler, so workloads whose pod
// templates the user does not write (a TrainJob's) need no change.
const LabelNamespaceDefault = "gpufabric.dev/default-scheduler"

// PodGroupPolicy is the MutatingAdmissionPolicy that names a new pod's
// group: generated from PodRules(mode), so the admission policy and
// GroupOfPod never disagree (tested on the real apiserver). On pods being
// created it
//  1. sets schedulerName gpufabric-scheduler when the pod names the
//     default scheduler and its namespace has LabelNamespaceDefault=true;
//  2. then, for a pod of gpufabric-scheduler without schedulingGroup that
//     did not opt out, sets spec.schedulingGroup.podGroupName when a rule
//     gives a valid name.
//
// It never changes a pod that names a group already (the Job
// controller's, the user's). One policy, two mutations in order: a policy
// that a match condition skipped is not reinvoked after another policy
// changed the pod (kube-apiserver 1.37's dispatcher), so the scheduler
// default cannot be a policy of its own. Match conditions see no
// namespaceObject, so the namespace is read in the mutations.
//
// Reinvocation IfNeeded: mutating webhooks run after policies, and
// LeaderWorkerSet's pod webhook writes the group index the name needs; the
// policy runs again once a webhook changed the pod.
//
// Failure policy Ignore: the policy sees every pod of the default
// scheduler; an error must never stop a cluster's pods. A pod it could
// not group is placed without a gang and told so (PlacedWithoutGang).
func PodGroupPolicy(mode Mode) admissionregistrationv1.MutatingAdmissionPolicySpec {
	nsDefault := fmt.Sprintf("has(namespaceObject.metadata) && has(namespaceObject.metadata.labels) && '%s' in namespaceObject.metadata.labels && namespaceObject.metadata.labels['%s'] == 'true'",
		LabelNamespaceDefault, LabelNamespaceDefault)
	ours := fmt.Sprintf("object.spec.schedulerName == '%s'", topology.SchedulerName)
	return admissionregistrationv1.MutatingAdmissionPolicySpec{
		MatchConstraints: podCreate(),
		MatchConditions: []admissionregistrationv1.MatchCondition{
			{Name: "gpufabric-or-default-scheduler", Expression: fmt.Sprintf("%s || object.spec.schedulerName == '%s'", ours, corev1.DefaultSchedulerName)},
		},
		Variables: []admissionregistrationv1.Variable{
			{Name: "group", Expression: groupExpression(PodRules(mode))},
			{Name: "valid", Expression: "size(variables.group) > 0 && size(variables.group) <= 253 && variables.group.matches(" + dnsSubdomainRE + ")"},
			{Name: "optedOut", Expression: fmt.Sprintf("%s && %s == 'false'", present(Source{Key: AnnotationGang, Annotation: true}, false), val(Source{Key: AnnotationGang, Annotation: true}))},
			{Name: "namespaceDefault", Expression: nsDefault},
		},
		Mutations: []admissionregistrationv1.Mutation{
			{PatchType: admissionregistrationv1.PatchTypeJSONPatch, JSONPatch: &admissionregistrationv1.JSONPatch{Expression: fmt.Sprintf(
				"variables.namespaceDefault && object.spec.schedulerName == '%s' ? [JSONPatch{op: 'replace', path: '/spec/schedulerName', value: '%s'}] : []",
				corev1.DefaultSchedulerName, topology.SchedulerName)}},
			{PatchType: admissionregistrationv1.PatchTypeJSONPatch, JSONPatch: &admissionregistrationv1.JSONPatch{Expression: ours +
				" && !has(object.spec.schedulingGroup) && !variables.optedOut && variables.valid ? [JSONPatch{op: 'add', path: '/spec/schedulingGroup', value: Object.spec.schedulingGroup{podGroupName: variables.group}}] : []"}},
		},
		FailurePolicy:      ptr.To(admissionregistrationv1.Ignore),
		ReinvocationPolicy: admissionregistrationv1.IfNeededReinvocationPolicy,
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
