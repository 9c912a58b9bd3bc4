package framework

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"k8s.io/apimachinery/pkg/util/wait"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"

	"github.com/gpufabric/gpufabric/pkg/topology"
)

// RegistrationSocket is the plugin's registration socket in registrarDir
// (without --pod-uid; with it, see kubeletplugin.RollingUpdateRegistrarSocketFile).
func RegistrationSocket(registrarDir string) string {
	return filepath.Join(registrarDir, topology.DriverName+"-reg.sock")
}

// RegistrationInfo does what the kubelet's plugin watcher does with a new
// registration socket: GetInfo, retried until the socket answers (up to
// 30 s or ctx). The answer names the plugin's DRA endpoint.
func RegistrationInfo(ctx context.Context, regSock string) (*registerapi.PluginInfo, error) {
	var info *registerapi.PluginInfo
	var last error
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		conn, err := grpc.NewClient("unix://"+regSock, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			last = err
			return false, nil
		}
		defer conn.Close()
		info, last = registerapi.NewRegistrationClient(conn).GetInfo(ctx, &registerapi.InfoRequest{})
		return last == nil, nil
	})
	if err != nil {
		return nil, fmt.Errorf("registration GetInfo on %s: %w (last error: %v)", regSock, err, last)
	}
	return info, nil
}
