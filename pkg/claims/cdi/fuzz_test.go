package cdi

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpufabric/gpufabric/pkg/claims/checkpoint"
)

// FuzzReadClaim feeds any content as a spec file of claim "u" to
// Dir.List, the reader that rebuilds the node state from the CDI specs
// after a corrupted checkpoint. Seeds are the prepare golden files and a
// spec with config variables. Oracles: no panic; one entry, with either an
// error or a claim "u" whose devices all name a pool and a device, state
// Completed, fingerprint of its devices; and the rebuilt claim survives a
// checkpoint save and load unchanged.
func FuzzReadClaim(f *testing.F) {
	for _, golden := range []string{"gpus-nics-channel.json", "one-gpu.json"} {
		data, err := os.ReadFile(filepath.Join("..", "node", "testdata", golden))
		if err != nil {
			f.Fatal(err)
		}
		for _, uid := range [][]byte{[]byte("uid-train"), []byte("uid-single")} {
			data = bytes.ReplaceAll(data, uid, []byte("u"))
		}
		f.Add(data)
	}
	d := gpu("gpus", 0, "GPU-a")
	d.Result.ConfigEnv = []string{"NCCL_ALGO=Ring", "NCCL_DEBUG="}
	spec, _, err := BuildSpec(ClaimRef{UID: "u", Namespace: "ns", Name: "c"}, []Device{d}, nil)
	if err != nil {
		f.Fatal(err)
	}
	withEnv, err := json.Marshal(spec)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(withEnv)
	f.Add([]byte(`{"cdiVersion": "0.6.0", "kind": "gpufabric.dev/claim", "devices": []}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		root := t.TempDir()
		if err := os.WriteFile(filepath.Join(root, fileBase("u")+".json"), data, 0o600); err != nil {
			t.Fatal(err)
		}
		dir, err := NewDir(root, false)
		if err != nil {
			t.Fatal(err)
		}
		found, err := dir.List()
		if err != nil || len(found) != 1 {
			t.Fatalf("List = %d entries, %v; want one", len(found), err)
		}
		if found[0].Err != nil {
			if found[0].Claim != nil {
				t.Fatalf("entry has both a claim and an error: %v", found[0].Err)
			}
			return
		}
		checkRebuilt(t, found[0].Claim)
	})
}

func checkRebuilt(t *testing.T, c *checkpoint.Claim) {
	t.Helper()
	if c.UID != "u" || c.State != checkpoint.StatePrepareCompleted || c.Fingerprint != checkpoint.Fingerprint(c.Devices) {
		t.Fatalf("rebuilt claim %+v", c)
	}
	for _, dev := range c.Devices {
		if dev.Pool == "" || dev.Device == "" || len(dev.CDIDeviceIDs) != 1 {
			t.Fatalf("rebuilt device %+v", dev)
		}
	}
	cp := checkpoint.New("n")
	cp.Claims[types.UID("u")] = c
	data, err := checkpoint.Encode(cp)
	if err != nil {
		t.Fatalf("rebuilt state does not encode: %v", err)
	}
	back, err := checkpoint.Decode(data)
	if err != nil {
		t.Fatalf("rebuilt state does not load: %v", err)
	}
	if diff := cmp.Diff(cp, back, cmpopts.EquateEmpty()); diff != "" {
		t.Fatalf("rebuilt state changes through the checkpoint (-rebuilt +loaded):\n%s", diff)
	}
}
