// Package metricstyle checks the style of a binary's metrics: every label
// value is snake_case (lower-case letters, digits and underscores), as
// Prometheus' conventions ask, so one query style fits every label
// ("reason=\"commit_error\"", never a mix of kebab-case and snake_case).
//
// Rules: values that are not gpufabric's own words are exempt by label
// name (Exempt): names of objects and domains, addresses, HTTP methods
// and codes as client-go reports them, versions. A test of each binary
// walks its registry after exercising its metrics (Check).
package metricstyle

import (
	"fmt"
	"regexp"
	"sort"
	"strings"

	dto "github.com/prometheus/client_model/go"
)

// snakeCase is the form of every label value that is not exempt.
var snakeCase = regexp.MustCompile(`^[a-z0-9_]+$`)

// Exempt lists the labels whose values come from outside gpufabric's
// vocabulary, by label name ("domain": in every metric), by metric and
// label ("leader_election_master_status/name": in that metric only), or one
// value of a label ("name=DynamicClientCertificate").
var Exempt = []string{
	"domain",                 // NVLink domain ids (gpufabric_scheduler_domain_free_gpus)
	"host",                   // the apiserver's host:port (rest_client_*)
	"verb", "method", "code", // HTTP methods and status codes as client-go reports them (rest_client_*)
	"version", "commit", "go_version", // build info (gpufabric_*_build_info, go_info)
	"leader_election_master_status/name",  // Lease names
	"leader_election_slowpath_total/name", // Lease names
	"name=DynamicClientCertificate",       // client-go's own workqueue (rotating a kubeconfig's client certificate)
}

// Check returns one line per label value of families that is not
// snake_case and not exempt ("metric{label=\"value\"}"), sorted; none when
// every value conforms.
func Check(families []*dto.MetricFamily, exempt []string) []string {
	skip := map[string]bool{}
	for _, e := range exempt {
		skip[e] = true
	}
	seen := map[string]bool{}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if skip[l.GetName()] || skip[f.GetName()+"/"+l.GetName()] || skip[l.GetName()+"="+l.GetValue()] || snakeCase.MatchString(l.GetValue()) {
					continue
				}
				seen[fmt.Sprintf("%s{%s=%q}", f.GetName(), l.GetName(), l.GetValue())] = true
			}
		}
	}
	out := make([]string, 0, len(seen))
	for v := range seen {
		out = append(out, v)
	}
	sort.Strings(out)
	return out
}

// Families returns the values of a name → family map (as a text-format
// parser returns them) for Check.
func Families(byName map[string]*dto.MetricFamily) []*dto.MetricFamily {
	out := make([]*dto.MetricFamily, 0, len(byName))
	for _, f := range byName {
		out = append(out, f)
	}
	sort.Slice(out, func(i, j int) bool { return strings.Compare(out[i].GetName(), out[j].GetName()) < 0 })
	return out
}
