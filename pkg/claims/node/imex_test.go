package node

import (
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/gpufabric/gpufabric/pkg/claims"
	"github.com/gpufabric/gpufabric/pkg/topology"
)

// TestPrepareWaitsForIMEXDaemon: a claim on a multi-node NVLink channel
// fails with a clear error while the node's IMEX daemon is not ready,
// after a bounded wait, without writing anything; claims of the same batch
// that need no IMEX are prepared; once the daemon is ready the claim is
// prepared.
func TestPrepareWaitsForIMEXDaemon(t *testing.T) {
	e := newEnv(t)
	e.imexReady.Store(false)
	d := e.driver()
	fabric := newClaim("train").gpus("gpus", 0).channel("fabric", testDomain, 1).forPodGroup("pg").obj()
	plain := newClaim("plain").gpus("gpu", 1).forPod("p").obj()
	nvsw := newClaim("nvsw").channel("fabric", topology.NodeDomainID(topology.DomainKindNVSwitch, testNode), 0).obj()

	start := time.Now()
	res := prepare(t, e.ctx, d, fabric, plain)
	took := time.Since(start)
	err := res[fabric.UID].Err
	if !errors.Is(err, claims.ErrIMEXNotReady) ||
		!containsAll(err.Error(), "prepare claim default/train", "channel-1", "imex daemon not ready after 200ms", "last answer: NOT_READY") {
		t.Fatalf("fabric claim error = %v, want ErrIMEXNotReady naming claim, channel and the daemon's answer", err)
	}
	if took > 5*time.Second {
		t.Errorf("prepare took %v, the wait is bounded by 200ms", took)
	}
	if res[plain.UID].Err != nil {
		t.Errorf("claim without a channel failed: %v", res[plain.UID].Err)
	}
	if e.specExists(fabric.UID) || e.loadCheckpoint().Claims[fabric.UID] != nil {
		t.Error("the failed claim left a spec or a checkpoint entry")
	}
	if v := metricValue(t, d.metrics.prepareErrors.WithLabelValues("imex")); v != 1 {
		t.Errorf("prepare errors with reason imex = %v, want 1", v)
	}

	// A channel of an NVSwitch domain needs no daemon (the driver here
	// refuses it as a channel of another domain, without asking).
	asked := e.imexAsked.Load()
	res = prepare(t, e.ctx, d, nvsw)
	if e.imexAsked.Load() != asked || !errors.Is(res[nvsw.UID].Err, claims.ErrWrongDomain) {
		t.Errorf("nvswitch channel: daemon asked %d more times, error %v; want no ask and ErrWrongDomain", e.imexAsked.Load()-asked, res[nvsw.UID].Err)
	}

	e.imexReady.Store(true)
	mustPrepare(t, e.ctx, d, fabric)
	data := readFile(t, e.specPath(fabric.UID))
	if !containsAll(data, `"path": "/dev/nvidia-caps-imex-channels/channel1"`, `"major": 511`, `"NCCL_MNNVL_ENABLE=1"`, `"GPUFABRIC_IMEX_CHANNEL=1"`) {
		t.Errorf("spec lacks the IMEX channel device or its variables:\n%s", data)
	}
}

// TestIMEXWaitHoldsNoLock: while one prepare waits for the IMEX daemon,
// other claims are prepared and unprepared at once.
func TestIMEXWaitHoldsNoLock(t *testing.T) {
	e := newEnv(t)
	e.imexReady.Store(false)
	d := e.driver(func(c *Config) {
		x := e.imex()
		x.ReadyTimeout = 3 * time.Second
		c.Channels = claims.FabricChannelResolver{LocalDomainID: testDomain, IMEX: x}
	})
	waiting := make(chan error, 1)
	go func() {
		r, err := d.PrepareResourceClaims(e.ctx, []*resourceapi.ResourceClaim{newClaim("train").channel("fabric", testDomain, 2).obj()})
		if err == nil {
			err = r["uid-train"].Err
		}
		waiting <- err
	}()
	for e.imexAsked.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	start := time.Now()
	other := newClaim("other").gpus("gpu", 3).obj()
	mustPrepare(t, e.ctx, d, other)
	if errs := unprepare(t, e.ctx, d, other); errs[other.UID] != nil {
		t.Fatal(errs[other.UID])
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("prepare and unprepare took %v while another prepare waited for the daemon", took)
	}
	e.imexReady.Store(true)
	if err := <-waiting; err != nil {
		t.Errorf("waiting claim: %v, want prepared once the daemon is ready", err)
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(data))
}
