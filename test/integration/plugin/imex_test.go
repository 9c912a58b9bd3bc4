package plugin

import (
	"os"
	"strings"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpufabric/gpufabric/pkg/topology"
	"github.com/gpufabric/gpufabric/test/integration/framework"
	"github.com/gpufabric/gpufabric/test/integration/itest"
)

// TestPluginIMEXChannels prepares multi-node NVLink channels through the
// plugin's real sockets: while the node's IMEX daemon is not ready the
// claim fails with a clear error after the bounded wait; once it is ready
// the claim gets IMEX channel n as a character device of the driver's
// major (the runtime creates it) and NCCL_MNNVL_ENABLE; with
// --imex-channels=off (IMEX left to ComputeDomain) it gets neither.
func TestPluginIMEXChannels(t *testing.T) {
	const nodeName = "gb200-r1-n01"
	_, admin, kubeconfig := itest.PluginEnv(t, nodeName)
	p := framework.NewPlugin(t, kubeconfig, itest.GB200Fabric, nodeName)
	p.ExtraArgs = []string{"--imex-ready-timeout=1s"}
	base, err := os.ReadFile(p.Fabric)
	itest.Must(t, "read fabric", err)
	framework.WriteFile(t, p.Fabric, string(base)+"faults:\n- node: "+nodeName+"\n  imex: {daemon: NotReady}\n")
	p.Start()
	devs := devicesOf(waitSlices(t, admin, nodeName, func(s []resourceapi.ResourceSlice) bool { return len(devicesOf(s)) == 8 }))
	domain := *devs["gpu-0"].Attributes[topology.AttrNVLinkDomain].StringValue
	dra := kubeletClients(t, p)
	pg, err := admin.SchedulingV1beta1().PodGroups(metav1.NamespaceDefault).Create(t.Context(), itest.PodGroup(metav1.NamespaceDefault, "train", 2, "train-fabric"), metav1.CreateOptions{})
	itest.Must(t, "create pod group", err)
	claim := allocated(t, admin, "train-fabric", map[string][]string{"fabric": {topology.FabricDomainPoolName(domain) + "/channel-5"}}, itest.ReservedForPodGroup(pg))

	start := time.Now()
	got := prepare(t, dra, claim)[string(claim.UID)]
	if took := time.Since(start); !strings.Contains(got.Error, "imex daemon not ready after 1s (last answer: NOT_READY)") || took > 10*time.Second {
		t.Fatalf("prepare while the daemon is not ready: error %q after %v, want the daemon's answer after about 1s", got.Error, took)
	}
	if _, err := os.Stat(cdiSpecPath(p, claim.UID)); !os.IsNotExist(err) {
		t.Errorf("a CDI spec was written for the failed claim (err %v)", err)
	}

	// The daemon becomes ready (the mock's state follows the fabric file
	// within the plugin's 1s health interval); the kubelet retries.
	framework.WriteFile(t, p.Fabric, string(base))
	for deadline := time.Now().Add(30 * time.Second); ; {
		got = prepare(t, dra, claim)[string(claim.UID)]
		if got.Error == "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("prepare once the daemon is ready: %s", got.Error)
		}
	}
	spec := readSpec(t, p, claim)
	for _, want := range []string{`"path": "/dev/nvidia-caps-imex-channels/channel5"`, `"type": "c"`, `"major": 511`, `"minor": 5`, "NCCL_MNNVL_ENABLE=1", "GPUFABRIC_IMEX_CHANNEL=5"} {
		if !strings.Contains(spec, want) {
			t.Errorf("CDI spec lacks %s:\n%s", want, spec)
		}
	}
	unprepare(t, dra, claim)

	t.Run("imex left to another component", func(t *testing.T) {
		p.Stop()
		p.ExtraArgs = []string{"--imex-channels=off"}
		p.Start()
		dra := kubeletClients(t, p)
		if r := prepare(t, dra, claim)[string(claim.UID)]; r.Error != "" {
			t.Fatalf("prepare: %s", r.Error)
		}
		spec := readSpec(t, p, claim)
		if strings.Contains(spec, "imex-channels") || strings.Contains(spec, "NCCL_MNNVL_ENABLE") || !strings.Contains(spec, "GPUFABRIC_FABRIC_DOMAIN="+domain) {
			t.Errorf("with --imex-channels=off the spec must carry the domain but no IMEX channel and no NCCL_MNNVL_ENABLE:\n%s", spec)
		}
	})
}

func readSpec(t *testing.T, p *framework.Plugin, c *resourceapi.ResourceClaim) string {
	t.Helper()
	data, err := os.ReadFile(cdiSpecPath(p, c.UID))
	itest.Must(t, "read CDI spec of "+c.Name, err)
	return string(data)
}
