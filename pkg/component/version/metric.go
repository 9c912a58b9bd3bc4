package version

import (
	"fmt"
	"regexp"

	"github.com/prometheus/client_golang/prometheus"
)

var componentName = regexp.MustCompile(`^[a-z][a-z0-9_]*$`)

// Register adds gpufabric_<component>_build_info to reg: a gauge at 1 with
// labels version, commit and go_version, as Kubernetes components expose
// kubernetes_build_info. component is the metric subsystem of the binary
// ("scheduler", "kubelet_plugin").
func Register(reg prometheus.Registerer, component string, info Info) error {
	if !componentName.MatchString(component) {
		return fmt.Errorf("build info metric: component %q is not a metric name part", component)
	}
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: "gpufabric",
		Subsystem: component,
		Name:      "build_info",
		Help:      "Always 1; its labels say which build runs: version, commit and the Go version that built it.",
		ConstLabels: prometheus.Labels{
			"version": info.Version, "commit": info.Commit, "go_version": info.GoVersion,
		},
	})
	g.Set(1)
	if err := reg.Register(g); err != nil {
		return fmt.Errorf("register build info metric: %w", err)
	}
	return nil
}
