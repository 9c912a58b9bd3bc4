package devices

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/util/validation"
)

// Fuzz targets for the sysfs readers: everything under /sys is input the
// plugin does not control (a broken driver, a renamed RDMA device, a bind
// mount of the wrong tree). The oracles are the documented results plus
// what the API server accepts.

// FuzzParseRate checks parseRate on any ports/N/rate content: no panic;
// a success is a whole number of Gb/s within 0..maxRateGbps that matches
// the number before " Gb/sec" (cut, not rounded).
func FuzzParseRate(f *testing.F) {
	for _, s := range []string{"400 Gb/sec (4X NDR)", "200 Gb/sec (4X HDR)", "2.5 Gb/sec (1X SDR)", "100 Gb/sec", "0 Gb/sec", "-1 Gb/sec", "lots", "", "1e3 Gb/sec"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, err := parseRate(s)
		if err != nil {
			if got != 0 || !strings.Contains(err.Error(), strconv.Quote(s)) {
				t.Fatalf("parseRate(%q) = %d, %v; want 0 and an error quoting the input", s, got, err)
			}
			return
		}
		if got < 0 || got > maxRateGbps {
			t.Fatalf("parseRate(%q) = %d, outside 0..%d", s, got, maxRateGbps)
		}
		num, unit, _ := strings.Cut(s, " ")
		f, perr := strconv.ParseFloat(num, 64)
		if perr != nil || !strings.HasPrefix(unit, "Gb/sec") || math.Floor(f) != float64(got) {
			t.Fatalf("parseRate(%q) = %d, but the number is %q (%v) and the unit %q", s, got, num, perr, unit)
		}
	})
}

// FuzzParseEnumFile checks parseEnumFile and readTrimmed on any file
// content: no panic; a success is "N: NAME" with a numeric N and a
// non-empty, trimmed NAME taken from the file; a failure is UNKNOWN; what
// readTrimmed returns is trimmed and at most maxSysfsFileSize bytes.
func FuzzParseEnumFile(f *testing.F) {
	for _, s := range []string{"4: ACTIVE\n", "1: DOWN\n", "5: LinkUp\n", "3: Disabled", "ACTIVE-ish\n", "", ":", "4:", " 4 :  ACTIVE  ", "x: ACTIVE"} {
		f.Add([]byte(s))
	}
	path := filepath.Join(f.TempDir(), "state")
	f.Fuzz(func(t *testing.T, content []byte) {
		if err := os.WriteFile(path, content, 0o644); err != nil {
			t.Fatal(err)
		}
		raw := readTrimmed(path)
		if len(raw) > maxSysfsFileSize || raw != strings.TrimSpace(raw) {
			t.Fatalf("readTrimmed gave %d bytes %q; want trimmed, at most %d", len(raw), raw, maxSysfsFileSize)
		}
		name, ok := parseEnumFile(path)
		if !ok {
			if name != portStateUnknown {
				t.Fatalf("failed parse returned %q, want %q", name, portStateUnknown)
			}
			return
		}
		num, rest, found := strings.Cut(raw, ":")
		if _, err := strconv.Atoi(strings.TrimSpace(num)); err != nil || !found {
			t.Fatalf("parseEnumFile accepted %q without a numeric prefix", raw)
		}
		if name == "" || name != strings.TrimSpace(rest) {
			t.Fatalf("parseEnumFile(%q) = %q, want the trimmed text after the colon", raw, name)
		}
	})
}

var (
	guidForm  = regexp.MustCompile(`^[0-9a-fA-F]{4}(:[0-9a-fA-F]{4}){3}$`)
	busIDForm = regexp.MustCompile(`^([0-9a-f]{4}):([0-9a-f]{2}):([0-9a-f]{2})\.([0-7])$`)
)

