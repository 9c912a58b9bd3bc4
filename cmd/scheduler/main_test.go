package main

import (
	"flag"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// TestEnvTwins: an environment twin fills a flag not given on the command
// line; a given flag wins.
func TestEnvTwins(t *testing.T) {
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	o := bindFlags(fs)
	if err := fs.Parse([]string{"--domain-channels=3"}); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{
		"GPUFABRIC_DOMAIN_CHANNELS":             "9",
		"GPUFABRIC_TOPOLOGY_LEVELS":             "rack, leaf ,,spine",
		"GPUFABRIC_LEADER_ELECT":                "false",
		"GPUFABRIC_COMMIT_PARALLELISM":          "32",
		"GPUFABRIC_KUBE_API_QPS":                "50.5",
		"GPUFABRIC_LEADER_ELECT_LEASE_DURATION": "4s",
		"GPUFABRIC_COMMIT_RECORD_NAMESPACE":     "gpufabric-system",
		"KUBECONFIG":                            "/tmp/kc",
	}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	if err := applyEnv(fs, lookup); err != nil {
		t.Fatal(err)
	}
	if o.domainChannels != 3 || o.leaderElect || o.kubeconfig != "/tmp/kc" || o.commitWorkers != 32 || o.apiQPS != 50.5 || o.apiBurst != 2000 ||
		o.leDurations.lease != 4*time.Second || o.leDurations.renew != 10*time.Second || o.recordNS != "gpufabric-system" {
		t.Errorf("options %+v", o)
	}
	if diff := cmp.Diff([]string{"rack", "leaf", "spine"}, o.levels()); diff != "" {
		t.Errorf("levels (-want +got):\n%s", diff)
	}
	env["GPUFABRIC_LEADER_ELECT"] = "maybe"
	fresh := flag.NewFlagSet("test", flag.ContinueOnError)
	bindFlags(fresh)
	if err := applyEnv(fresh, lookup); err == nil {
		t.Error("bad boolean accepted")
	}
}
