package plugin

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"

	"github.com/gpufabric/gpufabric/pkg/topology"
	"github.com/gpufabric/gpufabric/test/integration/framework"
	"github.com/gpufabric/gpufabric/test/integration/itest"
)

// TestPluginRollingUpdate runs two plugin instances on one node's
// directories, as a DaemonSet surge update does (--pod-uid): both serve the
// kubelet, they share one view of prepared claims (no double booking across
// instances), and the new one carries on alone when the old one stops.
func TestPluginRollingUpdate(t *testing.T) {
	const nodeName = "gb200-r1-n01"
	_, admin, kubeconfig := itest.PluginEnv(t, nodeName)
	ctx := t.Context()
	old := framework.NewPlugin(t, kubeconfig, itest.GB200Fabric, nodeName)
	old.ExtraArgs = []string{"--pod-uid=uid-old"}
	old.Start()
	waitSlices(t, admin, nodeName, func(s []resourceapi.ResourceSlice) bool { return len(devicesOf(s)) == 8 })
	oldDRA := kubeletClientsAt(t, filepath.Join(old.RegistrarDir(), kubeletplugin.RollingUpdateRegistrarSocketFile(old.RegistrarDir(), topology.DriverName, "uid-old")))

	ports, err := freePort()
	itest.Must(t, "free port", err)
	surge := old.Twin()
	surge.ExtraArgs = []string{"--pod-uid=uid-new", fmt.Sprintf("--metrics-address=127.0.0.1:%d", ports)}
	surge.Start()
	newDRA := kubeletClientsAt(t, filepath.Join(old.RegistrarDir(), kubeletplugin.RollingUpdateRegistrarSocketFile(old.RegistrarDir(), topology.DriverName, "uid-new")))

	pod := resourceapi.ResourceClaimConsumerReference{Resource: "pods", Name: "p", UID: "pod-uid-1"}
	a := allocated(t, admin, "a", map[string][]string{"gpus": {nodeName + "/gpu-0"}}, pod)
	b := allocated(t, admin, "b", map[string][]string{"gpus": {nodeName + "/gpu-0"}}, pod)
	if r := prepare(t, oldDRA, a)[string(a.UID)]; r.Error != "" {
		t.Fatalf("prepare a on the old instance: %s", r.Error)
	}
	if r := prepare(t, newDRA, a)[string(a.UID)]; r.Error != "" {
		t.Errorf("re-prepare a on the new instance (shared state): %s", r.Error)
	}
	if e := prepare(t, newDRA, b)[string(b.UID)].Error; !strings.Contains(e, "gpu-0") {
		t.Errorf("new instance double-booked gpu-0 held through the old one: error %q", e)
	}

	old.Stop()
	if r := unprepare(t, newDRA, a)[string(a.UID)]; r.Error != "" {
		t.Errorf("unprepare on the new instance after the old one stopped: %s", r.Error)
	}
	waitSlices(t, admin, nodeName, func(s []resourceapi.ResourceSlice) bool { return len(devicesOf(s)) == 8 })

	var body []byte
	token := itest.EndpointToken(t, admin, "rolling-prometheus", "/metrics")
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		var code int
		code, body, err = itest.EndpointGet(ctx, fmt.Sprintf("127.0.0.1:%d", ports), "/metrics", token)
		return err == nil && code == http.StatusOK, nil
	})
	itest.Must(t, "get metrics", err)
	for _, want := range []string{"gpufabric_kubelet_plugin_prepare", "gpufabric_kubelet_plugin_unprepare", "gpufabric_kubelet_plugin_prepared_devices"} {
		if !strings.Contains(string(body), want) {
			t.Errorf("metrics lack %s", want)
		}
	}
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
