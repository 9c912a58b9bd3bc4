package archtest

import (
	"strings"
	"testing"
)

// wiring: what cmd/ and hack/ may import. A binary wires components of
// pkg/ (the scheduler only through its loop and config, never a room
// directly); no binary imports another, hack/ or test/; hack/ (the demo)
// may use the test framework to start a control plane, never a binary's
// package.
var wiring = []struct {
	prefix string
	may    []string
	never  []string
}{
	{"cmd/", []string{"pkg/"}, []string{"pkg/gang/queue", "pkg/gang/commit", "pkg/gang/evict", "pkg/gang/guard", "pkg/gang/nodetrust", "pkg/gang/replace"}},
	{"hack/", []string{"pkg/", "test/integration/framework"}, nil},
}

// TestWiringLayering holds cmd/ and hack/ to wiring.
func TestWiringLayering(t *testing.T) {
	lines := goList(t, "-f", `{{.ImportPath}}:{{join .Imports ","}}`, module+"cmd/...", module+"hack/...")
	checked := 0
	for _, line := range lines {
		pkg, imports, _ := strings.Cut(line, ":")
		rel := strings.TrimPrefix(pkg, module)
		for _, w := range wiring {
			if !strings.HasPrefix(rel, w.prefix) {
				continue
			}
			for _, imp := range strings.Split(imports, ",") {
				dep, ok := strings.CutPrefix(imp, module)
				if !ok {
					continue
				}
				checked++
				if !wired(dep, w.may, w.never) {
					t.Errorf("%s imports %s; %s may import only %v (never %v)", rel, dep, w.prefix, w.may, w.never)
				}
			}
		}
	}
	if checked == 0 {
		t.Fatal("no import of cmd/ or hack/ checked: go list returned nothing useful")
	}
}

func wired(dep string, may, never []string) bool {
	for _, n := range never {
		if dep == n || strings.HasPrefix(dep, n+"/") {
			return false
		}
	}
	for _, m := range may {
		if strings.HasPrefix(dep, m) || dep == strings.TrimSuffix(m, "/") {
			return true
		}
	}
	return false
}

func TestWired(t *testing.T) {
	for _, c := range []struct {
		dep  string
		want bool
	}{
		{"pkg/gang/scheduler", true},
		{"pkg/gang/queue", false},
		{"cmd/scheduler", false},
		{"test/integration/framework", false},
	} {
		if got := wired(c.dep, wiring[0].may, wiring[0].never); got != c.want {
			t.Errorf("cmd/ importing %s: allowed %v, want %v", c.dep, got, c.want)
		}
	}
}
