package inspect

import (
	"bytes"
	"encoding/json"
	"flag"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/gpufabric/gpufabric/pkg/gang/placement/spares"
	"sigs.k8s.io/yaml"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden")

// TestRenderGolden renders every report of the scenario as a table and
// compares it with testdata/<name>.golden (go test -run TestRenderGolden
// -update rewrites them).
func TestRenderGolden(t *testing.T) {
	st := Style{Now: testNow}
	tests := []struct {
		name   string
		render func(c *Cluster, w io.Writer) error
	}{
		{"status", func(c *Cluster, w io.Writer) error {
			r, err := BuildStatus(c, testLevels)
			if err != nil {
				return err
			}
			return RenderStatus(w, r, st)
		}},
		{"status-no-levels-narrow", func(c *Cluster, w io.Writer) error {
			r, err := BuildStatus(c, Options{})
			if err != nil {
				return err
			}
			return RenderStatus(w, r, Style{BarWidth: 4, Now: testNow})
		}},
		{"status-spares", func(c *Cluster, w io.Writer) error {
			opts := testLevels
			opts.Spares = spares.Policy{PerDomain: 2}
			r, err := BuildStatus(c, opts)
			if err != nil {
				return err
			}
			return RenderStatus(w, r, st)
		}},
		{"nodes", func(c *Cluster, w io.Writer) error {
			r, err := BuildNodes(c, testLevels)
			if err != nil {
				return err
			}
			return RenderNodes(w, r)
		}},
		{"explain-placed", explainRender("team-a", "train", st)},
		{"explain-waiting", explainRender("team-b", "big", st)},
		{"explain-not-found", explainRender("team-b", "ghost", st)},
		{"explain-all", func(c *Cluster, w io.Writer) error {
			r, err := BuildGroups(c, testLevels)
			if err != nil {
				return err
			}
			return RenderGroups(w, r, true)
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			if err := tc.render(scenario().c, &out); err != nil {
				t.Fatal(err)
			}
			checkGolden(t, filepath.Join("testdata", tc.name+".golden"), out.String())
		})
	}
}

func explainRender(ns, name string, st Style) func(c *Cluster, w io.Writer) error {
	return func(c *Cluster, w io.Writer) error {
		r, err := BuildExplain(c, testLevels, ns, name, 10)
		if err != nil {
			return err
		}
		return RenderExplain(w, r, st)
	}
}

func checkGolden(t *testing.T, path, got string) {
	t.Helper()
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read golden (run with -update to create it): %v", err)
	}
	if diff := cmp.Diff(string(want), got); diff != "" {
		t.Errorf("%s differs (-want +got; -update rewrites it):\n%s", path, diff)
	}
}

// TestWriteFormats: JSON and YAML decode back to the same report; a wrong
// format is an error naming the choices.
func TestWriteFormats(t *testing.T) {
	r, err := BuildStatus(scenario().c, testLevels)
	if err != nil {
		t.Fatal(err)
	}
	noTable := func(io.Writer) error { t.Error("table rendered"); return nil }
	for _, format := range []string{FormatJSON, FormatYAML} {
		var out bytes.Buffer
		if err := Write(&out, format, r, noTable); err != nil {
			t.Fatal(err)
		}
		var back StatusReport
		decode := json.Unmarshal
		if format == FormatYAML {
			decode = func(b []byte, v any) error { return yaml.UnmarshalStrict(b, v) }
		}
		if err := decode(out.Bytes(), &back); err != nil {
			t.Fatalf("%s: %v\n%s", format, err, out.String())
		}
		if diff := cmp.Diff(r, &back); diff != "" {
			t.Errorf("%s round trip (-want +got):\n%s", format, diff)
		}
	}
	if !strings.Contains(Write(io.Discard, "wide", r, noTable).Error(), "table, json, yaml") {
		t.Error("unknown format: error does not list the formats")
	}
	called := false
	if err := Write(io.Discard, FormatTable, r, func(io.Writer) error { called = true; return nil }); err != nil || !called {
		t.Errorf("table format: called %v, err %v", called, err)
	}
}
