package config

import (
	"fmt"
	"slices"
	"strings"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/gpufabric/gpufabric/pkg/topology"
)

// RequestEnv decodes the gpufabric.dev configs of an allocation
// (status.allocation.devices.config) and returns, for each of the given
// request names that a config applies to, the merged variables as sorted
// KEY=VALUE entries. Requests no config applies to are absent.
//
// Every gpufabric.dev config is decoded and validated, also one that
// applies to none of the requests: an invalid config is an error, never
// ignored. Errors name the config's position ("config[2] (FromClaim)") and
// the field. Configs of other drivers, and entries without opaque
// parameters, are skipped.
func RequestEnv(configs []resourceapi.DeviceAllocationConfiguration, requests []string) (map[string][]string, error) {
	type decoded struct {
		cfg      *FabricConfig
		requests []string
	}
	var fromClass, fromClaim []decoded
	for i, c := range configs {
		if c.Opaque == nil || c.Opaque.Driver != topology.DriverName {
			continue
		}
		where := fmt.Sprintf("config[%d] (%s)", i, c.Source)
		cfg, err := Decode(c.Opaque.Parameters.Raw)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", where, err)
		}
		switch c.Source {
		case resourceapi.AllocationConfigSourceClass:
			fromClass = append(fromClass, decoded{cfg, c.Requests})
		case resourceapi.AllocationConfigSourceClaim:
			fromClaim = append(fromClaim, decoded{cfg, c.Requests})
		default:
			return nil, fmt.Errorf("%s: source: %q is not %s or %s", where, c.Source,
				resourceapi.AllocationConfigSourceClass, resourceapi.AllocationConfigSourceClaim)
		}
	}
	merged := map[string]map[string]string{}
	for _, d := range append(fromClass, fromClaim...) {
		for _, req := range requests {
			if !appliesTo(d.requests, req) {
				continue
			}
			if merged[req] == nil {
				merged[req] = map[string]string{}
			}
			for k, v := range d.cfg.NCCLEnv {
				merged[req][k] = v
			}
		}
	}
	out := make(map[string][]string, len(merged))
	for req, vars := range merged {
		out[req] = (&FabricConfig{NCCLEnv: vars}).Env()
	}
	return out, nil
}

// appliesTo reports whether a config listing requests applies to the
// allocation result of request req ("parent" or "parent/subrequest").
func appliesTo(requests []string, req string) bool {
	if len(requests) == 0 {
		return true
	}
	parent, _, _ := strings.Cut(req, "/")
	return slices.Contains(requests, req) || slices.Contains(requests, parent)
}
