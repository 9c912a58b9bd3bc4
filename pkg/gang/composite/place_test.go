package composite_test

import (
	"context"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"sigs.k8s.io/yaml"
)

var update = flag.Bool("update", false, "rewrite testdata/trees/*.golden")

// TestTrees places the golden corpus of trees (testdata/trees): each
// file's trees in order on one cluster, and compares the outcome (where
// each leaf's pods go, each keyed group's domain, or the refusal) with its
// golden file. Several cases are trees where the greedy sibling order
// dead-ends and the joint search finds a placement (search: true).
func TestTrees(t *testing.T) {
	files, err := filepath.Glob("testdata/trees/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no trees: %v", err)
	}
	for _, file := range files {
		name := strings.TrimSuffix(filepath.Base(file), ".yaml")
		t.Run(name, func(t *testing.T) {
			got, err := yaml.Marshal(runTrees(context.Background(), t, readTrees(t, file)))
			if err != nil {
				t.Fatal(err)
			}
			golden := strings.TrimSuffix(file, ".yaml") + ".golden"
			if *update {
				if err := os.WriteFile(golden, got, 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run with -update)", err)
			}
			if diff := cmp.Diff(string(want), string(got)); diff != "" {
				t.Errorf("outcome differs from %s (-want +got):\n%s", golden, diff)
			}
		})
	}
}
