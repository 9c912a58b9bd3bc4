package queue

import "testing"

func TestSplitKey(t *testing.T) {
	for _, tc := range []struct {
		key      string
		group    bool
		ns, name string
	}{{PodGroupKey("a", "b"), true, "a", "b"}, {"pod:x/y", false, "x", "y"}} {
		g, ns, name := SplitKey(tc.key)
		if g != tc.group || ns != tc.ns || name != tc.name {
			t.Errorf("SplitKey(%q) = %v %q %q", tc.key, g, ns, name)
		}
	}
}
