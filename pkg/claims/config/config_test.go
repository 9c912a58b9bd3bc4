package config

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

const head = `"apiVersion": "gpufabric.dev/v1alpha1", "kind": "FabricConfig"`

func params(body string) string { return "{" + head + body + "}" }

type decodeCase struct {
	raw     string
	wantEnv []string
	wantErr string // substring; "" means valid
}

func manyKeys(n int) string {
	var b strings.Builder
	for i := range n {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(`"NCCL_K` + strings.Repeat("X", i+1) + `": "1"`)
	}
	return `, "ncclEnv": {` + b.String() + `}`
}

func decodeCases() map[string]decodeCase {
	return map[string]decodeCase{
		"valid":              {raw: params(`, "ncclEnv": {"NCCL_DEBUG": "INFO", "NCCL_IB_TIMEOUT": "22"}`), wantEnv: []string{"NCCL_DEBUG=INFO", "NCCL_IB_TIMEOUT=22"}},
		"no env":             {raw: params(``), wantEnv: []string{}},
		"null env":           {raw: params(`, "ncclEnv": null`), wantEnv: []string{}},
		"empty value":        {raw: params(`, "ncclEnv": {"NCCL_DEBUG": ""}`), wantEnv: []string{"NCCL_DEBUG="}},
		"value at limit":     {raw: params(`, "ncclEnv": {"NCCL_X": "` + strings.Repeat("v", 256) + `"}`), wantEnv: []string{"NCCL_X=" + strings.Repeat("v", 256)}},
		"32 entries":         {raw: params(manyKeys(32)), wantEnv: nil},
		"empty":              {raw: ``, wantErr: "parameters: "},
		"not an object":      {raw: `[1]`, wantErr: "parameters: "},
		"too large":          {raw: params(`, "x": "` + strings.Repeat("a", MaxParametersSize) + `"`), wantErr: "parameters: 65609 bytes, more than the limit of 65536"},
		"wrong api version":  {raw: `{"apiVersion": "gpufabric.dev/v1", "kind": "FabricConfig"}`, wantErr: `apiVersion: "gpufabric.dev/v1" is not "gpufabric.dev/v1alpha1"`},
		"missing kind":       {raw: `{"apiVersion": "gpufabric.dev/v1alpha1"}`, wantErr: `kind: "" is not "FabricConfig"`},
		"kind of other case": {raw: `{"apiVersion": "gpufabric.dev/v1alpha1", "kind": "fabricconfig"}`, wantErr: `kind: "fabricconfig"`},
		"case of field":      {raw: params(`, "ncclenv": {}`), wantErr: `parameters: unknown field "ncclenv"`},
		"unknown field":      {raw: params(`, "ncclEnv": {}, "mode": "fast"`), wantErr: `parameters: unknown field "mode"`},
		"duplicate field":    {raw: params(`, "ncclEnv": {}, "ncclEnv": {}`), wantErr: `parameters: duplicate field "ncclEnv"`},
		"duplicate key":      {raw: params(`, "ncclEnv": {"NCCL_A": "1", "NCCL_A": "2"}`), wantErr: `duplicate field "ncclEnv.NCCL_A"`},
		"wrong value type":   {raw: params(`, "ncclEnv": {"NCCL_A": 1}`), wantErr: "parameters: "},
		"33 entries":         {raw: params(manyKeys(33)), wantErr: "ncclEnv: 33 entries, more than the limit of 32"},
		"lower-case key":     {raw: params(`, "ncclEnv": {"nccl_debug": "INFO"}`), wantErr: `ncclEnv["nccl_debug"]: key must match ^NCCL_[A-Z0-9_]{1,64}$`},
		"other prefix":       {raw: params(`, "ncclEnv": {"LD_PRELOAD": "x.so"}`), wantErr: `ncclEnv["LD_PRELOAD"]: key must match`},
		"prefix only":        {raw: params(`, "ncclEnv": {"NCCL_": "1"}`), wantErr: `ncclEnv["NCCL_"]`},
		"key too long":       {raw: params(`, "ncclEnv": {"NCCL_` + strings.Repeat("A", 65) + `": "1"}`), wantErr: "key must match"},
		"driver key":         {raw: params(`, "ncclEnv": {"NCCL_IB_HCA": "mlx5_0"}`), wantErr: "ncclEnv[NCCL_IB_HCA]: set by the driver from the allocation"},
		"value too long":     {raw: params(`, "ncclEnv": {"NCCL_X": "` + strings.Repeat("v", 257) + `"}`), wantErr: "ncclEnv[NCCL_X]: value is 257 bytes, more than the limit of 256"},
		"value with newline": {raw: params(`, "ncclEnv": {"NCCL_X": "a\nB=c"}`), wantErr: "ncclEnv[NCCL_X]: value \"a\\nB=c\" contains a NUL or a line break"},
		"value with nul":     {raw: params(`, "ncclEnv": {"NCCL_X": "a\u0000"}`), wantErr: "contains a NUL"},
	}
}

func TestDecode(t *testing.T) {
	for name, tc := range decodeCases() {
		t.Run(name, func(t *testing.T) {
			c, err := Decode([]byte(tc.raw))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Decode error = %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Decode: %v", err)
			}
			if tc.wantEnv == nil {
				return // only that it is valid
			}
			if diff := cmp.Diff(tc.wantEnv, c.Env()); diff != "" {
				t.Errorf("Env (-want +got):\n%s", diff)
			}
		})
	}
}

