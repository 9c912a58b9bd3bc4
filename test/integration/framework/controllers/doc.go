// Package controllers runs the workload controllers users put in front of
// gpufabric — the JobSet controller, the LeaderWorkerSet controller, the
// Kubeflow Trainer v2 controller manager and the KubeRay operator — as
// processes of a framework.ControlPlane, built from the Go module proxy by
// hack/build-workload-controllers.sh (versions and why: docs/workload-controllers.md).
// It follows the framework's Kueue integration (framework.StartKueue); it
// is a package of its own to keep the framework's size in bounds.
//
// Rules:
//   - Nothing runs in a pod. Each controller's CRDs and webhook
//     configurations come from the module source its binary was built
//     from, with the patches its default install applies to them; every
//     webhook points at https://127.0.0.1:<free port><its path> with the
//     control plane's CA as caBundle, and the controller serves it with a
//     certificate that CA issued for 127.0.0.1. The controllers' own
//     certificate management is off (nothing to rotate in a test).
//   - Leader election is off; health and metrics listen on free loopback
//     ports; each controller's log is <state dir>/<name>.log and its PID is
//     recorded like every component's, so framework.StartT's failure dump
//     and stale-process cleanup cover it.
//   - The controllers run with the admin kubeconfig: their least privilege
//     is their installs' business, not what the tests check.
//   - Start returns when every controller is ready: its CRDs established,
//     its readiness probe passing and, where it serves webhooks, its webhook
//     port completing a TLS handshake the apiserver would accept.
//
// Files:
//   - controllers.go: the controllers, Start, the binaries' folder.
//   - specs.go: each controller's configuration (flags, config file).
//   - install.go: CRDs and webhook configurations from the module source.
package controllers
