package mock

import (
	"fmt"
	"os"
	"path/filepath"
)

// The fake NVIDIA driver installation under <dir>/driver, laid out as on a
// Debian/Ubuntu host, so that NVIDIA's nvcdi finds it as it finds a real
// one: the libraries of the driver version (empty files), the binaries
// (scripts that say what they are) and the GSP firmware.

// DriverLibraries are the driver's libraries in the fake installation.
func DriverLibraries(version string) []string {
	var out []string
	for _, l := range []string{"libcuda.so", "libnvidia-ml.so", "libnvidia-ptxjitcompiler.so", "libnvidia-nvvm.so", "libcudadebugger.so", "libnvidia-cfg.so"} {
		out = append(out, l+"."+version)
	}
	return out
}

// DriverBinaries are the driver's programs in the fake installation.
func DriverBinaries() []string {
	return []string{"nvidia-smi", "nvidia-debugdump", "nvidia-persistenced", "nvidia-imex", "nvidia-imex-ctl"}
}

func writeDriver(root, version string) error {
	w := &treeWriter{root: root}
	for _, l := range DriverLibraries(version) {
		w.file("usr/lib/x86_64-linux-gnu/"+l, "")
	}
	w.file(fmt.Sprintf("lib/firmware/nvidia/%s/gsp_ga10x.bin", version), "")
	w.file(fmt.Sprintf("lib/firmware/nvidia/%s/gsp_tu10x.bin", version), "")
	if w.err != nil {
		return w.err
	}
	for _, b := range DriverBinaries() {
		p := filepath.Join(root, "usr/bin", b)
		w.dir("usr/bin")
		if w.err == nil {
			w.fail(os.WriteFile(p, []byte("#!/bin/sh\necho gpumock "+b+" "+version+"\n"), 0o755))
		}
	}
	return w.err
}
