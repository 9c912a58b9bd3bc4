// Package checkpoint records which ResourceClaims the kubelet plugin has
// prepared on this node, so that UnprepareResourceClaims (which gets only
// namespace, name and UID) can undo the work, across restarts and reboots.
//
// The file is versioned, checksummed and written atomically (temporary file,
// fsync, rename, directory fsync). Load migrates older versions and reports
// any file it cannot trust with an error wrapping ErrCorrupt; the caller moves
// it aside with MoveAside and rebuilds the state. I/O errors other than
// corruption (e.g. permission denied) are returned unwrapped and must not
// lead to a move-aside.
//
// Checkpoint values are not safe for concurrent use; File is stateless
// and may be used concurrently, but concurrent Saves race (last one wins):
// the caller serializes read-modify-write cycles.
package checkpoint

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"slices"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// Version is the format version that Save writes.
const Version = 2

// ErrCorrupt marks a checkpoint file that cannot be trusted: not JSON,
// truncated, a checksum mismatch, an unknown version or inconsistent content.
var ErrCorrupt = errors.New("corrupt checkpoint")

// State is where a claim is in its preparation.
type State string

const (
	// StatePrepareStarted is written before any side effect (CDI spec file)
	// of preparing the claim. Found on load, the claim is redone or rolled back.
	StatePrepareStarted State = "PrepareStarted"
	// StatePrepareCompleted is written after all side effects are durable.
	StatePrepareCompleted State = "PrepareCompleted"
)

// Device is one allocation result of a claim that the driver prepared.
type Device struct {
	Request      string   `json:"request"`
	Pool         string   `json:"pool"`
	Device       string   `json:"device"`
	ShareID      string   `json:"shareID,omitempty"`
	AdminAccess  bool     `json:"adminAccess,omitempty"`
	CDIDeviceIDs []string `json:"cdiDeviceIDs,omitempty"`
	// ConfigEnv are the KEY=VALUE variables the claim's opaque configs
	// give the device's request (sorted), recorded so that a redo after a
	// restart or reboot writes the same CDI spec.
	ConfigEnv []string `json:"configEnv,omitempty"`
}

// Key identifies the device (or the device share) for double-booking checks.
func (d Device) Key() string {
	k := d.Pool + "/" + d.Device
	if d.ShareID != "" {
		k += "#" + d.ShareID
	}
	return k
}

// Claim is one prepared (or being prepared) claim.
type Claim struct {
	UID       types.UID `json:"uid"`
	Namespace string    `json:"namespace"`
	Name      string    `json:"name"`
	State     State     `json:"state"`
	// BootID is the node's boot id when the side effects were last done.
	// Empty means unknown (migrated or rebuilt entries): redo on load.
	BootID string `json:"bootID,omitempty"`
	// Fingerprint identifies the allocation (see Fingerprint); a claim
	// prepared again with another allocation is re-prepared.
	Fingerprint string    `json:"fingerprint"`
	Devices     []Device  `json:"devices"`
	UpdatedAt   time.Time `json:"updatedAt,omitzero"`
}

// Checkpoint is the content of the checkpoint file.
type Checkpoint struct {
	// NodeName is informational.
	NodeName string               `json:"nodeName,omitempty"`
	Claims   map[types.UID]*Claim `json:"claims"`
}

// New returns an empty checkpoint.
func New(nodeName string) *Checkpoint {
	return &Checkpoint{NodeName: nodeName, Claims: map[types.UID]*Claim{}}
}

// Holders maps each device key held by a claim (in any state; adminAccess
// results excluded, they never block and are never blocked) to the claim.
func (c *Checkpoint) Holders() map[string]*Claim {
	h := map[string]*Claim{}
	for _, claim := range c.Claims {
		for _, d := range claim.Devices {
			if !d.AdminAccess {
				h[d.Key()] = claim
			}
		}
	}
	return h
}

// Fingerprint is a short, order-independent hash of a claim's devices
// (request, pool, device, share, admin access and config variables; not
// the CDI ids). Devices without config variables hash as before they
// existed.
func Fingerprint(devices []Device) string {
	lines := make([]string, 0, len(devices))
	for _, d := range devices {
		line := d.Request + "\x00" + d.Key() + "\x00" + strconv.FormatBool(d.AdminAccess)
		if len(d.ConfigEnv) > 0 {
			line += "\x00" + strings.Join(d.ConfigEnv, "\x00")
		}
		lines = append(lines, line)
	}
	slices.Sort(lines)
	h := sha256.New()
	for _, l := range lines {
		h.Write([]byte(l))
		h.Write([]byte{'\n'})
	}
	return hex.EncodeToString(h.Sum(nil))[:16]
}
