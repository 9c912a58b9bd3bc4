package daemon

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"strings"
	"testing"
)

// TestExitCodes: the exit codes and what each path says; Run is reached only
// when the flags, their environment twins and the options are good, with
// the environment under the command line.
func TestExitCodes(t *testing.T) {
	errLost := errors.New("lost leadership")
	cases := []struct {
		name    string
		args    []string
		env     map[string]string
		invalid bool
		runErr  error
		code    int
		ran     bool
		stdout  string
		stderr  string
		size    string
	}{
		{name: "runs", code: 0, ran: true, size: "1"},
		{name: "env twin", env: map[string]string{"SIZE": "7"}, code: 0, ran: true, size: "7"},
		{name: "flag over env", args: []string{"--size=3"}, env: map[string]string{"SIZE": "7"}, code: 0, ran: true, size: "3"},
		{name: "version", args: []string{"--version"}, code: 0, stdout: "demo"},
		{name: "help", args: []string{"-h"}, code: 0, stderr: "-size"},
		{name: "bad flag", args: []string{"--nope"}, code: 2, stderr: "flag provided but not defined"},
		{name: "bad env", env: map[string]string{"SIZE": "x"}, code: 2, stderr: "SIZE"},
		{name: "invalid options", invalid: true, code: 2, stderr: "size must be positive"},
		{name: "bad logging flag", args: []string{"--logging-format=xml"}, code: 2, stderr: "xml"},
		{name: "fails", runErr: errors.New("boom"), code: 1, ran: true, size: "1"},
		{name: "lost leadership", runErr: fmt.Errorf("term ended: %w", errLost), code: 1, ran: true, size: "1"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			fs := flag.NewFlagSet("demo", flag.ContinueOnError)
			size := fs.Int("size", 1, "a size")
			var ran bool
			var got string
			spec := Spec{
				Name: "demo",
				ApplyEnv: func(fs *flag.FlagSet, lookup func(string) (string, bool)) error {
					set := map[string]bool{}
					fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
					if v, ok := lookup("SIZE"); ok && !set["size"] {
						if err := fs.Set("size", v); err != nil {
							return fmt.Errorf("SIZE: %w", err)
						}
					}
					return nil
				},
				Validate: func() error {
					if tc.invalid {
						return errors.New("size must be positive")
					}
					return nil
				},
				Run: func(ctx context.Context) error {
					ran, got = true, fmt.Sprint(*size)
					if ctx.Err() != nil {
						t.Error("Run got a done context")
					}
					return tc.runErr
				},
				LostLeadership: errLost,
				Lookup:         func(k string) (string, bool) { v, ok := tc.env[k]; return v, ok },
			}
			var stdout, stderr bytes.Buffer
			code := Main(spec, fs, tc.args, &stdout, &stderr)
			if code != tc.code || ran != tc.ran || got != tc.size {
				t.Errorf("code %d, ran %v with size %q; want %d, %v, %q (stderr %q)", code, ran, got, tc.code, tc.ran, tc.size, stderr.String())
			}
			if !strings.Contains(stdout.String(), tc.stdout) || !strings.Contains(stderr.String(), tc.stderr) {
				t.Errorf("stdout %q, stderr %q; want %q and %q in them", stdout.String(), stderr.String(), tc.stdout, tc.stderr)
			}
		})
	}
}
