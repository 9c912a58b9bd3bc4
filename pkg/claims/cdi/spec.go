// Package cdi writes one CDI spec file per prepared ResourceClaim and reads
// them back, so that node state can be rebuilt from the files alone.
//
// Spec kind is gpufabric.dev/claim; the file is
// <root>/gpufabric.dev-claim_<claimUID>.json and holds one CDI device per
// allocation result, named <claimUID>-<device> (a claim UID is never reused,
// so container runtimes cannot hit a stale cache entry). Spec and device
// annotations record the claim and the allocation results.
package cdi

import (
	"encoding/json"
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/types"
	cdispec "tags.cncf.io/container-device-interface/specs-go"

	"github.com/gpufabric/gpufabric/pkg/claims"
	"github.com/gpufabric/gpufabric/pkg/claims/checkpoint"
	"github.com/gpufabric/gpufabric/pkg/topology"
)

// Names of the spec kind.
const (
	Vendor = topology.DriverName
	Class  = "claim"
	Kind   = Vendor + "/" + Class
)

// Annotation keys.
const (
	AnnotationClaimUID       = topology.DriverName + "/claim-uid"
	AnnotationClaimNamespace = topology.DriverName + "/claim-namespace"
	AnnotationClaimName      = topology.DriverName + "/claim-name"
	AnnotationRequest        = topology.DriverName + "/request"
	AnnotationPool           = topology.DriverName + "/pool"
	AnnotationDevice         = topology.DriverName + "/device"
	AnnotationShareID        = topology.DriverName + "/share-id"
	AnnotationAdminAccess    = topology.DriverName + "/admin-access"
	// AnnotationConfigEnv holds a device's config variables (see
	// checkpoint.Device.ConfigEnv), one KEY=VALUE per line.
	AnnotationConfigEnv = topology.DriverName + "/config-env"
)

// defaultMountOptions apply when a resolver gives none.
func defaultMountOptions() []string { return []string{"ro", "nosuid", "nodev", "bind"} }

// ClaimRef identifies the claim a spec is for.
type ClaimRef struct {
	UID       types.UID
	Namespace string
	Name      string
}

// Device is one allocation result with what its container needs.
type Device struct {
	// Result is the allocation result; its CDIDeviceIDs are ignored.
	Result checkpoint.Device
	// Type is topology.DeviceTypeGPU, DeviceTypeNIC or DeviceTypeFabricDomain.
	Type  string
	Edits claims.Edits
}

// DeviceID returns the fully qualified CDI device id of a device name.
func DeviceID(name string) string { return Kind + "=" + name }

// BuildSpec returns the claim's CDI spec and the CDI device id of each
// device, in order. Besides each device's own edits, every device of a
// request gets the request-wide variables: for GPUs NVIDIA_VISIBLE_DEVICES
// and GPUFABRIC_GPU_UUIDS (the request's GPU UUIDs), for NICs
// NCCL_IB_HCA (exact-match form "=mlx5_0,mlx5_3") and GPUFABRIC_IB_DEVICES.
// The device's config variables (Result.ConfigEnv) come last. A device
// with no edits at all gets GPUFABRIC_DEVICE=<device name>, since CDI
// rejects devices without edits.
//
// driver, if set, are the driver installation's edits (libraries,
// binaries, hooks; devices.DriverEdits): they become the spec's own edits,
// which a runtime applies once for any device of the spec, when the claim
// has a GPU. The container then gets everything from CDI, so
// NVIDIA_VISIBLE_DEVICES is left to the driver edits ("void": a
// nvidia-container-runtime in legacy mode must not inject the GPUs again).
func BuildSpec(ref ClaimRef, devs []Device, driver *cdispec.ContainerEdits) (*cdispec.Spec, []string, error) {
	if len(devs) == 0 {
		return nil, nil, fmt.Errorf("claim %s has no devices", ref.UID)
	}
	spec := &cdispec.Spec{
		Kind: Kind,
		Annotations: map[string]string{
			AnnotationClaimUID:       string(ref.UID),
			AnnotationClaimNamespace: ref.Namespace,
			AnnotationClaimName:      ref.Name,
		},
	}
	withDriver := driver != nil && hasGPU(devs)
	if withDriver {
		spec.ContainerEdits = copyEdits(driver)
	}
	shared := requestEnv(devs, !withDriver)
	names := deviceNames(ref.UID, devs)
	ids := make([]string, len(devs))
	for i, d := range devs {
		spec.Devices = append(spec.Devices, cdispec.Device{
			Name:           names[i],
			Annotations:    deviceAnnotations(d.Result),
			ContainerEdits: containerEdits(d, shared[d.Result.Request+"\x00"+d.Type]),
		})
		ids[i] = DeviceID(names[i])
	}
	version, err := cdispec.MinimumRequiredVersion(spec)
	if err != nil {
		return nil, nil, fmt.Errorf("cdi version: %w", err)
	}
	spec.Version = version
	return spec, ids, nil
}

// deviceNames are <uid>-<device>, with -<index> appended where a device
// occurs twice in a claim (shares of one device).
func deviceNames(uid types.UID, devs []Device) []string {
	count := map[string]int{}
	for _, d := range devs {
		count[d.Result.Device]++
	}
	names := make([]string, len(devs))
	for i, d := range devs {
		names[i] = string(uid) + "-" + d.Result.Device
		if count[d.Result.Device] > 1 {
			names[i] += fmt.Sprintf("-%d", i)
		}
	}
	return names
}