func opaque(source resourceapi.AllocationConfigSource, driver, raw string, requests ...string) resourceapi.DeviceAllocationConfiguration {
	return resourceapi.DeviceAllocationConfiguration{
		Source:   source,
		Requests: requests,
		DeviceConfiguration: resourceapi.DeviceConfiguration{Opaque: &resourceapi.OpaqueDeviceConfiguration{
			Driver: driver, Parameters: runtime.RawExtension{Raw: []byte(raw)},
		}},
	}
}

func env(kv string) string { return params(`, "ncclEnv": {` + kv + `}`) }

type requestEnvCase struct {
	configs  []resourceapi.DeviceAllocationConfiguration
	requests []string
	want     map[string][]string
	wantErr  string
}

func requestEnvCases() map[string]requestEnvCase {
	const (
		class = resourceapi.AllocationConfigSourceClass
		claim = resourceapi.AllocationConfigSourceClaim
		us    = "gpufabric.dev"
	)
	return map[string]requestEnvCase{
		"none": {requests: []string{"gpus"}, want: map[string][]string{}},
		"all requests": {
			configs:  []resourceapi.DeviceAllocationConfiguration{opaque(claim, us, env(`"NCCL_DEBUG": "INFO"`))},
			requests: []string{"gpus", "nics"},
			want:     map[string][]string{"gpus": {"NCCL_DEBUG=INFO"}, "nics": {"NCCL_DEBUG=INFO"}},
		},
		"claim overrides class whatever the list order": {
			configs: []resourceapi.DeviceAllocationConfiguration{
				opaque(claim, us, env(`"NCCL_DEBUG": "WARN"`)),
				opaque(class, us, env(`"NCCL_DEBUG": "INFO", "NCCL_ALGO": "Ring"`)),
			},
			requests: []string{"gpus"},
			want:     map[string][]string{"gpus": {"NCCL_ALGO=Ring", "NCCL_DEBUG=WARN"}},
		},
		"later config of one source wins": {
			configs: []resourceapi.DeviceAllocationConfiguration{
				opaque(claim, us, env(`"NCCL_DEBUG": "INFO"`)),
				opaque(claim, us, env(`"NCCL_DEBUG": "TRACE"`)),
			},
			requests: []string{"gpus"},
			want:     map[string][]string{"gpus": {"NCCL_DEBUG=TRACE"}},
		},
		"per request and subrequest": {
			configs: []resourceapi.DeviceAllocationConfiguration{
				opaque(claim, us, env(`"NCCL_A": "1"`), "gpus"),
				opaque(claim, us, env(`"NCCL_B": "2"`), "nics"),
			},
			requests: []string{"gpus/h100", "nics", "fabric"},
			want:     map[string][]string{"gpus/h100": {"NCCL_A=1"}, "nics": {"NCCL_B=2"}},
		},
		"other drivers and non-opaque entries are ignored": {
			configs: []resourceapi.DeviceAllocationConfiguration{
				opaque(claim, "gpu.nvidia.com", `{"not": "ours"}`),
				{Source: claim},
			},
			requests: []string{"gpus"},
			want:     map[string][]string{},
		},
		"invalid config of another request is an error": {
			configs: []resourceapi.DeviceAllocationConfiguration{
				opaque(class, us, env(`"NCCL_A": "1"`)),
				opaque(claim, us, env(`"nccl_a": "1"`), "other"),
			},
			requests: []string{"gpus"},
			wantErr:  `config[1] (FromClaim): ncclEnv["nccl_a"]: key must match`,
		},
		"unknown source": {
			configs:  []resourceapi.DeviceAllocationConfiguration{opaque("FromNowhere", us, env(``))},
			requests: []string{"gpus"},
			wantErr:  `config[0] (FromNowhere): source: "FromNowhere" is not FromClass or FromClaim`,
		},
	}
}

func TestRequestEnv(t *testing.T) {
	for name, tc := range requestEnvCases() {
		t.Run(name, func(t *testing.T) {
			got, err := RequestEnv(tc.configs, tc.requests)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("RequestEnv error = %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// TestDecodeErrorsBounded: values of any length a claim writes (an
// apiVersion, a kind, an unknown field's name, an ncclEnv key) are quoted
// cut short in the error.
func TestDecodeErrorsBounded(t *testing.T) {
	long := strings.Repeat("x", 60<<10)
	for name, raw := range map[string]string{
		"apiVersion":    `{"apiVersion":"` + long + `","kind":"FabricConfig"}`,
		"kind":          `{"apiVersion":"gpufabric.dev/v1alpha1","kind":"` + long + `"}`,
		"unknown field": `{"apiVersion":"gpufabric.dev/v1alpha1","kind":"FabricConfig","` + long + `":1}`,
		"ncclEnv key":   `{"apiVersion":"gpufabric.dev/v1alpha1","kind":"FabricConfig","ncclEnv":{"` + long + `":"1"}}`,
	} {
		_, err := Decode([]byte(raw))
		if err == nil || len(err.Error()) > 1024 {
			t.Errorf("%s: error %.200v, want one of at most 1024 bytes", name, err)
		}
	}
}
