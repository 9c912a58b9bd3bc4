package vocab

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/types"
)

// TestChartAdmissionNamesTheRecords: the chart's admission policies let
// only the scheduler write its records and holds by these name prefixes;
// a prefix changed here and not there would open (or close) them.
func TestChartAdmissionNamesTheRecords(t *testing.T) {
	path := filepath.Join("..", "..", "..", "deployments", "helm", "gpufabric", "templates", "scheduler-admission.yaml")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	policy := string(b)
	for _, prefix := range []string{RecordPrefix, NominationPrefix, HoldPrefix} {
		if n := strings.Count(policy, "'"+prefix+"'"); n < 2 {
			t.Errorf("%s names %q %d times as a CEL string; want it in both the scheduler's and the tenants' policy", path, prefix, n)
		}
	}
}

func TestNames(t *testing.T) {
	uid := types.UID("0b8f")
	for _, tc := range []struct{ got, want string }{
		{RecordName(uid), "gpufabric-commit-0b8f"},
		{NominationName(uid), "gpufabric-nomination-0b8f"},
		{ConditionMembersLost, "gpufabric.dev/MembersLost"},
		{LabelCommitRecord, "gpufabric.dev/commit-record"},
		{LabelCommitRecordPart, "gpufabric.dev/commit-record-part"},
		{RecordPartName(RecordName(uid), "9a", 2), "gpufabric-commit-0b8f.9a.2"},
		{HoldLabel, "gpufabric.dev/device-hold"},
		{PodGroupKey("team-a", "train"), "pg:team-a/train"},
		{PodKey("team-a", "p-0"), "pod:team-a/p-0"},
	} {
		if tc.got != tc.want {
			t.Errorf("got %q, want %q (released names never change)", tc.got, tc.want)
		}
	}
}

func TestGangKeys(t *testing.T) {
	for _, tc := range []struct {
		key           string
		group         bool
		namespace, nm string
	}{
		{PodGroupKey("ns", "pg"), true, "ns", "pg"},
		{PodKey("ns", "p"), false, "ns", "p"},
	} {
		group, ns, name := SplitKey(tc.key)
		if group != tc.group || ns != tc.namespace || name != tc.nm {
			t.Errorf("SplitKey(%q) = %v, %q, %q; want %v, %q, %q", tc.key, group, ns, name, tc.group, tc.namespace, tc.nm)
		}
	}
}
