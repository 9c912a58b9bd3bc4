// Package extres serves a pod's extended resources backed by DRA
// (KEP-5004: `nvidia.com/gpu: 8` in an unchanged pod, served by the
// DeviceClass whose spec.extendedResourceName says nvidia.com/gpu, or by
// class X for deviceclass.resource.kubernetes.io/X) the way
// gpufabric-scheduler places everything else: through a ResourceClaim.
// The loop (pkg/gang/scheduler) calls Claims.Attach on every gang it
// builds, before it places it; Attach gives each such member its special
// claim, with the shape kube-scheduler 1.37 gives it (name, generateName,
// annotation, owner, requests: claim.go), and its extended.Resources
// (pkg/gang/placement/extended),
// which the engine and the commit room read: the engine allocates the
// claim on the member's node like any claim of the pod's and does not
// count the resources against the node's allocatable; the commit room
// allocates it, reserves it for the pod, and writes the pod's
// status.extendedResourceClaimStatus before it binds the pod.
//
// Files: classes.go (Classes: which DeviceClass backs which name),
// requests.go (Request, RequestOf: the claim's requests and the pod's
// mappings), claim.go (the claim's name and shape, IsFor, Status),
// room.go (Claims, Attach, and its writes).
//
// Rules:
//   - The claim is created when the pod is first tried (kube-scheduler
//     creates it in PreBind), so that the engine, the commit records,
//     recovery and the assume cache handle it as any existing claim; it
//     is named from the pod's UID, so a retry finds it, and
//     kube-controller-manager deletes it with the pod (owner reference)
//     and releases it when the pod ends.
//   - Nothing a tenant writes is trusted: a claim of that name that is not
//     the pod's is never used, changed or deleted; a pod asking for more
//     than one claim holds is refused before anything is written.
//   - Every write passes the gate; the room never imports the loop.
//
// See docs/design/extended-resources.md.
package extres
