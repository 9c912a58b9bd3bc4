// Package envflag gives the binaries' flags their environment twins: a
// flag not given on the command line takes its twin's value when the
// variable is set (the chart and GitOps tools set either).
package envflag

import (
	"flag"
	"fmt"
)

// Apply sets every flag of fs that was not given on the command line from
// its environment twin in twins (flag name → variable), read through
// lookup (os.LookupEnv); a value the flag refuses is an error naming both.
func Apply(fs *flag.FlagSet, twins map[string]string, lookup func(string) (string, bool)) error {
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	for name, env := range twins {
		v, ok := lookup(env)
		if !ok || given[name] || fs.Lookup(name) == nil {
			continue
		}
		if err := fs.Set(name, v); err != nil {
			return fmt.Errorf("environment %s for --%s: %w", env, name, err)
		}
	}
	return nil
}
