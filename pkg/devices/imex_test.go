package devices

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/klog/v2/ktesting"
)

const procDevices = `Character devices:
  1 mem
195 nvidia-frontend
234 nvidia-caps-imex-channels
235 nvidia-caps

Block devices:
  7 loop
`

func TestReadIMEX(t *testing.T) {
	tests := map[string]struct {
		devices, params *string
		want            IMEXInfo
	}{
		"driver with imex":       {devices: ptr(procDevices), params: ptr("ImexChannelCount: 128\n"), want: IMEXInfo{Major: 234, Channels: 128}},
		"no params: the default": {devices: ptr(procDevices), want: IMEXInfo{Major: 234, Channels: DefaultIMEXChannels}},
		"garbage count":          {devices: ptr(procDevices), params: ptr("ImexChannelCount: lots\n"), want: IMEXInfo{Major: 234, Channels: DefaultIMEXChannels}},
		"zero count":             {devices: ptr(procDevices), params: ptr("ImexChannelCount: 0\n"), want: IMEXInfo{Major: 234, Channels: DefaultIMEXChannels}},
		"huge count":             {devices: ptr(procDevices), params: ptr("ImexChannelCount: 99999999\n"), want: IMEXInfo{Major: 234, Channels: DefaultIMEXChannels}},
		"driver without imex":    {devices: ptr("Character devices:\n195 nvidia-frontend\n\nBlock devices:\n"), want: IMEXInfo{Channels: DefaultIMEXChannels}},
		"no /proc/devices":       {want: IMEXInfo{Channels: DefaultIMEXChannels}},
		"only a block device of that name": {
			devices: ptr("Character devices:\n  1 mem\nBlock devices:\n234 nvidia-caps-imex-channels\n"), want: IMEXInfo{Channels: DefaultIMEXChannels},
		},
		"a longer name does not count": {
			devices: ptr("Character devices:\n234 nvidia-caps-imex-channels-v2\n"), want: IMEXInfo{Channels: DefaultIMEXChannels},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			root := t.TempDir()
			if tc.devices != nil {
				writeTestFile(t, filepath.Join(root, "devices"), *tc.devices)
			}
			if tc.params != nil {
				writeTestFile(t, filepath.Join(root, "driver/nvidia/params"), *tc.params)
			}
			if diff := cmp.Diff(tc.want, readIMEX(ctx, root)); diff != "" {
				t.Errorf("readIMEX (-want +got):\n%s", diff)
			}
		})
	}
}

// FuzzCharDeviceMajor: on any /proc/devices content the result is 0 or a
// major in 1..4095 that a line of the content lists for exactly that name
// (the major and the name its only fields).
func FuzzCharDeviceMajor(f *testing.F) {
	for _, s := range []string{procDevices, "", "Character devices:\n99999 nvidia-caps-imex-channels\n", "Character devices:\n-1 nvidia-caps-imex-channels\n", "234 nvidia-caps-imex-channels"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		got := charDeviceMajor(data, IMEXDeviceName)
		if got == 0 {
			return
		}
		listed := false
		for _, line := range strings.Split(string(data), "\n") {
			listed = listed || slices.Equal(strings.Fields(line), []string{strconv.Itoa(got), IMEXDeviceName})
		}
		if got < 1 || got > 4095 || !listed {
			t.Fatalf("charDeviceMajor = %d for content %q", got, data)
		}
	})
}

func TestIMEXCtl(t *testing.T) {
	tests := map[string]struct {
		command []string
		want    string
		wantErr string
	}{
		"ready":                 {command: []string{"sh", "-c", "echo READY"}, want: "READY"},
		"not ready":             {command: []string{"sh", "-c", "printf '\\n  NOT_READY  \\nmore\\n'"}, want: "NOT_READY"},
		"control bytes cleaned": {command: []string{"sh", "-c", "printf 'A\\033[31mB'"}, want: "A?[31mB"},
		"fails":                 {command: []string{"sh", "-c", "echo connection refused >&2; exit 3"}, want: "connection refused", wantErr: `exit status 3 (output "connection refused")`},
		"silent":                {command: []string{"true"}, wantErr: "no output"},
		"no such command":       {command: []string{"/nonexistent/nvidia-imex-ctl", "-q"}, wantErr: "no such file"},
		"no command":            {wantErr: "no imex control command"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := IMEXCtl{Command: tc.command}.Status(t.Context())
			if tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) || tc.wantErr == "" && err != nil {
				t.Fatalf("error = %v, want one containing %q", err, tc.wantErr)
			}
			if got != tc.want {
				t.Errorf("status = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestIMEXCtlTimeout(t *testing.T) {
	start := time.Now()
	_, err := IMEXCtl{Command: []string{"sleep", "10"}, Timeout: 50 * time.Millisecond}.Status(t.Context())
	if err == nil || time.Since(start) > 5*time.Second {
		t.Fatalf("hung command: error %v after %v, want an error soon after 50ms", err, time.Since(start))
	}
}

func ptr[T any](v T) *T { return &v }

func writeTestFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}
