package node

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"

	"github.com/gpufabric/gpufabric/pkg/component/metricstyle"
)

func TestNewDriverConfig(t *testing.T) {
	e := newEnv(t)
	tests := []struct {
		name    string
		mutate  func(*Config)
		wantErr string
	}{
		{name: "ok", mutate: func(*Config) {}},
		{name: "missing fields", mutate: func(c *Config) { c.NodeName, c.CDIRoot, c.Resolver = "", "", nil }, wantErr: "CDIRoot, NodeName, Resolver"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := e.config()
			tc.mutate(&cfg)
			d, err := NewDriver(e.ctx, cfg)
			if d != nil {
				defer func() { _ = d.Close() }()
			}
			if (err != nil) != (tc.wantErr != "") || (err != nil && !strings.Contains(sortFields(err.Error()), tc.wantErr)) {
				t.Errorf("error = %v, want %q", err, tc.wantErr)
			}
		})
	}
}

// sortFields makes "config lacks X, Y" independent of map order.
func sortFields(msg string) string {
	prefix, list, ok := strings.Cut(msg, "lacks ")
	if !ok {
		return msg
	}
	f := strings.Split(list, ", ")
	slices.Sort(f)
	return prefix + "lacks " + strings.Join(f, ", ")
}

func TestBootIDFallback(t *testing.T) {
	e := newEnv(t)
	d := e.driver(func(c *Config) { c.BootIDPath = filepath.Join(t.TempDir(), "missing") })
	if !strings.HasPrefix(d.BootID(), "unknown-") {
		t.Errorf("boot id = %q, want an unknown-… fallback", d.BootID())
	}
	if got := e.driver().BootID(); got != "boot-1" {
		t.Errorf("boot id = %q, want boot-1", got)
	}
}

func TestHandleError(t *testing.T) {
	e := newEnv(t)
	var fatal []error
	d := e.driver(func(c *Config) { c.OnFatalError = func(err error) { fatal = append(fatal, err) } })
	recoverable := fmt.Errorf("publish: %w", kubeletplugin.ErrRecoverable)
	bad := errors.New("dropped fields")
	d.HandleError(e.ctx, recoverable, "publishing")
	d.HandleError(e.ctx, bad, "publishing")
	if diff := cmp.Diff([]error{bad}, fatal, cmpopts.EquateErrors()); diff != "" {
		t.Errorf("fatal errors (-want +got):\n%s", diff)
	}
}

func TestWatchHealthStatus(t *testing.T) {
	e := newEnv(t)
	if err := e.driver().WatchHealthStatus(e.ctx, make(chan kubeletplugin.DeviceHealthReport)); !errors.Is(err, kubeletplugin.ErrHealthNotSupported) {
		t.Errorf("without health updates: %v, want ErrHealthNotSupported", err)
	}
	updates := make(chan kubeletplugin.DeviceHealthReport)
	now := time.Date(2026, 11, 3, 10, 0, 0, 0, time.UTC)
	ctx, cancel := context.WithCancel(e.ctx)
	defer cancel()
	e.ctx = ctx
	d := e.driver(func(c *Config) {
		c.HealthUpdates = updates
		c.HealthResendInterval = 20 * time.Millisecond
		c.Now = func() time.Time { return now }
	})
	reports := make(chan kubeletplugin.DeviceHealthReport)
	done := make(chan error)
	go func() { done <- d.WatchHealthStatus(ctx, reports) }()
	gpu0 := kubeletplugin.DeviceHealth{PoolName: testNode, DeviceName: "gpu-0", Health: kubeletplugin.HealthStatusHealthy, LastUpdated: now}
	gpu1 := kubeletplugin.DeviceHealth{PoolName: testNode, DeviceName: "gpu-1", Health: kubeletplugin.HealthStatusUnhealthy, Message: "XID 79"}
	updates <- kubeletplugin.DeviceHealthReport{Devices: []kubeletplugin.DeviceHealth{gpu0}}
	want := kubeletplugin.DeviceHealthReport{Devices: []kubeletplugin.DeviceHealth{gpu0}}
	if diff := cmp.Diff(want, <-reports); diff != "" {
		t.Errorf("first report (-want +got):\n%s", diff)
	}
	// A partial update is merged; a later report covers all devices.
	updates <- kubeletplugin.DeviceHealthReport{Devices: []kubeletplugin.DeviceHealth{gpu1}}
	gpu1.LastUpdated = now
	want = kubeletplugin.DeviceHealthReport{Devices: []kubeletplugin.DeviceHealth{gpu0, gpu1}}
	got := <-reports
	for len(got.Devices) < 2 { // a resend of the old state may come first
		got = <-reports
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("merged report (-want +got):\n%s", diff)
	}
	// Without changes the state is re-sent within the resend interval.
	select {
	case got := <-reports:
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("resent report (-want +got):\n%s", diff)
		}
	case <-time.After(2 * time.Second):
		t.Error("no resend")
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("WatchHealthStatus returned %v after cancel, want nil", err)
	}
}

func TestMetrics(t *testing.T) {
	e := newEnv(t)
	reg := prometheus.NewRegistry()
	d := e.driver(func(c *Config) { c.Registry = reg })
	a := newClaim("a").gpus("gpus", 0, 1).nics("nics", "mlx5_0").channel("f", testDomain, 1).obj()
	mustPrepare(t, e.ctx, d, a)
	prepare(t, e.ctx, d, newClaim("b").gpus("gpus", 0).obj(), newClaim("c").unallocated().obj())
	checks := []struct {
		name string
		m    prometheus.Metric
		want float64
	}{
		{"prepared claims", d.metrics.preparedClaims, 1},
		{"prepared gpus", d.metrics.preparedDevices.WithLabelValues("gpu"), 2},
		{"prepared nics", d.metrics.preparedDevices.WithLabelValues("nic"), 1},
		{"prepared channels", d.metrics.preparedDevices.WithLabelValues("fabric_domain"), 1},
		{"double booked", d.metrics.prepareErrors.WithLabelValues("double_booked"), 1},
		{"not allocated", d.metrics.prepareErrors.WithLabelValues("not_allocated"), 1},
		{"prepare calls", d.metrics.prepareSeconds, 2},
	}
	for _, c := range checks {
		if got := metricValue(t, c.m); got != c.want {
			t.Errorf("%s = %v, want %v", c.name, got, c.want)
		}
	}
	unprepare(t, e.ctx, d, a)
	if got := metricValue(t, d.metrics.preparedDevices.WithLabelValues("gpu")); got != 0 {
		t.Errorf("prepared gpus after unprepare = %v, want 0", got)
	}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range families {
		names = append(names, f.GetName())
	}
	for _, want := range []string{
		"gpufabric_kubelet_plugin_prepare_duration_seconds", "gpufabric_kubelet_plugin_unprepare_duration_seconds",
		"gpufabric_kubelet_plugin_prepare_errors_total", "gpufabric_kubelet_plugin_prepared_devices",
	} {
		if !strings.Contains(strings.Join(names, " "), want) {
			t.Errorf("registry lacks %s: %v", want, names)
		}
	}
	// One label-value style: snake_case ("fabric_domain", not the device
	// type's "fabric-domain").
	if bad := metricstyle.Check(families, metricstyle.Exempt); len(bad) > 0 {
		t.Errorf("label values not snake_case: %v", bad)
	}
	// The same registry cannot take a second driver's metrics.
	if _, err := NewDriver(e.ctx, func() Config { c := e.config(); c.Registry = reg; return c }()); err == nil {
		t.Error("second registration succeeded")
	}
}
