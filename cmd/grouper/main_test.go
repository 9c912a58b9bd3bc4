package main

import (
	"bytes"
	"flag"
	"strings"
	"testing"
)

// TestFlagsHaveEnvTwins: every flag of the grouper (logging's included)
// has a GPUFABRIC_* (or KUBECONFIG) twin, and a flag on the command line
// wins over its twin.
func TestFlagsHaveEnvTwins(t *testing.T) {
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	o := bindFlags(fs)
	fs.VisitAll(func(f *flag.Flag) {
		if _, ok := envTwins[f.Name]; !ok {
			t.Errorf("flag --%s has no environment twin", f.Name)
		}
	})
	if err := fs.Parse([]string{"--workers=3"}); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"GPUFABRIC_GROUPER_WORKERS": "9", "GPUFABRIC_COMPOSITE_GROUPS": "true", "GPUFABRIC_JOB_CONTROLLER_GRACE": "30s"}
	if err := applyEnv(fs, func(k string) (string, bool) { v, ok := env[k]; return v, ok }); err != nil {
		t.Fatal(err)
	}
	if o.workers != 3 || !o.composite || o.jobGrace.String() != "30s" {
		t.Errorf("workers %d (want the flag's 3), composite %v, grace %s", o.workers, o.composite, o.jobGrace)
	}
	bad := map[string]string{"GPUFABRIC_GROUPER_WORKERS": "many"}
	if err := applyEnv(flag.NewFlagSet("x", flag.ContinueOnError), func(k string) (string, bool) { v, ok := bad[k]; return v, ok }); err != nil {
		t.Errorf("a twin of an unknown flag: %v", err)
	}
}

// TestValidate refuses what flag parsing cannot.
func TestValidate(t *testing.T) {
	for _, args := range [][]string{{"--workers=0"}, {"--job-controller-grace=-1s"}, {"--kube-api-qps=0"}, {"--tls-cert-file=x"}} {
		fs := flag.NewFlagSet("test", flag.ContinueOnError)
		o := bindFlags(fs)
		if err := fs.Parse(args); err != nil {
			t.Fatal(err)
		}
		if err := o.validate(); err == nil {
			t.Errorf("%v accepted", args)
		}
	}
}

// TestVersion prints the build and exits 0.
func TestVersion(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := run([]string{"--version"}, &out, &errOut); code != 0 || !strings.HasPrefix(out.String(), "gpufabric-grouper ") {
		t.Errorf("--version: code %d, out %q, err %q", code, out.String(), errOut.String())
	}
}
