package envflag

import (
	"flag"
	"strings"
	"testing"
)

// TestApply: a flag not given takes its twin's value; one given keeps the
// command line's; a bad value names the variable and the flag.
func TestApply(t *testing.T) {
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	a, b := fs.Int("a", 1, ""), fs.Int("b", 1, "")
	if err := fs.Parse([]string{"--b=5"}); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"A": "7", "B": "9"}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	if err := Apply(fs, map[string]string{"a": "A", "b": "B"}, lookup); err != nil || *a != 7 || *b != 5 {
		t.Errorf("a=%d b=%d err %v, want 7 (from A), 5 (given)", *a, *b, err)
	}
	env["A"] = "x"
	fresh := flag.NewFlagSet("y", flag.ContinueOnError)
	fresh.Int("a", 1, "")
	if err := Apply(fresh, map[string]string{"a": "A"}, lookup); err == nil || !strings.Contains(err.Error(), "environment A for --a") {
		t.Errorf("bad value: %v", err)
	}
}
