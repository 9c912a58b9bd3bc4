package checkpoint

import (
	"bytes"
	"encoding/json"
	"hash/crc32"

	"k8s.io/apimachinery/pkg/types"
)

// fileV1 is the version 1 format (gpufabric 0.1): no boot id, no states,
// Checksum is the CRC-32 (IEEE) of the compacted JSON of PreparedClaims.
type fileV1 struct {
	Version        int             `json:"version"`
	Checksum       uint32          `json:"checksum"`
	PreparedClaims json.RawMessage `json:"preparedClaims"`
}

type claimV1 struct {
	Namespace string     `json:"namespace"`
	Name      string     `json:"name"`
	Devices   []deviceV1 `json:"devices"`
}

type deviceV1 struct {
	Requests     []string `json:"requests"`
	PoolName     string   `json:"poolName"`
	DeviceName   string   `json:"deviceName"`
	CDIDeviceIDs []string `json:"cdiDeviceIDs"`
}

// decodeV1 migrates a version 1 file. Version 1 only recorded completed
// preparations; the boot id is unknown, so every migrated claim is redone
// on load (idempotent).
func decodeV1(data []byte) (*Checkpoint, error) {
	var f fileV1
	if err := json.Unmarshal(data, &f); err != nil {
		return nil, corrupt("decode version 1: %v", err)
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, f.PreparedClaims); err != nil {
		return nil, corrupt("compact version 1 data: %v", err)
	}
	if sum := crc32.ChecksumIEEE(buf.Bytes()); sum != f.Checksum {
		return nil, corrupt("version 1 checksum mismatch: file says %d, content has %d", f.Checksum, sum)
	}
	var old map[types.UID]claimV1
	if err := json.Unmarshal(f.PreparedClaims, &old); err != nil {
		return nil, corrupt("decode version 1 claims: %v", err)
	}
	cp := New("")
	for uid, c := range old {
		claim := &Claim{UID: uid, Namespace: c.Namespace, Name: c.Name, State: StatePrepareCompleted}
		for _, d := range c.Devices {
			var req string
			if len(d.Requests) > 0 {
				req = d.Requests[0]
			}
			claim.Devices = append(claim.Devices, Device{
				Request: req, Pool: d.PoolName, Device: d.DeviceName, CDIDeviceIDs: d.CDIDeviceIDs,
			})
		}
		claim.Fingerprint = Fingerprint(claim.Devices)
		cp.Claims[uid] = claim
	}
	return cp, nil
}
