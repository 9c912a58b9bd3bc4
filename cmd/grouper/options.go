package main

import (
	"errors"
	"flag"
	"fmt"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/gpufabric/gpufabric/pkg/component/envflag"
	"github.com/gpufabric/gpufabric/pkg/workloads/grouper"
)

// options are the command-line settings.
type options struct {
	kubeconfig     string
	composite      bool
	jobGrace       time.Duration
	workers        int
	apiQPS         float64
	apiBurst       int
	leaderElect    bool
	leNamespace    string
	leName         string
	leIdentity     string
	metricsAddress string
	certFile       string
	keyFile        string
}

// envTwins maps flags to their environment variables.
var envTwins = map[string]string{
	"kubeconfig":              "KUBECONFIG",
	"composite-groups":        "GPUFABRIC_COMPOSITE_GROUPS",
	"job-controller-grace":    "GPUFABRIC_JOB_CONTROLLER_GRACE",
	"workers":                 "GPUFABRIC_GROUPER_WORKERS",
	"kube-api-qps":            "GPUFABRIC_KUBE_API_QPS",
	"kube-api-burst":          "GPUFABRIC_KUBE_API_BURST",
	"leader-elect":            "GPUFABRIC_LEADER_ELECT",
	"leader-elect-namespace":  "GPUFABRIC_LEADER_ELECT_NAMESPACE",
	"leader-elect-lease-name": "GPUFABRIC_LEADER_ELECT_LEASE_NAME",
	"leader-elect-identity":   "GPUFABRIC_LEADER_ELECT_IDENTITY",
	"metrics-address":         "GPUFABRIC_METRICS_ADDRESS",
	"tls-cert-file":           "GPUFABRIC_TLS_CERT_FILE",
	"tls-private-key-file":    "GPUFABRIC_TLS_PRIVATE_KEY_FILE",
	"v":                       "GPUFABRIC_V",
	"logging-format":          "GPUFABRIC_LOGGING_FORMAT",
}

func bindFlags(fs *flag.FlagSet) *options {
	o := &options{}
	fs.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig file; empty: in-cluster config")
	fs.BoolVar(&o.composite, "composite-groups", false, "materialize workloads of several roles (a JobSet's replicated jobs, a RayCluster's head and worker groups) as a CompositePodGroup over one PodGroup per role (scheduling.k8s.io/v1alpha3, when served; gpufabric-scheduler places them with --composite-pod-groups); off: one PodGroup per gang. Must match the chart's admission policy (grouper.compositeGroups)")
	fs.DurationVar(&o.jobGrace, "job-controller-grace", 5*time.Second, "a new root Indexed Job is left this long to the Job controller, which groups it itself when the WorkloadWithJob gate is on; without a Workload of the Job controller's after it, the grouper groups it")
	fs.IntVar(&o.workers, "workers", 2, "workloads reconciled in parallel")
	fs.Float64Var(&o.apiQPS, "kube-api-qps", 20, "client-side rate limit of API requests per second")
	fs.IntVar(&o.apiBurst, "kube-api-burst", 50, "client-side burst of API requests")
	fs.BoolVar(&o.leaderElect, "leader-elect", true, "run only while holding the Lease")
	fs.StringVar(&o.leNamespace, "leader-elect-namespace", "kube-system", "namespace of the Lease")
	fs.StringVar(&o.leName, "leader-elect-lease-name", grouper.Name, "name of the Lease")
	fs.StringVar(&o.leIdentity, "leader-elect-identity", "", "identity in the Lease; default: hostname")
	fs.StringVar(&o.metricsAddress, "metrics-address", ":8080", "address of /metrics and the health endpoints /livez and /readyz (HTTPS; /metrics needs a token RBAC allows); empty disables them")
	fs.StringVar(&o.certFile, "tls-cert-file", "", "PEM certificate the metrics port serves; empty: self-signed")
	fs.StringVar(&o.keyFile, "tls-private-key-file", "", "PEM private key of --tls-cert-file")
	return o
}

func (o *options) validate() error {
	switch {
	case o.workers < 1 || o.workers > 64:
		return fmt.Errorf("--workers must be 1..64, got %d", o.workers)
	case o.jobGrace < 0 || o.jobGrace > 10*time.Minute:
		return fmt.Errorf("--job-controller-grace must be 0s..10m, got %s", o.jobGrace)
	case o.apiQPS <= 0 || o.apiBurst < 1:
		return fmt.Errorf("--kube-api-qps and --kube-api-burst must be positive, got %g and %d", o.apiQPS, o.apiBurst)
	case (o.certFile == "") != (o.keyFile == ""):
		return errors.New("--tls-cert-file and --tls-private-key-file go together")
	}
	return nil
}

// applyEnv sets every flag not given on the command line from its
// environment twin (envTwins).
func applyEnv(fs *flag.FlagSet, lookup func(string) (string, bool)) error {
	return envflag.Apply(fs, envTwins, lookup)
}

func (o *options) restConfig() (*rest.Config, error) {
	if o.kubeconfig == "" {
		return rest.InClusterConfig()
	}
	return clientcmd.BuildConfigFromFlags("", o.kubeconfig)
}
