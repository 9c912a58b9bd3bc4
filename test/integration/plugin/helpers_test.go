package plugin

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	drahealthv1 "k8s.io/kubelet/pkg/apis/dra-health/v1"
	drapb "k8s.io/kubelet/pkg/apis/dra/v1"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"

	"github.com/gpufabric/gpufabric/pkg/topology"
	"github.com/gpufabric/gpufabric/test/integration/framework"
)

// nodeSlices returns the node-local slices of gpufabric.dev for node.
func nodeSlices(ctx context.Context, c kubernetes.Interface, node string) ([]resourceapi.ResourceSlice, error) {
	list, err := c.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{
		FieldSelector: resourceapi.ResourceSliceSelectorNodeName + "=" + node + "," + resourceapi.ResourceSliceSelectorDriver + "=" + topology.DriverName,
	})
	if err != nil {
		return nil, err
	}
	return list.Items, nil
}

// waitSlices polls until cond holds for node's slices, returning them.
func waitSlices(t *testing.T, c kubernetes.Interface, node string, cond func([]resourceapi.ResourceSlice) bool) []resourceapi.ResourceSlice {
	t.Helper()
	var got []resourceapi.ResourceSlice
	err := wait.PollUntilContextTimeout(t.Context(), 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		var err error
		got, err = nodeSlices(ctx, c, node)
		return err == nil && cond(got), nil
	})
	if err != nil {
		t.Fatalf("slices of %s did not reach the expected state: %v (have %d slices)", node, err, len(got))
	}
	return got
}

// devicesOf flattens slices into devices by name.
func devicesOf(slices []resourceapi.ResourceSlice) map[string]resourceapi.Device {
	out := map[string]resourceapi.Device{}
	for _, s := range slices {
		for _, d := range s.Spec.Devices {
			out[d.Name] = d
		}
	}
	return out
}

// kubeletClients connects to the plugin's sockets as the kubelet does:
// GetInfo on the registration socket names the DRA endpoint.
func kubeletClients(t *testing.T, p *framework.Plugin) drapb.DRAPluginClient {
	t.Helper()
	return kubeletClientsAt(t, framework.RegistrationSocket(p.RegistrarDir()))
}

// kubeletClientsAt is kubeletClients for a given registration socket (a
// plugin started with --pod-uid names its socket after the UID).
func kubeletClientsAt(t *testing.T, regSock string) drapb.DRAPluginClient {
	t.Helper()
	return drapb.NewDRAPluginClient(kubeletConn(t, regSock))
}

// healthClient connects to the plugin's device health service, as the
// kubelet does after registration.
func healthClient(t *testing.T, p *framework.Plugin) drahealthv1.DRAResourceHealthClient {
	t.Helper()
	return drahealthv1.NewDRAResourceHealthClient(kubeletConn(t, framework.RegistrationSocket(p.RegistrarDir())))
}

// kubeletConn finds the plugin's DRA endpoint through its registration
// socket (GetInfo) and connects to it. The connection lives as long as t.
func kubeletConn(t *testing.T, regSock string) *grpc.ClientConn {
	t.Helper()
	info, err := framework.RegistrationInfo(t.Context(), regSock)
	if err != nil {
		t.Fatal(err)
	}
	if info.Type != registerapi.DRAPlugin || info.Name != topology.DriverName {
		t.Fatalf("registration info: got type %q name %q", info.Type, info.Name)
	}
	conn, err := grpc.NewClient("unix://"+info.Endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatalf("connect to %s: %v", info.Endpoint, err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}
