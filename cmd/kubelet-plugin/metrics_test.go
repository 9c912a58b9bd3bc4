package main

import (
	"testing"

	"k8s.io/client-go/util/workqueue"

	"github.com/gpufabric/gpufabric/pkg/component/metricstyle"
)

// TestMetricLabelValues walks the process's registry (build info,
// client-go's metrics, the plugin's own) after a workqueue of the slice
// controller's name ran, and finds every label value snake_case but the
// exempt ones (object names, addresses, HTTP methods, versions). The
// driver's metrics are checked by pkg/claims/node's TestMetrics.
func TestMetricLabelValues(t *testing.T) {
	reg, err := newRegistry()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := newPluginMetrics(reg); err != nil {
		t.Fatal(err)
	}
	q := workqueue.NewTypedWithConfig(workqueue.TypedQueueConfig[string]{Name: "node_resource_slices"})
	q.Add("x")
	defer q.ShutDown()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	if bad := metricstyle.Check(families, metricstyle.Exempt); len(bad) > 0 {
		t.Errorf("label values not snake_case: %v", bad)
	}
	kinds := 0
	for _, f := range families {
		if f.GetName() == "gpufabric_kubelet_plugin_gpu_events_total" {
			kinds = len(f.GetMetric())
		}
	}
	if kinds != 8 {
		t.Errorf("gpu_events_total has %d series, want 8 (4 kinds × tainted or not) from the start", kinds)
	}
}
