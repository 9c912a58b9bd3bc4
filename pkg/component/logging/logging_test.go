package logging

import (
	"bytes"
	"flag"
	"strings"
	"testing"
)

// TestFlags: the component-base flags are there, klog's legacy ones are
// not, and the environment sets the format's default.
func TestFlags(t *testing.T) {
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	env := map[string]string{"GPUFABRIC_LOGGING_FORMAT": "json"}
	o, err := AddFlags(fs, "GPUFABRIC_LOGGING_FORMAT", func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	if err != nil {
		t.Fatal(err)
	}
	var help bytes.Buffer
	fs.SetOutput(&help)
	fs.PrintDefaults()
	for _, want := range []string{"-logging-format", "json", "(env GPUFABRIC_LOGGING_FORMAT)", "-v value", "-vmodule", "-log-flush-frequency"} {
		if !strings.Contains(help.String(), want) {
			t.Errorf("help lacks %q:\n%s", want, help.String())
		}
	}
	for _, legacy := range []string{"logtostderr", "alsologtostderr", "log_dir", "log_file", "stderrthreshold", "skip_headers", "add_dir_header", "one_output", "log_backtrace_at"} {
		if fs.Lookup(legacy) != nil {
			t.Errorf("legacy klog flag -%s is registered", legacy)
		}
	}
	if o.Format() != "json" {
		t.Errorf("format %q, want json from the environment", o.Format())
	}
	if err := fs.Parse([]string{"--logging-format=yaml"}); err != nil {
		t.Fatal(err)
	}
	if err := o.Apply(); err == nil || !strings.Contains(err.Error(), "Unsupported log format") {
		t.Errorf("Apply with format yaml: %v", err)
	}
	if _, err := AddFlags(flag.NewFlagSet("bad", flag.ContinueOnError), "X", func(string) (string, bool) { return "", false }); err != nil {
		t.Errorf("unset environment: %v", err)
	}
}
