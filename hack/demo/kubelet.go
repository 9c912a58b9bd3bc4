package main

import (
	"context"
	"fmt"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	resourceapi "k8s.io/api/resource/v1"
	drapb "k8s.io/kubelet/pkg/apis/dra/v1"

	"github.com/gpufabric/gpufabric/test/integration/framework"
)

// prepareOnNode does what the kubelet does for a pod's claims: find the
// plugin's DRA endpoint through its registration socket, then call
// NodePrepareResources. Results are keyed by claim UID.
func prepareOnNode(ctx context.Context, registrarDir string, claims []*resourceapi.ResourceClaim) (map[string]*drapb.NodePrepareResourceResponse, error) {
	info, err := framework.RegistrationInfo(ctx, framework.RegistrationSocket(registrarDir))
	if err != nil {
		return nil, err
	}
	conn, err := grpc.NewClient("unix://"+info.Endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %w", info.Endpoint, err)
	}
	defer conn.Close()
	req := &drapb.NodePrepareResourcesRequest{}
	for _, c := range claims {
		req.Claims = append(req.Claims, &drapb.Claim{Namespace: c.Namespace, Name: c.Name, Uid: string(c.UID)})
	}
	resp, err := drapb.NewDRAPluginClient(conn).NodePrepareResources(ctx, req)
	if err != nil {
		return nil, fmt.Errorf("NodePrepareResources: %w", err)
	}
	return resp.Claims, nil
}
