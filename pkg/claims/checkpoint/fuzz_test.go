package checkpoint

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"hash/crc32"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// Ways FuzzDecode uses its input: as the whole file, or as the content of
// a version 2 or version 1 file with a correct checksum (so that the
// fuzzer gets past the checksum to the claims).
const (
	asFile = iota
	asV2Data
	asV1Claims
	numModes
)

// FuzzDecode feeds Decode any file content, seeded with a real version 1
// file, a version 2 file as Save writes it, damaged copies of both, and
// their contents to be sealed with a correct checksum. Oracles: no panic;
// every error wraps ErrCorrupt (the plugin moves the file aside only then,
// any other error would stop it for good); a decoded checkpoint is
// consistent (entries match their keys, known states; migrated version 1
// entries are Completed with their devices' fingerprint and no boot id),
// re-encodes, decodes to the same value and encodes to the same bytes
// again.
func FuzzDecode(f *testing.F) {
	v1, err := os.ReadFile(filepath.Join("testdata", "checkpoint-v1.json"))
	if err != nil {
		f.Fatal(err)
	}
	v2, err := Encode(sample())
	if err != nil {
		f.Fatal(err)
	}
	for _, seed := range [][]byte{
		v1, v2, v1[:len(v1)/2], v2[:len(v2)/3],
		[]byte(strings.Replace(string(v2), `"c1"`, `"c2"`, 1)),
		[]byte(strings.Replace(string(v1), `"version": 1`, `"version": 3`, 1)),
		[]byte(`{"version": 2, "checksum": "", "data": null}`),
		[]byte(`{"version": 1, "checksum": 0, "preparedClaims": null}`),
		{}, []byte("null"),
	} {
		f.Add(seed, uint8(asFile))
	}
	var env envelope
	var old fileV1
	if json.Unmarshal(v2, &env) != nil || json.Unmarshal(v1, &old) != nil {
		f.Fatal("seed files do not parse")
	}
	f.Add([]byte(env.Data), uint8(asV2Data))
	f.Add([]byte(`{"claims":{"u":{"uid":"u","state":"PrepareStarted","devices":[]}}}`), uint8(asV2Data))
	f.Add([]byte(`{"claims":{"u":{"uid":"u","state":"PrepareCompleted","fingerprint":"x","devices":[{"request":"r","pool":"p","device":"gpu-0","configEnv":["NCCL_DEBUG=INFO"]}]}}}`), uint8(asV2Data))
	f.Add([]byte(old.PreparedClaims), uint8(asV1Claims))
	f.Fuzz(func(t *testing.T, in []byte, mode uint8) {
		data := seal(in, mode%numModes)
		cp, err := Decode(data)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) || cp != nil {
				t.Fatalf("Decode = %v, %v; want nil and an error wrapping ErrCorrupt", cp, err)
			}
			return
		}
		checkConsistent(t, cp, data)
		enc, err := Encode(cp)
		if err != nil {
			t.Fatalf("a decoded checkpoint does not encode: %v", err)
		}
		again, err := Decode(enc)
		if err != nil {
			t.Fatalf("re-encoded checkpoint does not decode: %v\n%s", err, enc)
		}
		if diff := cmp.Diff(cp, again, cmpopts.EquateEmpty()); diff != "" {
			t.Fatalf("decode(encode(cp)) differs (-first +second):\n%s", diff)
		}
		enc2, err := Encode(again)
		if err != nil || !bytes.Equal(enc, enc2) {
			t.Fatalf("encoding is not stable (%v):\n%s\n---\n%s", err, enc, enc2)
		}
	})
}

// checkConsistent asserts what Decode promises about its result.
func checkConsistent(t *testing.T, cp *Checkpoint, data []byte) {
	t.Helper()
	if cp == nil || cp.Claims == nil {
		t.Fatalf("decoded checkpoint %+v has no claims map", cp)
	}
	for uid, c := range cp.Claims {
		if c == nil || c.UID != uid || c.State != StatePrepareStarted && c.State != StatePrepareCompleted {
			t.Fatalf("entry %q is inconsistent: %+v", uid, c)
		}
	}
	var head struct {
		Version json.RawMessage `json:"version"`
	}
	if err := json.Unmarshal(data, &head); err != nil || string(head.Version) != "1" {
		return
	}
	for uid, c := range cp.Claims {
		if c.State != StatePrepareCompleted || c.BootID != "" || !c.UpdatedAt.IsZero() || c.Fingerprint != Fingerprint(c.Devices) {
			t.Fatalf("migrated version 1 entry %q: %+v", uid, c)
		}
	}
}

// seal wraps content into a file of the given mode with a correct
// checksum; content that is not JSON is returned as it is.
func seal(content []byte, mode uint8) []byte {
	var buf bytes.Buffer
	if mode == asFile || json.Compact(&buf, content) != nil {
		return content
	}
	var out []byte
	var err error
	switch mode {
	case asV2Data:
		sum := sha256.Sum256(buf.Bytes())
		out, err = json.Marshal(envelope{Version: 2, Checksum: "sha256:" + hex.EncodeToString(sum[:]), Data: content})
	case asV1Claims:
		out, err = json.Marshal(fileV1{Version: 1, Checksum: crc32.ChecksumIEEE(buf.Bytes()), PreparedClaims: content})
	}
	if err != nil {
		return content
	}
	return out
}
