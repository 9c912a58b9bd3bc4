package scheduler

import (
	"context"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"

	"github.com/gpufabric/gpufabric/pkg/gang/scheduler"
	"github.com/gpufabric/gpufabric/test/integration/framework"
	"github.com/gpufabric/gpufabric/test/integration/itest"
)

// The scheduler of the scheduler tests, run in the test process.

// runningScheduler is a Scheduler running in the test process.
type runningScheduler struct {
	cancel context.CancelFunc
	done   chan struct{}
	err    error
}

// startScheduler runs a Scheduler with the shipped RBAC rules' client until
// stop (or the test's end). cfg.Client is set here.
func startScheduler(t *testing.T, client kubernetes.Interface, cfg scheduler.Config) *runningScheduler {
	t.Helper()
	logger := ktesting.NewLogger(t, ktesting.NewConfig(ktesting.Verbosity(2)))
	ctx, cancel := context.WithCancel(klog.NewContext(t.Context(), logger))
	cfg.Client = client
	if cfg.RecordNamespace == "" {
		cfg.RecordNamespace = itest.RecordNamespace
	}
	if cfg.InitialBackoff == 0 {
		cfg.InitialBackoff, cfg.MaxBackoff = 200*time.Millisecond, 2*time.Second
	}
	s, err := scheduler.New(cfg)
	itest.Must(t, "create scheduler", err)
	rs := &runningScheduler{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(rs.done)
		rs.err = s.Run(ctx)
	}()
	t.Cleanup(rs.stop)
	return rs
}

// stop cancels the scheduler and waits for it.
func (rs *runningScheduler) stop() {
	rs.cancel()
	<-rs.done
}

// schedulerClient returns a client with exactly the shipped scheduler rules
// (the namespaced ones in itest.RecordNamespace).
func schedulerClient(t *testing.T, cp *framework.ControlPlane, user string) kubernetes.Interface {
	t.Helper()
	itest.Must(t, "grant scheduler rules", framework.GrantSchedulerRules(t.Context(), cp.AdminClient(t), user, itest.RecordNamespace))
	cfg, err := cp.UserConfig(user)
	itest.Must(t, "user config", err)
	c, err := kubernetes.NewForConfig(cfg)
	itest.Must(t, "client for "+user, err)
	return c
}
