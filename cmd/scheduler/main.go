// Command scheduler runs gpufabric-scheduler: the fabric-aware gang
// scheduler and the fabric-domain pool publisher, under leader election.
//
// Every flag has an environment variable twin (see options.go); a flag given
// on the command line wins. Logging takes component-base's flags
// (--logging-format=text|json, -v, --vmodule); --version prints the build.
package main

import (
	"flag"
	"io"
	"os"

	"github.com/gpufabric/gpufabric/pkg/component/daemon"
	"github.com/gpufabric/gpufabric/pkg/gang/scheduler"
)

const binaryName = "gpufabric-scheduler"

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet(binaryName, flag.ContinueOnError)
	opts := bindFlags(fs)
	return daemon.Main(daemon.Spec{Name: binaryName, ApplyEnv: applyEnv, Validate: opts.validate, Run: opts.run,
		LostLeadership: scheduler.ErrLostLeadership}, fs, args, stdout, stderr)
}
