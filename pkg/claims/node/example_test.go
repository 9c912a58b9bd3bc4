package node_test

import (
	"context"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"

	"github.com/gpufabric/gpufabric/pkg/claims"
	"github.com/gpufabric/gpufabric/pkg/claims/node"
)

// ExampleNewDriver shows how cmd/kubelet-plugin wires the driver.
func ExampleNewDriver() {
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	// In cmd/, an adapter over pkg/devices' inventory.
	resolver := claims.DeviceResolverFunc(func(name string) (claims.Edits, error) {
		return claims.Edits{}, fmt.Errorf("%s: %w", name, claims.ErrUnknownDevice)
	})
	health := make(chan kubeletplugin.DeviceHealthReport)
	d, err := node.NewDriver(ctx, node.Config{
		NodeName: "node-a",
		CDIRoot:  "/var/run/cdi",
		StateDir: "/var/lib/kubelet/plugins/gpufabric.dev",
		Resolver: resolver,
		// IMEX from pkg/devices' inventory (major, channel count) and the
		// node's IMEX daemon (devices.Backend.IMEXStatus).
		Channels: claims.FabricChannelResolver{LocalDomainID: "<this node's nvlinkDomain>", IMEX: &claims.IMEX{}},
		// ClaimGetter: client-go ResourceClaims(ns).Get, via claims.ClaimGetterFunc.
		Registry:      prometheus.NewRegistry(),
		HealthUpdates: health, // fed by the device health monitor
		OnEvent:       func(ctx context.Context, ev node.Event) { /* record a Node Event */ },
		OnFatalError:  func(err error) { cancel(err) },
	})
	if err != nil {
		return
	}
	defer func() { _ = d.Close() }()
	_, _ = kubeletplugin.Start(ctx, d /* , kubeletplugin.DriverName(topology.DriverName), … */)
}
