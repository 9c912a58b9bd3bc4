package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"

	"github.com/gpufabric/gpufabric/pkg/component/healthz"
	"github.com/gpufabric/gpufabric/pkg/topology"
)

// socketTimeout bounds one socket check.
const socketTimeout = 2 * time.Second

// notifyMethod is the kubelet's call that ends a plugin's registration.
const notifyMethod = "/pluginregistration.Registration/NotifyRegistrationStatus"

// probes are the plugin's health checks:
//
//	livez:  ping, sockets (the registration socket answers GetInfo and the
//	        DRA socket answers gRPC, each within 2 s: a restart repairs a
//	        server that stopped serving or a socket file someone removed)
//	readyz: ping, sockets, registration (the kubelet told the plugin it
//	        registered it; until then the kubelet sends no claim)
//
// Before the sockets exist (hardware discovery runs first) both fail with
// "starting"; the chart's startup probe gives discovery time.
type probes struct {
	mu sync.Mutex
	// draSocket, registrationSocket: "" until the helper started.
	draSocket, registrationSocket string
	registrarDir                  string
	// registered, refused: the kubelet's last NotifyRegistrationStatus.
	notified   bool
	registered bool
	refused    string
}

// started records the sockets once the helper listens on them.
func (p *probes) started(o *runOptions) {
	dra, reg := o.socketPaths()
	p.mu.Lock()
	p.draSocket, p.registrationSocket, p.registrarDir = dra, reg, o.registrarDir
	p.mu.Unlock()
}

// interceptor records the kubelet's NotifyRegistrationStatus calls
// (kubeletplugin.GRPCInterceptor applies it to both sockets' servers).
func (p *probes) interceptor(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if s, ok := req.(*registerapi.RegistrationStatus); ok && info.FullMethod == notifyMethod {
		p.mu.Lock()
		p.notified, p.registered, p.refused = true, s.PluginRegistered, s.Error
		p.mu.Unlock()
		klog.FromContext(ctx).Info("Registration status from the kubelet", "registered", s.PluginRegistered, "error", s.Error)
	}
	return handler(ctx, req)
}

func (p *probes) handler(logger klog.Logger) (*healthz.Handler, error) {
	sockets := healthz.NamedCheck("sockets", p.checkSockets)
	registration := healthz.NamedCheck("registration", func(*http.Request) error { return p.checkRegistration() })
	return healthz.New(logger, []healthz.Checker{healthz.Ping, sockets}, []healthz.Checker{healthz.Ping, sockets, registration})
}

func (p *probes) checkSockets(r *http.Request) error {
	p.mu.Lock()
	dra, reg := p.draSocket, p.registrationSocket
	p.mu.Unlock()
	if dra == "" {
		return errors.New("starting: discovering the hardware before the sockets listen")
	}
	ctx, cancel := context.WithTimeout(r.Context(), socketTimeout)
	defer cancel()
	if err := callSocket(ctx, reg, func(conn *grpc.ClientConn) error {
		_, err := registerapi.NewRegistrationClient(conn).GetInfo(ctx, &registerapi.InfoRequest{})
		return err
	}); err != nil {
		return fmt.Errorf("registration socket %s: %w", reg, err)
	}
	// Any gRPC answer proves the DRA server serves; an unknown method
	// touches no claim and takes no lock.
	if err := callSocket(ctx, dra, func(conn *grpc.ClientConn) error {
		err := conn.Invoke(ctx, "/gpufabric.probe.v1.Probe/Ping", &registerapi.InfoRequest{}, &registerapi.PluginInfo{})
		if status.Code(err) == codes.Unimplemented {
			return nil
		}
		return err
	}); err != nil {
		return fmt.Errorf("DRA socket %s: %w", dra, err)
	}
	return nil
}

func callSocket(ctx context.Context, path string, call func(*grpc.ClientConn) error) error {
	conn, err := grpc.NewClient("unix://"+path, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	return call(conn)
}

func (p *probes) checkRegistration() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case p.draSocket == "":
		return errors.New("starting: discovering the hardware before the sockets listen")
	case !p.notified:
		return fmt.Errorf("the kubelet has not registered the plugin yet: it watches %s for %s; check that this is the kubelet's plugins_registry "+
			"(kubeletPlugin.kubeletDir) and the kubelet's log for %q", p.registrarDir, filepath.Base(p.registrationSocket), topology.DriverName)
	case !p.registered:
		return fmt.Errorf("the kubelet refused the registration: %s", p.refused)
	}
	return nil
}
