package fabrichealth

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

func TestReadIBPorts(t *testing.T) {
	root := t.TempDir()
	write := func(hca, port, name, content string) {
		dir := filepath.Join(root, "class", "infiniband", hca, "ports", port, "counters")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("mlx5_0", "1", LinkDowned, "3\n")
	write("mlx5_0", "1", SymbolError, "65535\n")
	write("mlx5_0", "1", PortRcvErrors, "garbage\n") // left out
	// link_error_recovery missing: left out, not an error.
	write("mlx5_1", "2", LinkErrorRecovery, "7")
	got := ReadIBPorts(context.Background(), root, []Port{
		{Name: "nic-mlx5-0", IBDevice: "mlx5_0", Port: 1},
		{Name: "nic-mlx5-1", IBDevice: "mlx5_1", Port: 2},
		{Name: "nic-gone", IBDevice: "mlx5_9", Port: 1},
		{Name: "nic-evil", IBDevice: "../../etc", Port: 1},
	})
	want := []Reading{
		{Device: "nic-mlx5-0", Counter: LinkDowned, Link: 1, Value: 3},
		{Device: "nic-mlx5-0", Counter: SymbolError, Link: 1, Value: 65535},
		{Device: "nic-mlx5-1", Counter: LinkErrorRecovery, Link: 2, Value: 7},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("ReadIBPorts =\n%v\nwant\n%v", got, want)
	}
}