// FuzzIdentifiers checks validGUID and validBusID on any string: no panic;
// each accepts exactly its documented form (checked independently), and an
// accepted bus id reformats to itself from its parsed numbers.
func FuzzIdentifiers(f *testing.F) {
	for _, s := range []string{"0c42:a103:0012:3456", "0000:13:00.0", "0000:c1:00.7", "0000:13:00.8", "0C42:A103:0012:3456", "+c42:a103:0012:3456", "0x42:a103:0012:3456", "", "::::"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if got, want := validGUID(s), guidForm.MatchString(s); got != want {
			t.Fatalf("validGUID(%q) = %t, want %t", s, got, want)
		}
		err := validBusID(s)
		m := busIDForm.FindStringSubmatch(s)
		if (err == nil) != (m != nil) {
			t.Fatalf("validBusID(%q) = %v, want accepted %t", s, err, m != nil)
		}
		if m == nil {
			return
		}
		var n [4]uint64
		for i := range n {
			n[i], _ = strconv.ParseUint(m[i+1], 16, 16)
		}
		if re := fmt.Sprintf("%04x:%02x:%02x.%x", n[0], n[1], n[2], n[3]); re != s {
			t.Fatalf("bus id %q reformats to %q", s, re)
		}
	})
}

// FuzzCompareIBDevice checks that compareIBDevice is a total order (0 only
// for equal names, antisymmetric, transitive) and that splitTrailingNumber
// splits a name into a prefix without trailing digit and its digits.
func FuzzCompareIBDevice(f *testing.F) {
	f.Add("mlx5_2", "mlx5_10", "mlx5_1")
	f.Add("mlx5_01", "mlx5_1", "mlx5_001")
	f.Add("ibp1s0f0", "ibp1s0f1", "rocep1s0f0")
	f.Add("x99999999999999999999", "x99999999999999999998", "x")
	f.Fuzz(func(t *testing.T, a, b, c string) {
		for _, s := range []string{a, b, c} {
			checkSplit(t, s)
		}
		ab, ba := compareIBDevice(a, b), compareIBDevice(b, a)
		if (ab == 0) != (a == b) || sign(ab) != -sign(ba) {
			t.Fatalf("compare(%q, %q) = %d, compare(%q, %q) = %d", a, b, ab, b, a, ba)
		}
		bc, ac := compareIBDevice(b, c), compareIBDevice(a, c)
		if ab < 0 && bc < 0 && ac >= 0 || ab > 0 && bc > 0 && ac <= 0 {
			t.Fatalf("not transitive: compare(%q,%q)=%d compare(%q,%q)=%d compare(%q,%q)=%d", a, b, ab, b, c, bc, a, c, ac)
		}
	})
}

func checkSplit(t *testing.T, s string) {
	t.Helper()
	prefix, digits := splitTrailingNumber(s)
	if prefix+digits != s || strings.TrimLeft(digits, "0123456789") != "" {
		t.Fatalf("splitTrailingNumber(%q) = %q, %q", s, prefix, digits)
	}
	if prefix != "" && prefix[len(prefix)-1] >= '0' && prefix[len(prefix)-1] <= '9' {
		t.Fatalf("splitTrailingNumber(%q): prefix %q ends in a digit", s, prefix)
	}
}

func sign(n int) int {
	switch {
	case n < 0:
		return -1
	case n > 0:
		return 1
	}
	return 0
}

// checkDeviceAPI asserts what the API server checks on a published device
// (and what survives JSON): string attributes of at most 64 bytes of valid
// UTF-8 (JSON would replace invalid bytes and so lengthen the value),
// qualified taint keys and label-value taint values.
func checkDeviceAPI(t *testing.T, d resourceapi.Device) {
	t.Helper()
	for name, a := range d.Attributes {
		if v := a.StringValue; v != nil && (len(*v) > resourceapi.DeviceAttributeMaxValueLength || !utf8.ValidString(*v)) {
			t.Fatalf("device %s: attribute %s = %q is too long or not UTF-8", d.Name, name, *v)
		}
	}
	for _, tn := range d.Taints {
		if msgs := append(validation.IsQualifiedName(tn.Key), validation.IsValidLabelValue(tn.Value)...); len(msgs) > 0 {
			t.Fatalf("device %s: taint %s=%s: %v", d.Name, tn.Key, tn.Value, msgs)
		}
	}
}
