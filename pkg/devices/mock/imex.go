package mock

import (
	"fmt"
	"strings"

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

// writeProc writes the node's fake procfs: devices (with the IMEX major
// when the driver supports IMEX), driver/nvidia/params and the IMEX daemon's
// status.
func (n *node) writeProc(root string) error {
	w := &treeWriter{root: root}
	imex := n.model.fabricCapable() && !n.faults.imex.noDriverSupport
	var dev strings.Builder
	dev.WriteString("Character devices:\n  1 mem\n  4 /dev/vc/0\n195 nvidia-frontend\n")
	if imex {
		fmt.Fprintf(&dev, "%d %s\n", IMEXMajor, devices.IMEXDeviceName)
	}
	dev.WriteString("508 nvidia-uvm\n510 nvidia-caps\n\nBlock devices:\n  7 loop\n259 blkext\n")
	w.file("devices", dev.String())
	channels := devices.DefaultIMEXChannels
	if n.faults.imex.channels > 0 {
		channels = n.faults.imex.channels
	}
	w.file("driver/nvidia-caps/mig-minors", migMinors(n.gpuCount))
	w.file("driver/nvidia/params", fmt.Sprintf("ResmanDebugLevel: 4294967295\nImexChannelCount: %d\nCreateImexChannel0: 0\n", channels))
	switch {
	case n.kind != topology.DomainKindMNNVL || n.faults.imex.daemon == IMEXDaemonDown:
	case n.faults.imex.daemon == IMEXDaemonNotReady:
		w.file(imexStatusFile, "NOT_READY\n")
	default:
		w.file(imexStatusFile, devices.IMEXReady+"\n")
	}
	return w.err
}
