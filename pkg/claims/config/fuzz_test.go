package config

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	resourceapi "k8s.io/api/resource/v1"
)

// FuzzDecode feeds Decode any parameters, seeded with valid configs and
// each kind of invalid one. Oracles: no panic; an error names its field
// (it starts with parameters, apiVersion, kind or ncclEnv); a decoded
// config has the exact apiVersion and kind, at most MaxNCCLEnv entries
// whose keys match the pattern and are not driver keys and whose values
// are bounded and single-line; it encodes and decodes to the same value;
// Env lists exactly its entries, sorted; and RequestEnv applies it (or
// fails) the same way as a claim config.
func FuzzDecode(f *testing.F) {
	for _, seed := range []string{
		params(`, "ncclEnv": {"NCCL_DEBUG": "INFO", "NCCL_IB_TIMEOUT": "22"}`),
		params(``), params(`, "ncclEnv": null`), params(`, "ncclEnv": {"NCCL_X": ""}`),
		params(`, "ncclEnv": {"NCCL_IB_HCA": "mlx5_0"}`), params(`, "ncclEnv": {"nccl_x": "1"}`),
		params(`, "ncclEnv": {"NCCL_X": "a\nb"}`), params(`, "ncclEnv": {"NCCL_A": "1", "NCCL_A": "2"}`),
		params(`, "mode": "fast"`), `{"apiVersion": "gpufabric.dev/v1", "kind": "FabricConfig"}`,
		`{"apiVersion": "gpufabric.dev/v1alpha1"}`, `[]`, ``, `null`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		c, err := Decode(raw)
		checkRequestEnv(t, raw, c, err)
		if err != nil {
			if c != nil || !startsWithField(err.Error()) {
				t.Fatalf("Decode = %v, %q; want nil and an error naming its field", c, err)
			}
			return
		}
		checkValid(t, c)
		enc, err := json.Marshal(c)
		if err != nil {
			t.Fatalf("a decoded config does not encode: %v", err)
		}
		again, err := Decode(enc)
		if err != nil {
			t.Fatalf("re-encoded config %s does not decode: %v", enc, err)
		}
		if diff := cmp.Diff(c, again, cmpopts.EquateEmpty()); diff != "" {
			t.Fatalf("decode(encode(c)) differs (-first +second):\n%s", diff)
		}
	})
}

func startsWithField(msg string) bool {
	for _, field := range []string{"parameters: ", "apiVersion: ", "kind: ", "ncclEnv: ", "ncclEnv["} {
		if strings.HasPrefix(msg, field) {
			return true
		}
	}
	return false
}

// checkValid asserts the package rules, restated independently of
// Validate, and that Env lists exactly the entries, sorted.
func checkValid(t *testing.T, c *FabricConfig) {
	t.Helper()
	if c.APIVersion != APIVersion || c.Kind != Kind || len(c.NCCLEnv) > MaxNCCLEnv {
		t.Fatalf("decoded config %+v breaks the type or entry bounds", c)
	}
	for k, v := range c.NCCLEnv {
		name, ok := strings.CutPrefix(k, "NCCL_")
		if !ok || name == "" || len(name) > 64 || strings.Trim(name, "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_") != "" || slices.Contains(DriverKeys(), k) {
			t.Fatalf("decoded config has key %q", k)
		}
		if len(v) > MaxValueLength || strings.ContainsAny(v, "\x00\n\r") {
			t.Fatalf("decoded config has %s=%q", k, v)
		}
	}
	env := c.Env()
	if len(env) != len(c.NCCLEnv) || !slices.IsSorted(env) {
		t.Fatalf("Env() = %q for %v", env, c.NCCLEnv)
	}
	for _, e := range env {
		k, v, _ := strings.Cut(e, "=")
		if got, ok := c.NCCLEnv[k]; !ok || got != v {
			t.Fatalf("Env() entry %q is not in %v", e, c.NCCLEnv)
		}
	}
}

// checkRequestEnv asserts that the parameters as a claim config for
// driver gpufabric.dev give the decoded config's variables, or an error
// naming the config's position when they do not decode.
func checkRequestEnv(t *testing.T, raw []byte, c *FabricConfig, decodeErr error) {
	t.Helper()
	got, err := RequestEnv([]resourceapi.DeviceAllocationConfiguration{opaque(resourceapi.AllocationConfigSourceClaim, "gpufabric.dev", string(raw))}, []string{"gpus"})
	if decodeErr != nil {
		if err == nil || err.Error() != "config[0] (FromClaim): "+decodeErr.Error() {
			t.Fatalf("RequestEnv error = %v, want the decode error %q at config[0]", err, decodeErr)
		}
		return
	}
	if err != nil || !slices.Equal(got["gpus"], c.Env()) {
		t.Fatalf("RequestEnv = %q, %v; want %q", got["gpus"], err, c.Env())
	}
}
