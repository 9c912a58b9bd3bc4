package fsutil

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestWriteFileAtomic(t *testing.T) {
	errCheck := errors.New("check failed")
	tests := []struct {
		name     string
		check    func(string) error
		wantErr  error
		wantData string
	}{
		{name: "written", wantData: "new"},
		{name: "check sees the temp file", check: func(p string) error {
			if b, err := os.ReadFile(p); err != nil || string(b) != "new" {
				return errCheck
			}
			return nil
		}, wantData: "new"},
		{name: "check fails keeps old", check: func(string) error { return errCheck }, wantErr: errCheck, wantData: "old"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			p := filepath.Join(dir, "f.json")
			if err := os.WriteFile(p, []byte("old"), 0o600); err != nil {
				t.Fatal(err)
			}
			err := WriteFileAtomic(p, []byte("new"), 0o644, true, tc.check)
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("error = %v, want %v", err, tc.wantErr)
			}
			b, _ := os.ReadFile(p)
			if diff := cmp.Diff(tc.wantData, string(b)); diff != "" {
				t.Errorf("content (-want +got):\n%s", diff)
			}
			entries, _ := os.ReadDir(dir)
			if len(entries) != 1 {
				t.Errorf("directory has %d entries, want 1 (no temp file left)", len(entries))
			}
		})
	}
}

func TestRemoveAndStaleTemps(t *testing.T) {
	dir := t.TempDir()
	stale := filepath.Join(dir, ".f.json.123"+TempSuffix)
	other := filepath.Join(dir, ".other.123"+TempSuffix)
	for _, p := range []string{stale, other} {
		if err := os.WriteFile(p, nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	removed, err := RemoveStaleTemps(dir, "f.json")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{stale}, removed); diff != "" {
		t.Errorf("removed (-want +got):\n%s", diff)
	}
	if err := Remove(filepath.Join(dir, "missing"), true); err != nil {
		t.Errorf("Remove of a missing file: %v", err)
	}
	if err := Remove(other, true); err != nil {
		t.Errorf("Remove: %v", err)
	}
}
