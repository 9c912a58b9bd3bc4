// Package chart tests the Helm chart (deployments/helm/gpufabric): lint and
// template of each values profile, the values schema, the kind quickstart
// and its example manifests, the chart's RBAC and admission policies on a
// real kube-apiserver (each identity may do what it needs and is denied the
// rest), and the Grafana dashboard's metrics as the real processes expose
// them. The operable_* files test what operators rely on: helm install and
// uninstall on a real apiserver (install-time checks, nothing left after
// uninstall), the GitOps values, probes and monitoring objects, and the
// components' health endpoints, versions, logs and metrics as processes.
package chart
