package logging

import (
	"flag"
	"fmt"

	logsapi "k8s.io/component-base/logs/api/v1"
	// The json format of --logging-format.
	_ "k8s.io/component-base/logs/json/register"
)

// FormatFlag is the name of the flag that picks the log format.
const FormatFlag = "logging-format"

// Options hold the parsed logging flags.
type Options struct {
	c *logsapi.LoggingConfiguration
}

// AddFlags adds the logging flags to fs; env, when not empty, is the
// environment variable that sets --logging-format's default (named in its
// help).
func AddFlags(fs *flag.FlagSet, env string, lookupEnv func(string) (string, bool)) (*Options, error) {
	o := &Options{c: logsapi.NewLoggingConfiguration()}
	logsapi.AddGoFlags(o.c, fs)
	if env == "" {
		return o, nil
	}
	f := fs.Lookup(FormatFlag)
	f.Usage += fmt.Sprintf(" (env %s)", env)
	if v, ok := lookupEnv(env); ok {
		if err := f.Value.Set(v); err != nil {
			return nil, fmt.Errorf("environment %s: %w", env, err)
		}
		f.DefValue = v
	}
	return o, nil
}

// Format is the chosen log format.
func (o *Options) Format() string { return o.c.Format }

// Apply validates the flags and makes them klog's configuration.
func (o *Options) Apply() error {
	logsapi.ReapplyHandling = logsapi.ReapplyHandlingIgnoreUnchanged
	if err := logsapi.ValidateAndApply(o.c, nil); err != nil {
		return fmt.Errorf("logging flags: %w", err)
	}
	return nil
}
