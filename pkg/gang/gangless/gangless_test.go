package gangless

import (
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

func pod(labels, annotations map[string]string) *v1.Pod {
	return &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", Labels: labels, Annotations: annotations}}
}

// TestOf: each gang API and controller is named with its value and the
// fix; gang APIs win over controllers; a pod with a PodGroup, a plain pod
// and an Indexed Job's index 0 get no hint; a long value is cut.
func TestOf(t *testing.T) {
	cases := []struct {
		name       string
		pod        *v1.Pod
		wantSource string
		wantIn     string
	}{
		{"scheduler-plugins", pod(map[string]string{"scheduling.x-k8s.io/pod-group": "pg1"}, nil), "scheduler-plugins", `names scheduler-plugins PodGroup "pg1"`},
		{"volcano", pod(nil, map[string]string{"scheduling.k8s.io/group-name": "vc"}), "Volcano", `names Volcano PodGroup "vc"`},
		{"kai", pod(nil, map[string]string{"pod-group-name": "k"}), "KAI", `KAI pod group "k"`},
		{"kueue", pod(map[string]string{"kueue.x-k8s.io/pod-group-name": "q"}, nil), "Kueue", `Kueue pod group "q"`},
		{"jobset", pod(map[string]string{"jobset.sigs.k8s.io/jobset-name": "js", "batch.kubernetes.io/job-completion-index": "0"}, nil), "JobSet", `belongs to JobSet "js"`},
		{"lws", pod(map[string]string{"leaderworkerset.sigs.k8s.io/name": "l"}, nil), "LeaderWorkerSet", `LeaderWorkerSet "l"`},
		{"ray", pod(map[string]string{"ray.io/cluster": "rc"}, nil), "KubeRay", `RayCluster "rc"`},
		{"kubeflow", pod(map[string]string{"training.kubeflow.org/job-name": "pt"}, nil), "Kubeflow", `training job "pt"`},
		{"indexed job", pod(map[string]string{"batch.kubernetes.io/job-completion-index": "3"}, nil), "Indexed Job", `completion index "3"`},
		{"gang API wins", pod(map[string]string{"jobset.sigs.k8s.io/jobset-name": "js"}, map[string]string{"scheduling.k8s.io/group-name": "vc"}), "Volcano", "Volcano"},
		{"index 0 alone", pod(map[string]string{"batch.kubernetes.io/job-completion-index": "0"}, nil), "", ""},
		{"plain", pod(map[string]string{"app": "x"}, nil), "", ""},
		{"long value cut", pod(map[string]string{"ray.io/cluster": strings.Repeat("x", 100000)}, nil), "KubeRay", `xxx..."`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h, ok := Of(tc.pod)
			if ok != (tc.wantSource != "") || h.Source != tc.wantSource {
				t.Fatalf("Of = %+v, %v; want source %q", h, ok, tc.wantSource)
			}
			if !ok {
				return
			}
			if !strings.Contains(h.Message, tc.wantIn) || !strings.Contains(h.Message, "spec.schedulingGroup.podGroupName") || len(h.Message) > 1024 {
				t.Errorf("message %q (%d bytes): want %q and the fix, at most 1 KiB", h.Message, len(h.Message), tc.wantIn)
			}
		})
	}
	grouped := pod(map[string]string{"jobset.sigs.k8s.io/jobset-name": "js"}, nil)
	grouped.Spec.SchedulingGroup = &v1.PodSchedulingGroup{PodGroupName: ptr.To("g")}
	if h, ok := Of(grouped); ok {
		t.Errorf("a pod with a PodGroup got %+v", h)
	}
}
