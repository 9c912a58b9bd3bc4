// Package gangless tells whether a pod gpufabric-scheduler is about to
// place alone (it names no scheduling.k8s.io PodGroup) looks like a member
// of a gang: another gang API names it (scheduler-plugins' or Volcano's
// PodGroup, KAI's or Kueue's pod group), or a multi-pod controller made it
// (JobSet, LeaderWorkerSet, KubeRay, Kubeflow training jobs, an Indexed
// Job past its first index). The scheduler then records a Warning event on
// the pod that says what it saw and what to change, before it places it;
// a pod is never placed alone silently when it looks like part of a gang.
// With gpufabric-grouper and its admission policy (pkg/workloads/grouping)
// such pods name their gang at creation; the hint is for what remains
// ungrouped (the policy not installed, a pod that opted out).
//
// Rules:
//   - Pure: a pod in, a hint out; no client, no clock.
//   - Only labels and annotations the controllers and gang APIs set are
//     read; a value is quoted and cut (report.Quote) in the message, so a
//     tenant's long label costs nothing downstream.
//   - The first rule that matches wins, gang APIs before controllers: the
//     gang API is what the user asked for.
package gangless
