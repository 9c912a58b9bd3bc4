// Package config is the opaque configuration of driver gpufabric.dev: the
// parameters a DeviceClass or a ResourceClaim gives in
// spec.config[].opaque.parameters for driver gpufabric.dev, which the
// scheduler copies into status.allocation.devices.config.
//
//	apiVersion: gpufabric.dev/v1alpha1
//	kind: FabricConfig
//	ncclEnv:                     # added to the environment of the request's containers
//	  NCCL_DEBUG: INFO
//	  NCCL_IB_TIMEOUT: "22"
//
// Rules:
//   - Decoding is strict: the apiVersion and kind must be exactly the ones
//     above; unknown or duplicate fields, and parameters that are not a JSON
//     object of at most MaxParametersSize bytes, are errors.
//   - ncclEnv has at most MaxNCCLEnv entries; keys match
//     ^NCCL_[A-Z0-9_]{1,64}$ and are not one the driver sets itself from the
//     allocation (DriverKeys: NCCL_IB_HCA, NCCL_MNNVL_ENABLE,
//     NCCL_NVLS_ENABLE); values have at most MaxValueLength bytes and no NUL
//     or line break.
//   - Configs of other drivers are ignored. A gpufabric.dev config that does
//     not decode or validate is an error naming its position in the
//     allocation's config list and the field: the claim is not prepared.
//   - Configs apply in the order the DRA API defines: those from the class
//     before those from the claim, each source in list order; a later
//     config's value for a key replaces an earlier one. A config applies to
//     the requests it lists (a parent request covers its subrequests,
//     "gpus" covers "gpus/h100"), or to every request when it lists none.
package config

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	sigsjson "sigs.k8s.io/json"

	"github.com/gpufabric/gpufabric/pkg/claims"
)

// The type's name and bounds.
const (
	APIVersion = "gpufabric.dev/v1alpha1"
	Kind       = "FabricConfig"

	// MaxParametersSize bounds the raw parameters decoded.
	MaxParametersSize = 64 << 10
	// MaxNCCLEnv bounds the entries of ncclEnv.
	MaxNCCLEnv = 32
	// MaxValueLength bounds one ncclEnv value, in bytes.
	MaxValueLength = 256
)

// FabricConfig is the opaque parameter type of driver gpufabric.dev.
type FabricConfig struct {
	metav1.TypeMeta `json:",inline"`
	// NCCLEnv are environment variables for NCCL, added to the CDI
	// container edits of the devices of the requests the config applies to.
	NCCLEnv map[string]string `json:"ncclEnv,omitempty"`
}

// keyPattern is the form of an ncclEnv key.
var keyPattern = regexp.MustCompile(`^NCCL_[A-Z0-9_]{1,64}$`)

// DriverKeys are the NCCL variables the driver derives from the allocation
// (NICs, fabric-domain channels); a config may not set them.
func DriverKeys() []string {
	return []string{claims.EnvNCCLIBHCA, claims.EnvNCCLMNNVLEnable, claims.EnvNCCLNVLSEnable}
}

// Decode strictly decodes and validates raw parameters. Errors name the
// field: "parameters" (size, JSON, unknown or duplicate fields),
// "apiVersion", "kind", "ncclEnv" or "ncclEnv[<key>]".
func Decode(raw []byte) (*FabricConfig, error) {
	if len(raw) > MaxParametersSize {
		return nil, fmt.Errorf("parameters: %d bytes, more than the limit of %d", len(raw), MaxParametersSize)
	}
	var tm metav1.TypeMeta
	if err := sigsjson.UnmarshalCaseSensitivePreserveInts(raw, &tm); err != nil {
		return nil, fmt.Errorf("parameters: %w", cutError{err})
	}
	if tm.APIVersion != APIVersion {
		return nil, fmt.Errorf("apiVersion: %s is not %q", quote(tm.APIVersion), APIVersion)
	}
	if tm.Kind != Kind {
		return nil, fmt.Errorf("kind: %s is not %q", quote(tm.Kind), Kind)
	}
	var c FabricConfig
	strict, err := sigsjson.UnmarshalStrict(raw, &c, sigsjson.DisallowDuplicateFields, sigsjson.DisallowUnknownFields)
	if err != nil {
		return nil, fmt.Errorf("parameters: %w", cutError{err})
	}
	if len(strict) > 0 {
		return nil, fmt.Errorf("parameters: %w", cutError{strict[0]})
	}
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return &c, nil
}

// Validate checks the bounds and forms of the package rules. With several
// problems, the one of the first key in sorted order is reported.
func (c *FabricConfig) Validate() error {
	if len(c.NCCLEnv) > MaxNCCLEnv {
		return fmt.Errorf("ncclEnv: %d entries, more than the limit of %d", len(c.NCCLEnv), MaxNCCLEnv)
	}
	keys := make([]string, 0, len(c.NCCLEnv))
	for k := range c.NCCLEnv {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		v := c.NCCLEnv[k]
		switch {
		case !keyPattern.MatchString(k):
			return fmt.Errorf("ncclEnv[%s]: key must match %s", quote(k), keyPattern)
		case slices.Contains(DriverKeys(), k):
			return fmt.Errorf("ncclEnv[%s]: set by the driver from the allocation; a config cannot override it", k)
		case len(v) > MaxValueLength:
			return fmt.Errorf("ncclEnv[%s]: value is %d bytes, more than the limit of %d", k, len(v), MaxValueLength)
		case strings.ContainsAny(v, "\x00\n\r"):
			return fmt.Errorf("ncclEnv[%s]: value %q contains a NUL or a line break", k, v)
		}
	}
	return nil
}

// Env returns the config's variables as sorted KEY=VALUE entries.
func (c *FabricConfig) Env() []string {
	env := make([]string, 0, len(c.NCCLEnv))
	for k, v := range c.NCCLEnv {
		env = append(env, k+"="+v)
	}
	slices.Sort(env)
	return env
}

// maxQuoted bounds a claim's value (a field name, an apiVersion, a key)
// quoted in an error: the error reaches events and the kubelet's logs.
const maxQuoted = 128

// quote quotes s (as %q does) cut to maxQuoted bytes, ending in "..." when
// cut, without splitting a UTF-8 sequence.
func quote(s string) string { return strconv.Quote(cut(s, maxQuoted)) }

func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	i := n - 3
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	return s[:i] + "..."
}

// cutError is a decoder's error whose text (which may quote a field name
// of any length) is cut to 4 × maxQuoted bytes.
type cutError struct{ err error }

func (e cutError) Error() string { return cut(e.err.Error(), 4*maxQuoted) }
func (e cutError) Unwrap() error { return e.err }
