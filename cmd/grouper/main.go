// Command grouper runs gpufabric-grouper: it creates the Workload and
// PodGroups of the workloads users submit unchanged (JobSet,
// LeaderWorkerSet, RayCluster, Indexed Jobs, scheduler-plugins' and
// Volcano's PodGroups) so that gpufabric-scheduler places them as gangs
// (pkg/workloads/grouper). It runs under its own identity, apart from
// the scheduler: it writes PodGroups and Workloads, never bindings or
// claims.
//
// Every flag has an environment variable twin (options.go); a flag given
// on the command line wins. --version prints the build.
package main

import (
	"flag"
	"io"
	"os"

	"github.com/gpufabric/gpufabric/pkg/component/daemon"
	"github.com/gpufabric/gpufabric/pkg/workloads/grouper"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet(grouper.Name, flag.ContinueOnError)
	opts := bindFlags(fs)
	return daemon.Main(daemon.Spec{Name: grouper.Name, ApplyEnv: applyEnv, Validate: opts.validate, Run: opts.run,
		LostLeadership: errLostLeadership}, fs, args, stdout, stderr)
}
