package grouping

import (
	"fmt"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpufabric/gpufabric/pkg/workloads/grouping"
	"github.com/gpufabric/gpufabric/test/integration/framework"
	"github.com/gpufabric/gpufabric/test/integration/itest"
)

// BenchmarkPodCreate measures what the pod-group policy adds to a pod's
// creation on kube-apiserver v1.37.1: pods of a JobSet's labels created
// one after the other (dry run: nothing stored), without the policy, then
// with it. Not part of make test; numbers in docs/benchmarks.md.
func BenchmarkPodCreate(b *testing.B) {
	cp := framework.StartT(b, framework.Options{})
	admin := cp.AdminClient(b)
	ctx := b.Context()
	itest.Must(b, "namespace", framework.EnsureNamespace(ctx, admin, "bench"))
	itest.Must(b, "service account", framework.EnsureServiceAccount(ctx, admin, "bench"))
	pod := policyPod("bench", "p", policyCase{labels: map[string]string{grouping.LabelJobSetName: "train", grouping.LabelReplicatedJobName: "workers",
		grouping.LabelJobName: "train-workers-0", grouping.LabelJobCompletionIndex: "3"}})
	create := func(b *testing.B, want bool) {
		for i := 0; b.Loop(); i++ {
			p := pod.DeepCopy()
			p.Name = fmt.Sprint("p-", i)
			got, err := admin.CoreV1().Pods("bench").Create(ctx, p, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			if err != nil || (got.Spec.SchedulingGroup != nil) != want {
				b.Fatalf("create: %v, group %+v", err, got.Spec.SchedulingGroup)
			}
		}
	}
	b.Run("without policy", func(b *testing.B) { create(b, false) })
	b.Run("with policy", func(b *testing.B) {
		const name = "pod-groups"
		if _, err := admin.AdmissionregistrationV1().MutatingAdmissionPolicies().Get(ctx, name, metav1.GetOptions{}); err != nil {
			_, err := admin.AdmissionregistrationV1().MutatingAdmissionPolicies().Create(ctx, &admissionregistrationv1.MutatingAdmissionPolicy{
				ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: grouping.PodGroupPolicy(grouping.ModeFlat)}, metav1.CreateOptions{})
			itest.Must(b, "create policy", err)
			_, err = admin.AdmissionregistrationV1().MutatingAdmissionPolicyBindings().Create(ctx, &admissionregistrationv1.MutatingAdmissionPolicyBinding{
				ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: admissionregistrationv1.MutatingAdmissionPolicyBindingSpec{PolicyName: name}}, metav1.CreateOptions{})
			itest.Must(b, "bind policy", err)
		}
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
			got, err := admin.CoreV1().Pods("bench").Create(ctx, pod, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			if err == nil && got.Spec.SchedulingGroup != nil {
				break
			}
			if time.Now().After(deadline) {
				b.Fatalf("policy does not act: %v", err)
			}
		}
		create(b, true)
	})
}
