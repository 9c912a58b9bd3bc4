package extres

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

// running is a Scheduler running in the test process.
type running struct {
	cancel context.CancelFunc
	done   chan struct{}
	err    error
}

// startScheduler runs a Scheduler as client until stop (or the test's
// end), with short backoffs.
func startScheduler(t *testing.T, client kubernetes.Interface, cfg scheduler.Config) *running {
	t.Helper()
	logger := ktesting.NewLogger(t, ktesting.NewConfig(ktesting.Verbosity(2)))
	ctx, cancel := context.WithCancel(klog.NewContext(t.Context(), logger))
	cfg.Client, cfg.RecordNamespace = client, itest.RecordNamespace
	cfg.InitialBackoff, cfg.MaxBackoff = 200*time.Millisecond, 2*time.Second
	s, err := scheduler.New(cfg)
	itest.Must(t, "create scheduler", err)
	r := &running{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(r.done)
		r.err = s.Run(ctx)
	}()
	t.Cleanup(r.stop)
	return r
}

func (r *running) stop() {
	r.cancel()
	<-r.done
}

// schedulerClient is a client with exactly the shipped scheduler rules.
func schedulerClient(t *testing.T, cp *framework.ControlPlane) kubernetes.Interface {
	t.Helper()
	const user = "gpufabric-scheduler"
	itest.Must(t, "grant scheduler rules", framework.GrantSchedulerRules(t.Context(), cp.AdminClient(t), user, itest.RecordNamespace))
	cfg, err := cp.UserConfig(user)
	itest.Must(t, "user config", err)
	c, err := kubernetes.NewForConfig(cfg)
	itest.Must(t, "client for "+user, err)
	return c
}