func deviceAnnotations(r checkpoint.Device) map[string]string {
	a := map[string]string{
		AnnotationRequest: r.Request,
		AnnotationPool:    r.Pool,
		AnnotationDevice:  r.Device,
	}
	if r.ShareID != "" {
		a[AnnotationShareID] = r.ShareID
	}
	if r.AdminAccess {
		a[AnnotationAdminAccess] = "true"
	}
	if len(r.ConfigEnv) > 0 {
		a[AnnotationConfigEnv] = strings.Join(r.ConfigEnv, "\n")
	}
	return a
}

func hasGPU(devs []Device) bool {
	for _, d := range devs {
		if d.Type == topology.DeviceTypeGPU {
			return true
		}
	}
	return false
}

// copyEdits deep-copies edits through JSON (they are plain data), so that
// a cached value is never shared with a spec.
func copyEdits(e *cdispec.ContainerEdits) cdispec.ContainerEdits {
	var out cdispec.ContainerEdits
	data, err := json.Marshal(e)
	if err == nil {
		err = json.Unmarshal(data, &out)
	}
	if err != nil {
		return *e
	}
	return out
}

// requestEnv computes the request-wide variables, keyed by request and
// type; NVIDIA_VISIBLE_DEVICES only with visible.
func requestEnv(devs []Device, visible bool) map[string][]string {
	gpus := map[string][]string{}
	ibs := map[string][]string{}
	var order []string
	for _, d := range devs {
		switch d.Type {
		case topology.DeviceTypeGPU:
			if d.Edits.GPUUUID != "" {
				gpus[d.Result.Request] = append(gpus[d.Result.Request], d.Edits.GPUUUID)
			}
		case topology.DeviceTypeNIC:
			// The published name is sanitized (nic-mlx5-0), so the kernel's
			// name can only come from the resolver.
			if d.Edits.IBDevice != "" {
				ibs[d.Result.Request] = append(ibs[d.Result.Request], d.Edits.IBDevice)
			}
		}
		order = append(order, d.Result.Request)
	}
	env := map[string][]string{}
	for _, req := range order {
		if g := strings.Join(gpus[req], ","); g != "" {
			e := []string{claims.EnvGPUUUIDs + "=" + g}
			if visible {
				e = append([]string{claims.EnvVisibleDevices + "=" + g}, e...)
			}
			env[req+"\x00"+topology.DeviceTypeGPU] = e
		}
		if n := strings.Join(ibs[req], ","); n != "" {
			env[req+"\x00"+topology.DeviceTypeNIC] = []string{
				claims.EnvNCCLIBHCA + "==" + n, claims.EnvIBDevices + "=" + n,
			}
		}
	}
	return env
}

func containerEdits(d Device, shared []string) cdispec.ContainerEdits {
	var e cdispec.ContainerEdits
	for _, n := range d.Edits.DeviceNodes {
		dn := &cdispec.DeviceNode{
			Path: n.Path, HostPath: n.HostPath, Permissions: n.Permissions,
			Type: n.Type, Major: n.Major, Minor: n.Minor,
		}
		if n.FileMode != 0 {
			mode := n.FileMode
			dn.FileMode = &mode
		}
		e.DeviceNodes = append(e.DeviceNodes, dn)
	}
	for _, m := range d.Edits.Mounts {
		opts := m.Options
		if len(opts) == 0 {
			opts = defaultMountOptions()
		}
		e.Mounts = append(e.Mounts, &cdispec.Mount{
			HostPath: m.HostPath, ContainerPath: m.ContainerPath, Options: opts, Type: "bind",
		})
	}
	e.Env = append(append(append(e.Env, d.Edits.Env...), shared...), d.Result.ConfigEnv...)
	if len(e.Env) == 0 && len(e.DeviceNodes) == 0 && len(e.Mounts) == 0 {
		e.Env = []string{"GPUFABRIC_DEVICE=" + d.Result.Device}
	}
	return e
}

// ParseClaim reads back the claim recorded in one of this package's specs:
// state PrepareCompleted, unknown boot id.
func ParseClaim(spec *cdispec.Spec) (*checkpoint.Claim, error) {
	if spec.Kind != Kind {
		return nil, fmt.Errorf("spec kind %q is not %q", spec.Kind, Kind)
	}
	uid := types.UID(spec.Annotations[AnnotationClaimUID])
	if uid == "" {
		return nil, fmt.Errorf("spec has no %s annotation", AnnotationClaimUID)
	}
	c := &checkpoint.Claim{
		UID:       uid,
		Namespace: spec.Annotations[AnnotationClaimNamespace],
		Name:      spec.Annotations[AnnotationClaimName],
		State:     checkpoint.StatePrepareCompleted,
	}
	for _, d := range spec.Devices {
		a := d.Annotations
		if a[AnnotationPool] == "" || a[AnnotationDevice] == "" {
			return nil, fmt.Errorf("spec device %q lacks pool or device annotation", d.Name)
		}
		dev := checkpoint.Device{
			Request: a[AnnotationRequest], Pool: a[AnnotationPool], Device: a[AnnotationDevice],
			ShareID: a[AnnotationShareID], AdminAccess: a[AnnotationAdminAccess] == "true",
			CDIDeviceIDs: []string{DeviceID(d.Name)},
		}
		if env := a[AnnotationConfigEnv]; env != "" {
			dev.ConfigEnv = strings.Split(env, "\n")
		}
		c.Devices = append(c.Devices, dev)
	}
	c.Fingerprint = checkpoint.Fingerprint(c.Devices)
	return c, nil
}
