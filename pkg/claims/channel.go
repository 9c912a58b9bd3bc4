package claims

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/gpufabric/gpufabric/pkg/topology"
)

// Errors of channel resolution.
var (
	// ErrWrongDomain is returned (wrapped) when a channel of another NVLink
	// domain than the node's own is to be prepared.
	ErrWrongDomain = errors.New("channel belongs to another nvlink domain")
	// ErrIMEXUnavailable: the driver offers no IMEX channel for the
	// channel (no nvidia-caps-imex-channels device, or too few channels).
	ErrIMEXUnavailable = errors.New("imex channel unavailable")
	// ErrIMEXNotReady: the node's IMEX daemon did not become ready in time.
	ErrIMEXNotReady = errors.New("imex daemon not ready")
)

// Environment variables injected by gpufabric.
const (
	EnvVisibleDevices  = "NVIDIA_VISIBLE_DEVICES"
	EnvGPUUUIDs        = "GPUFABRIC_GPU_UUIDS"
	EnvIBDevices       = "GPUFABRIC_IB_DEVICES"
	EnvNCCLIBHCA       = "NCCL_IB_HCA"
	EnvFabricDomain    = "GPUFABRIC_FABRIC_DOMAIN"
	EnvFabricKind      = "GPUFABRIC_FABRIC_DOMAIN_KIND"
	EnvFabricChannel   = "GPUFABRIC_FABRIC_CHANNEL"
	EnvIMEXChannel     = "GPUFABRIC_IMEX_CHANNEL"
	EnvNCCLMNNVLEnable = "NCCL_MNNVL_ENABLE"
	EnvNCCLNVLSEnable  = "NCCL_NVLS_ENABLE"
)

// Defaults of IMEX.
const (
	DefaultIMEXReadyTimeout = 10 * time.Second
	DefaultIMEXPollInterval = 250 * time.Millisecond
)

// IMEXChannelPath is the device node of IMEX channel n, inside the
// container (and on a host that created it).
func IMEXChannelPath(n int) string {
	return "/dev/nvidia-caps-imex-channels/channel" + strconv.Itoa(n)
}

// IMEX is how this node hands out IMEX channels: channel <n> of the
// node's multi-node NVLink domain is IMEX channel n, the character device
// (Major, n) that the container runtime creates in the container.
type IMEX struct {
	// Major is the driver's nvidia-caps-imex-channels major; 0 means the
	// driver has no IMEX channels.
	Major int
	// Channels is how many channels the driver has (0..Channels-1).
	Channels int
	// Ready asks the node's IMEX daemon whether it serves channels, with
	// its answer for errors; an error means it could not be asked.
	Ready func(ctx context.Context) (bool, string, error)
	// ReadyTimeout bounds the wait for the daemon in WaitReady
	// (DefaultIMEXReadyTimeout when zero).
	ReadyTimeout time.Duration
	// PollInterval is how often the daemon is asked while waiting
	// (DefaultIMEXPollInterval when zero).
	PollInterval time.Duration
}

// FabricChannelResolver is the default ChannelResolver. It is immutable and
// safe for concurrent use.
type FabricChannelResolver struct {
	// LocalDomainID is this node's nvlinkDomain. If set, channels of any
	// other domain are refused with ErrWrongDomain.
	LocalDomainID string
	// IMEX, if set, gives every channel of a multi-node NVLink domain its
	// IMEX channel. Nil leaves IMEX to another component (NVIDIA's
	// ComputeDomain): such channels then carry no IMEX device and no
	// NCCL_MNNVL_ENABLE.
	IMEX *IMEX
}

var _ ChannelResolver = FabricChannelResolver{}

// ChannelEdits returns the fabric domain id and kind and the channel
// number, and by domain kind:
//   - multi-node NVLink with IMEX: IMEX channel n as a character device the
//     runtime creates (no host node needed), GPUFABRIC_IMEX_CHANNEL=n,
//     NCCL_MNNVL_ENABLE=1 and NCCL_NVLS_ENABLE=1; ErrIMEXUnavailable when
//     the driver has no IMEX channels or fewer than n+1;
//   - multi-node NVLink without IMEX: nothing more (NCCL detects what it
//     can use; forcing MNNVL without a channel fails the job);
//   - NVSwitch: NCCL_NVLS_ENABLE=1.
func (r FabricChannelResolver) ChannelEdits(domainID string, channel int) (Edits, error) {
	kind, err := r.check(domainID, channel)
	if err != nil {
		return Edits{}, err
	}
	e := Edits{Env: []string{
		EnvFabricDomain + "=" + domainID,
		EnvFabricKind + "=" + string(kind),
		EnvFabricChannel + "=" + strconv.Itoa(channel),
	}}
	switch {
	case kind == topology.DomainKindMNNVL && r.IMEX != nil:
		if err := r.IMEX.check(channel); err != nil {
			return Edits{}, err
		}
		e.DeviceNodes = []DeviceNode{{
			Path: IMEXChannelPath(channel), Type: "c", Major: int64(r.IMEX.Major), Minor: int64(channel), FileMode: 0o666,
		}}
		e.Env = append(e.Env, EnvIMEXChannel+"="+strconv.Itoa(channel), EnvNCCLMNNVLEnable+"=1", EnvNCCLNVLSEnable+"=1")
	case kind == topology.DomainKindNVSwitch:
		e.Env = append(e.Env, EnvNCCLNVLSEnable+"=1")
	}
	return e, nil
}

func (r FabricChannelResolver) check(domainID string, channel int) (topology.DomainKind, error) {
	if domainID == "" || channel < 0 {
		return "", fmt.Errorf("channel %d of domain %q: %w", channel, domainID, ErrUnknownDevice)
	}
	if r.LocalDomainID != "" && domainID != r.LocalDomainID {
		return "", fmt.Errorf("domain %q, node is in %q: %w", domainID, r.LocalDomainID, ErrWrongDomain)
	}
	return DomainKindOf(domainID), nil
}

func (x *IMEX) check(channel int) error {
	switch {
	case x.Major <= 0:
		return fmt.Errorf("%w: the driver has no %s device (no IMEX support)", ErrIMEXUnavailable, "nvidia-caps-imex-channels")
	case channel >= x.Channels:
		return fmt.Errorf("%w: channel %d, the driver has %d IMEX channels", ErrIMEXUnavailable, channel, x.Channels)
	}
	return nil
}

// WaitReady waits until the node's IMEX daemon is ready when a channel of
// domainID needs it (a multi-node NVLink domain, with IMEX set). It asks
// every PollInterval for at most ReadyTimeout, and then fails with
// ErrIMEXNotReady and the daemon's last answer. It stops early with ctx's
// error.
func (r FabricChannelResolver) WaitReady(ctx context.Context, domainID string) error {
	if r.IMEX == nil || DomainKindOf(domainID) != topology.DomainKindMNNVL {
		return nil
	}
	x := r.IMEX
	timeout, interval := x.ReadyTimeout, x.PollInterval
	if timeout <= 0 {
		timeout = DefaultIMEXReadyTimeout
	}
	if interval <= 0 {
		interval = DefaultIMEXPollInterval
	}
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		ok, answer, err := x.Ready(ctx)
		switch {
		case ok && err == nil:
			return nil
		case err != nil:
			answer = err.Error()
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w: %w (last answer: %s)", ErrIMEXNotReady, context.Cause(ctx), answer)
		case <-deadline.C:
			return fmt.Errorf("%w after %s (last answer: %s)", ErrIMEXNotReady, timeout, answer)
		case <-tick.C:
		}
	}
}
