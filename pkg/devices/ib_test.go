package devices

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/klog/v2/ktesting"
)

func TestCompareIBDevice(t *testing.T) {
	tests := map[string]struct {
		a, b string
		want int // sign
	}{
		"numeric order":           {a: "mlx5_2", b: "mlx5_10", want: -1},
		"equal":                   {a: "mlx5_3", b: "mlx5_3", want: 0},
		"prefix first":            {a: "ibp1", b: "mlx5_0", want: -1},
		"leading zero first":      {a: "mlx5_01", b: "mlx5_1", want: -1},
		"longer than an int":      {a: "x99999999999999999999", b: "x100000000000000000000", want: -1},
		"no digits before digits": {a: "mlx", b: "mlx0", want: -1},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := sign(compareIBDevice(tc.a, tc.b)); got != tc.want {
				t.Errorf("compareIBDevice(%q, %q) sign = %d, want %d", tc.a, tc.b, got, tc.want)
			}
		})
	}
}

func TestReadTrimmedIsBounded(t *testing.T) {
	path := filepath.Join(t.TempDir(), "rate")
	if err := os.WriteFile(path, []byte(strings.Repeat("x", 1<<20)), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := len(readTrimmed(path)); got != maxSysfsFileSize {
		t.Errorf("readTrimmed read %d bytes, want %d", got, maxSysfsFileSize)
	}
}

func TestStringAttributeCut(t *testing.T) {
	tests := map[string]struct{ in, want string }{
		"short":                {in: "InfiniBand", want: "InfiniBand"},
		"cut at 64 bytes":      {in: strings.Repeat("a", 70), want: strings.Repeat("a", 64)},
		"cut before a rune":    {in: strings.Repeat("a", 63) + "é", want: strings.Repeat("a", 63)},
		"invalid utf-8":        {in: "ab\xffcd", want: "ab?cd"},
		"only invalid is kept": {in: "\xff", want: "?"},
		"empty is left out":    {in: "", want: ""},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			a := attributes{}
			a.str("x", tc.in)
			var got string
			if v := a["x"].StringValue; v != nil {
				got = *v
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// TestDiscoverNICsNames checks the rules for HCA names: a name that gives
// no valid device name, or the device name of an HCA listed before it,
// is skipped but keeps its rail; a device link leaving the sysfs root is
// not followed.
func TestDiscoverNICsNames(t *testing.T) {
	type nic struct {
		IBDevice string
		Rail     int
	}
	tests := map[string]struct {
		a, b hcaFiles
		want []nic
	}{
		"two good names":        {a: healthyHCA("mlx5_0"), b: healthyHCA("mlx5_1"), want: []nic{{"mlx5_0", 0}, {"mlx5_1", 1}}},
		"same device name":      {a: healthyHCA("mlx5_0"), b: healthyHCA("mlx5-0"), want: []nic{{"mlx5-0", 1}}},
		"trailing underscore":   {a: healthyHCA("mlx5_"), b: healthyHCA("mlx5_1"), want: []nic{{"mlx5_1", 1}}},
		"name too long":         {a: healthyHCA(strings.Repeat("m", 60)), b: healthyHCA("mlx5_1"), want: []nic{{"mlx5_1", 1}}},
		"device link escapes":   {a: withLink(healthyHCA("mlx5_0"), "../../../../../../../outside/BDF"), b: healthyHCA("mlx5_1"), want: []nic{{"mlx5_1", 0}}},
		"no link, class inside": {a: withLink(healthyHCA("mlx5_0"), ""), b: healthyHCA("mlx5_1"), want: []nic{{"mlx5_0", 0}, {"mlx5_1", 1}}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			root := t.TempDir()
			writeHCA(t, root, "pci0000:10", "0000:13:00.0", 0, tc.a)
			writeHCA(t, root, "pci0000:20", "0000:23:00.0", 1, tc.b)
			writeDecoy(t, root, "0000:13:00.0")
			nics, _, err := discoverNICs(ctx, filepath.Join(root, "sys"), filepath.Join(root, "dev"), nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			var got []nic
			for _, n := range nics {
				got = append(got, nic{n.IBDevice, n.Rail})
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("published NICs (-want +got):\n%s", diff)
			}
		})
	}
}

func withLink(h hcaFiles, link string) hcaFiles {
	h.deviceLink = link
	return h
}

func TestDiscoverNICsStopsWhenCancelled(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	root := t.TempDir()
	writeHCA(t, root, "pci0000:10", "0000:13:00.0", 0, healthyHCA("mlx5_0"))
	ctx, cancel := context.WithCancel(ctx)
	cancel()
	nics, _, err := discoverNICs(ctx, filepath.Join(root, "sys"), filepath.Join(root, "dev"), nil, nil)
	if !errors.Is(err, context.Canceled) || nics != nil {
		t.Errorf("discoverNICs = %v, %v; want no NICs and context.Canceled", nics, err)
	}
}
