package main

import (
	"bytes"
	"os"
	"regexp"
	"strings"
	"testing"

	"k8s.io/cli-runtime/pkg/genericiooptions"
	"sigs.k8s.io/yaml"
)

// krewManifest is the part of a krew plugin manifest
// (krew.googlecontainertools.github.com/v1alpha2) the test checks.
type krewManifest struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name string `json:"name"`
	} `json:"metadata"`
	Spec struct {
		Version          string `json:"version"`
		Homepage         string `json:"homepage"`
		ShortDescription string `json:"shortDescription"`
		Description      string `json:"description"`
		Caveats          string `json:"caveats"`
		Platforms        []struct {
			Selector struct {
				MatchLabels map[string]string `json:"matchLabels"`
			} `json:"selector"`
			URI    string `json:"uri"`
			SHA256 string `json:"sha256"`
			Files  []struct {
				From string `json:"from"`
				To   string `json:"to"`
			} `json:"files"`
			Bin string `json:"bin"`
		} `json:"platforms"`
	} `json:"spec"`
}

// TestKrewManifest checks the krew manifest template: the plugin's name,
// a v-prefixed semantic version, the bin kubectl-gpufabric on every
// platform (each an os/arch the plugin builds for, once), and release
// addresses marked as placeholders.
func TestKrewManifest(t *testing.T) {
	raw, err := os.ReadFile("../../deployments/krew/gpufabric.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var m krewManifest
	if err := yaml.UnmarshalStrict(raw, &m); err != nil {
		t.Fatalf("manifest: %v", err)
	}
	if m.APIVersion != "krew.googlecontainertools.github.com/v1alpha2" || m.Kind != "Plugin" || m.Metadata.Name != "gpufabric" {
		t.Errorf("header %s %s %s, want a krew Plugin named gpufabric", m.APIVersion, m.Kind, m.Metadata.Name)
	}
	if !regexp.MustCompile(`^v\d+\.\d+\.\d+$`).MatchString(m.Spec.Version) {
		t.Errorf("version %q is not v<semver>", m.Spec.Version)
	}
	if n := len(m.Spec.ShortDescription); n == 0 || n > 50 || m.Spec.Description == "" || m.Spec.Homepage == "" {
		t.Errorf("short description of %d characters (want 1..50), description or homepage empty", n)
	}
	builds := map[string]bool{"linux/amd64": true, "linux/arm64": true, "darwin/amd64": true, "darwin/arm64": true}
	seen := map[string]bool{}
	for _, p := range m.Spec.Platforms {
		platform := p.Selector.MatchLabels["os"] + "/" + p.Selector.MatchLabels["arch"]
		if !builds[platform] || seen[platform] {
			t.Errorf("platform %s: unknown or listed twice", platform)
		}
		seen[platform] = true
		if p.Bin != "kubectl-gpufabric" || len(p.Files) != 1 || p.Files[0].From != "kubectl-gpufabric" {
			t.Errorf("%s: bin %q, files %+v; want kubectl-gpufabric", platform, p.Bin, p.Files)
		}
		if !strings.Contains(p.URI, "PLACEHOLDER") || !strings.Contains(p.URI, strings.ReplaceAll(platform, "/", "_")) {
			t.Errorf("%s: uri %q is not a placeholder for this platform", platform, p.URI)
		}
		if !regexp.MustCompile(`^[0-9a-f]{64}$`).MatchString(p.SHA256) {
			t.Errorf("%s: sha256 %q is not 64 hex digits", platform, p.SHA256)
		}
	}
	if len(seen) != len(builds) {
		t.Errorf("platforms %v, want %v", seen, builds)
	}
	if !strings.Contains(string(raw), "PLACEHOLDER") {
		t.Error("the manifest does not say its release fields are placeholders")
	}
}

// TestVersion: --version and `version` print the version and commit the
// build was stamped with (devel and the VCS stamp without -ldflags).
func TestVersion(t *testing.T) {
	for _, args := range [][]string{{"--version"}, {"version"}} {
		var out, errOut bytes.Buffer
		code := run(args, genericiooptions.IOStreams{In: &bytes.Buffer{}, Out: &out, ErrOut: &errOut})
		if code != 0 || !strings.Contains(out.String(), "devel, commit ") {
			t.Errorf("%v: exit %d, stdout %q, stderr %q", args, code, out.String(), errOut.String())
		}
	}
}
