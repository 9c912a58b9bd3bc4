package mock

import (
	"github.com/gpufabric/gpufabric/pkg/devices"
	"github.com/gpufabric/gpufabric/pkg/topology"
)

// IMEX in the mock: every node whose model registers with an NVLink fabric
// has the driver's nvidia-caps-imex-channels character device (major
// IMEXMajor) with devices.DefaultIMEXChannels channels; multi-node NVLink
// nodes also run an IMEX daemon that answers READY. The imex fault changes
// all three.
const (
	// IMEXMajor is the mock driver's major of nvidia-caps-imex-channels.
	IMEXMajor = 511
	// imexStatusFile, under the fake proc tree, is what the mock's
	// nvidia-imex-ctl -q prints; no file means no daemon answers.
	imexStatusFile = "gpumock/imex-daemon-status"
)

// IMEX daemon states of the imex fault.
const (
	IMEXDaemonNotReady = "NotReady"
	IMEXDaemonDown     = "Down"
)

type imexFault struct {
	daemon          string
	channels        int
	noDriverSupport bool
}

func applyIMEX(n *node, s faultSpec, errf errFunc) error {
	is := s.IMEX
	if is == nil {
		return nil
	}
	switch is.Daemon {
	case "", IMEXDaemonNotReady, IMEXDaemonDown:
	default:
		return errf("imex.daemon", "must be %s or %s, got %q", IMEXDaemonNotReady, IMEXDaemonDown, is.Daemon)
	}
	if is.Daemon != "" && n.kind != topology.DomainKindMNNVL {
		return errf("imex.daemon", "node has nvlink kind %s and runs no IMEX daemon", n.kind)
	}
	if is.Channels != nil && (*is.Channels < 1 || *is.Channels > devices.MaxIMEXChannels) {
		return errf("imex.channels", "must be 1..%d, got %d", devices.MaxIMEXChannels, *is.Channels)
	}
	if is.Daemon != "" {
		n.faults.imex.daemon = is.Daemon
	}
	if is.Channels != nil {
		n.faults.imex.channels = *is.Channels
	}
	n.faults.imex.noDriverSupport = n.faults.imex.noDriverSupport || is.NoDriverSupport
	return nil
}
