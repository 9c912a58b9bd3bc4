package archtest

import (
	"path"
	"strings"
	"testing"
)

// testCode reports whether a module package is test code: anything under
// test/, or a helper package named like placementtest.
func testCode(rel string) bool {
	return strings.HasPrefix(rel, "test/") || strings.HasSuffix(path.Base(rel), "test")
}

// TestBinariesLinkNoTestCode: no production binary (cmd/...) links a
// package under test/ or a *test helper package. Mocks that a binary
// offers as a feature (the kubelet plugin's --backend=mock) live in pkg/.
func TestBinariesLinkNoTestCode(t *testing.T) {
	lines := goList(t, "-f", `{{.ImportPath}}:{{join .Deps ","}}`, module+"cmd/...")
	if len(lines) == 0 {
		t.Fatal("go list cmd/... returned nothing")
	}
	for _, line := range lines {
		pkg, deps, _ := strings.Cut(line, ":")
		bin := strings.TrimPrefix(pkg, module)
		for _, d := range strings.Split(deps, ",") {
			dep, ok := strings.CutPrefix(d, module)
			if !ok || !testCode(dep) {
				continue
			}
			t.Errorf("%s links test code %s: production binaries never link test/ or *test packages", bin, dep)
		}
	}
	// The rule itself: a few names it must and must not catch.
	for _, c := range []struct {
		rel  string
		want bool
	}{
		{"test/integration/framework", true},
		{"pkg/gang/placement/placementtest", true},
		{"pkg/devices/mock", false},
		{"pkg/gang/placement", false},
		{"pkg/gang/placement/scenario", false},
	} {
		if got := testCode(c.rel); got != c.want {
			t.Errorf("testCode(%q) = %v, want %v", c.rel, got, c.want)
		}
	}
}
