package devices

import (
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/util/validation"
)

func TestLabelValue(t *testing.T) {
	tests := map[string]struct{ in, want string }{
		"spaces":         {in: "2 of 18 nvlinks down", want: "2-of-18-nvlinks-down"},
		"nvml error":     {in: "GetMemoryInfo ERROR_UNKNOWN", want: "GetMemoryInfo-ERROR_UNKNOWN"},
		"punctuation":    {in: "link 0: Unknown Error!", want: "link-0-Unknown-Error"},
		"leading junk":   {in: "  -x-  ", want: "x"},
		"non-ascii":      {in: "état ok", want: "tat-ok"},
		"empty":          {in: "", want: ""},
		"cut to 63":      {in: strings.Repeat("ab ", 40), want: strings.Repeat("ab-", 21)[:62]},
		"dots kept":      {in: "v1.2", want: "v1.2"},
		"repeated space": {in: "a   b", want: "a-b"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got := labelValue(tc.in)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("labelValue(%q) (-want +got):\n%s", tc.in, diff)
			}
			if msgs := validation.IsValidLabelValue(got); len(msgs) > 0 {
				t.Errorf("labelValue(%q) = %q is not a label value: %v", tc.in, got, msgs)
			}
		})
	}
}

func TestSemver(t *testing.T) {
	tests := map[string]struct {
		in   string
		want string
		ok   bool
	}{
		"compute capability": {in: "9.0", want: "9.0.0", ok: true},
		"driver":             {in: "560.28.03", want: "560.28.3", ok: true},
		"four parts":         {in: "535.104.05.1", want: "535.104.5", ok: true},
		"major only":         {in: "12", want: "12.0.0", ok: true},
		"empty":              {in: "", ok: false},
		"garbage":            {in: "r560", ok: false},
		"negative":           {in: "1.-2", ok: false},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, ok := semver(tc.in)
			if diff := cmp.Diff([]any{tc.want, tc.ok}, []any{got, ok}); diff != "" {
				t.Errorf("semver(%q) (-want +got):\n%s", tc.in, diff)
			}
		})
	}
}

func TestParseRate(t *testing.T) {
	tests := map[string]struct {
		in      string
		want    int
		wantErr bool
	}{
		"ndr":      {in: "400 Gb/sec (4X NDR)", want: 400},
		"fraction": {in: "2.5 Gb/sec (1X SDR)", want: 2},
		"no unit":  {in: "400", wantErr: true},
		"garbage":  {in: "fast", wantErr: true},
		"empty":    {in: "", wantErr: true},
		"negative": {in: "-1 Gb/sec", wantErr: true},
		"nan":      {in: "NaN Gb/sec", wantErr: true},
		"infinite": {in: "Inf Gb/sec", wantErr: true},
		"overflow": {in: "1e300 Gb/sec", wantErr: true},
		"too fast": {in: "1e7 Gb/sec", wantErr: true},
		"highest":  {in: "100000 Gb/sec", want: maxRateGbps},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := parseRate(tc.in)
			if (err != nil) != tc.wantErr {
				t.Fatalf("parseRate(%q) error = %v, want error %t", tc.in, err, tc.wantErr)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("parseRate(%q) (-want +got):\n%s", tc.in, diff)
			}
		})
	}
}

func TestSharedPCIAncestors(t *testing.T) {
	const sw = "devices/pci0000:10/0000:10:01.0/0000:11:00.0"
	tests := map[string]struct {
		a, b string
		want int
	}{
		"same switch":        {a: sw + "/0000:12:00.0/0000:13:00.0", b: sw + "/0000:12:01.0/0000:14:00.0", want: 3},
		"same root complex":  {a: sw + "/0000:12:00.0/0000:13:00.0", b: "devices/pci0000:10/0000:10:02.0/0000:20:00.0", want: 1},
		"different roots":    {a: sw + "/0000:12:00.0/0000:13:00.0", b: "devices/pci0000:20/0000:20:01.0/0000:21:00.0", want: 0},
		"unknown path":       {a: "", b: sw, want: 0},
		"device never count": {a: sw, b: sw, want: 2},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, sharedPCIAncestors(tc.a, tc.b)); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// TestSplitSlices checks the per-slice device limits: 128, or 64 once a
// slice holds a tainted device.
func TestSplitSlices(t *testing.T) {
	devs := func(n int, taintedAt ...int) []resourceapi.Device {
		out := make([]resourceapi.Device, n)
		for i := range out {
			out[i].Name = fmt.Sprintf("gpu-%d", i)
		}
		for _, i := range taintedAt {
			out[i].Taints = []resourceapi.DeviceTaint{newTaint("k", "v")}
		}
		return out
	}
	tests := map[string]struct {
		devs []resourceapi.Device
		want []int
	}{
		"empty pool has one slice":      {devs: nil, want: []int{0}},
		"one slice":                     {devs: devs(128), want: []int{128}},
		"untainted split at 128":        {devs: devs(300), want: []int{128, 128, 44}},
		"tainted split at 64":           {devs: devs(130, 0), want: []int{64, 66}},
		"taint late in a full slice":    {devs: devs(200, 100), want: []int{100, 64, 36}},
		"taint exactly at the boundary": {devs: devs(129, 64), want: []int{64, 64, 1}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			var got []int
			for _, s := range splitSlices(tc.devs) {
				got = append(got, len(s.Devices))
				limit := maxDevicesPerSlice
				for _, d := range s.Devices {
					if len(d.Taints) > 0 {
						limit = maxTaintedDevicesPerSlice
					}
				}
				if len(s.Devices) > limit {
					t.Errorf("slice with %d devices exceeds limit %d", len(s.Devices), limit)
				}
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("slice sizes (-want +got):\n%s", diff)
			}
		})
	}
}
