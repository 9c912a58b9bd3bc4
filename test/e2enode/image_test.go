package e2enode

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/gpufabric/gpufabric/test/integration/framework"
)

// imageName is the one image of the test: the probe as pod sandbox
// (default command "pause") and as the container ("check …").
const imageName = "gpufabric.test/probe:1"

// buildImage builds the probe statically and packs it as an OCI image
// archive for "ctr images import": one layer with /probe and the
// directories a container runtime and the NVIDIA hooks expect.
func buildImage(t *testing.T) string {
	t.Helper()
	root, err := framework.RepoRoot()
	must(t, "repo root", err)
	dir := t.TempDir()
	bin := filepath.Join(dir, "probe")
	cmd := exec.Command("go", "build", "-trimpath", "-o", bin, "./test/e2enode/probe")
	cmd.Dir, cmd.Env = root, append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build probe: %v\n%s", err, out)
	}
	probe, err := os.ReadFile(bin)
	must(t, "read probe", err)

	var layer bytes.Buffer
	tw := tar.NewWriter(&layer)
	mtime := time.Unix(0, 0)
	for _, d := range []string{"dev", "proc", "sys", "tmp", "etc", "etc/ld.so.conf.d", "usr", "usr/bin", "usr/lib", "usr/lib/x86_64-linux-gnu", "lib", "lib/firmware", "run"} {
		must(t, "tar dir", tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d + "/", Mode: 0o755, ModTime: mtime}))
	}
	for name, content := range map[string][]byte{"probe": probe, "etc/ld.so.conf": []byte("include /etc/ld.so.conf.d/*.conf\n")} {
		must(t, "tar file", tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o755, Size: int64(len(content)), ModTime: mtime}))
		_, err := tw.Write(content)
		must(t, "tar file", err)
	}
	must(t, "close layer", tw.Close())

	blobs := map[string][]byte{}
	add := func(data []byte) string {
		d := fmt.Sprintf("sha256:%x", sha256.Sum256(data))
		blobs[d] = data
		return d
	}
	layerDigest := add(layer.Bytes())
	config := mustJSON(t, map[string]any{
		"architecture": "amd64", "os": "linux",
		"config": map[string]any{"Entrypoint": []string{"/probe"}, "Cmd": []string{"pause"}},
		"rootfs": map[string]any{"type": "layers", "diff_ids": []string{layerDigest}},
	})
	configDigest := add(config)
	manifest := mustJSON(t, map[string]any{
		"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
		"config": map[string]any{"mediaType": "application/vnd.oci.image.config.v1+json", "digest": configDigest, "size": len(config)},
		"layers": []any{map[string]any{"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": layerDigest, "size": layer.Len()}},
	})
	manifestDigest := add(manifest)
	index := mustJSON(t, map[string]any{
		"schemaVersion": 2,
		"manifests": []any{map[string]any{
			"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": manifestDigest, "size": len(manifest),
			"annotations": map[string]string{"io.containerd.image.name": imageName, "org.opencontainers.image.ref.name": "1"},
			"platform":    map[string]string{"architecture": "amd64", "os": "linux"},
		}},
	})

	archive := filepath.Join(dir, "probe.tar")
	f, err := os.Create(archive)
	must(t, "create archive", err)
	defer func() { _ = f.Close() }()
	aw := tar.NewWriter(f)
	write := func(name string, data []byte) {
		must(t, "archive "+name, aw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o644, Size: int64(len(data)), ModTime: mtime}))
		_, err := aw.Write(data)
		must(t, "archive "+name, err)
	}
	write("oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`))
	write("index.json", index)
	for d, data := range blobs {
		write("blobs/sha256/"+d[len("sha256:"):], data)
	}
	must(t, "close archive", aw.Close())
	return archive
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	data, err := json.Marshal(v)
	must(t, "encode", err)
	return data
}
