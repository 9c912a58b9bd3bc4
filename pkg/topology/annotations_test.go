package topology

import (
	"regexp"
	"strconv"
	"strings"
	"testing"
)

func TestParseRailAlignment(t *testing.T) {
	tests := map[string]struct {
		in      string
		want    bool
		wantErr bool
	}{
		"preferred":        {in: "preferred", want: false},
		"required":         {in: "required", want: true},
		"empty":            {in: "", wantErr: true},
		"capitalized":      {in: "Required", wantErr: true},
		"upper case":       {in: "PREFERRED", wantErr: true},
		"trailing space":   {in: "required ", wantErr: true},
		"leading space":    {in: " required", wantErr: true},
		"boolean":          {in: "true", wantErr: true},
		"other word":       {in: "strict", wantErr: true},
		"required newline": {in: "required\n", wantErr: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := ParseRailAlignment(tc.in)
			if (err != nil) != tc.wantErr {
				t.Fatalf("ParseRailAlignment(%q) error = %v, want error %t", tc.in, err, tc.wantErr)
			}
			if got != tc.want {
				t.Errorf("ParseRailAlignment(%q) = %t, want %t", tc.in, got, tc.want)
			}
			if err != nil {
				checkAnnotationError(t, err, AnnotationRailAlignment, tc.in, `"preferred"`, `"required"`)
			}
		})
	}
}

func TestParseRailCoupling(t *testing.T) {
	tests := map[string]struct {
		in      string
		want    string
		wantErr bool
	}{
		"required":       {in: "required", want: RailCouplingRequired},
		"preferred":      {in: "preferred", want: RailCouplingPreferred},
		"none":           {in: "none", want: RailCouplingNone},
		"empty":          {in: "", wantErr: true},
		"capitalized":    {in: "Required", wantErr: true},
		"trailing space": {in: "none ", wantErr: true},
		"boolean":        {in: "true", wantErr: true},
		"a list":         {in: "prefill,decode", wantErr: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := ParseRailCoupling(tc.in)
			if (err != nil) != tc.wantErr {
				t.Fatalf("ParseRailCoupling(%q) error = %v, want error %t", tc.in, err, tc.wantErr)
			}
			if got != tc.want {
				t.Errorf("ParseRailCoupling(%q) = %q, want %q", tc.in, got, tc.want)
			}
			if err != nil {
				checkAnnotationError(t, err, AnnotationRailCoupling, tc.in, `"required"`, `"preferred"`, `"none"`)
			}
		})
	}
}

func TestParseTopologySpread(t *testing.T) {
	tests := map[string]struct {
		in      string
		want    bool
		wantErr bool
	}{
		"packed":         {in: "packed", want: false},
		"balanced":       {in: "balanced", want: true},
		"empty":          {in: "", wantErr: true},
		"capitalized":    {in: "Balanced", wantErr: true},
		"trailing space": {in: "balanced ", wantErr: true},
		"other word":     {in: "spread", wantErr: true},
		"rail value":     {in: "required", wantErr: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := ParseTopologySpread(tc.in)
			if (err != nil) != tc.wantErr {
				t.Fatalf("ParseTopologySpread(%q) error = %v, want error %t", tc.in, err, tc.wantErr)
			}
			if got != tc.want {
				t.Errorf("ParseTopologySpread(%q) = %t, want %t", tc.in, got, tc.want)
			}
			if err != nil {
				checkAnnotationError(t, err, AnnotationTopologySpread, tc.in, `"packed"`, `"balanced"`)
			}
		})
	}
}

func TestParsePreferredTopologyKey(t *testing.T) {
	tests := map[string]struct {
		in      string
		wantErr bool
	}{
		"nvlink domain attribute": {in: TopologyKeyNVLinkDomain},
		"cluster":                 {in: TopologyKeyCluster},
		"prefixed label key":      {in: "topology.gpufabric.dev/rack"},
		"kubernetes zone":         {in: "topology.kubernetes.io/zone"},
		"plain label key":         {in: "rack"},
		"dots and dashes":         {in: "ib.leaf-1_a"},
		"63 character name":       {in: strings.Repeat("a", 63)},
		"empty":                   {in: "", wantErr: true},
		"64 character name":       {in: strings.Repeat("a", 64), wantErr: true},
		"space":                   {in: "my rack", wantErr: true},
		"trailing space":          {in: "rack ", wantErr: true},
		"two slashes":             {in: "a/b/c", wantErr: true},
		"empty prefix":            {in: "/rack", wantErr: true},
		"empty name":              {in: "gpufabric.dev/", wantErr: true},
		"upper-case prefix":       {in: "GPUFabric.dev/rack", wantErr: true},
		"name starts with dash":   {in: "-rack", wantErr: true},
		"unicode":                 {in: "räck", wantErr: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := ParsePreferredTopologyKey(tc.in)
			if (err != nil) != tc.wantErr {
				t.Fatalf("ParsePreferredTopologyKey(%q) error = %v, want error %t", tc.in, err, tc.wantErr)
			}
			if err != nil {
				checkAnnotationError(t, err, AnnotationPreferredTopologyKey, tc.in, "label key or attribute name")
				return
			}
			if got != tc.in {
				t.Errorf("ParsePreferredTopologyKey(%q) = %q, want the value unchanged", tc.in, got)
			}
		})
	}
}

// checkAnnotationError checks that an error names the annotation, quotes
// the value and says what is allowed.
func checkAnnotationError(t *testing.T, err error, annotation, value string, allowed ...string) {
	t.Helper()
	msg := err.Error()
	quoted := strconv.Quote(value)
	if len(value) > maxQuotedValue {
		// A long value is cut: the error stays bounded, says it was cut,
		// and never repeats the whole of it.
		quoted = "..."
		if limit := 4*maxQuotedValue + 1024; len(msg) > limit || strings.Contains(msg, strconv.Quote(value)) {
			t.Errorf("error for a %d-byte value is %d bytes (limit %d) or repeats it whole", len(value), len(msg), limit)
		}
	}
	for _, want := range append([]string{"annotation " + annotation, quoted}, allowed...) {
		if !strings.Contains(msg, want) {
			t.Errorf("error %q lacks %q", msg, want)
		}
	}
}

// qualifiedName is an independent statement of the qualified-name rule the
// parser documents: an optional lower-case DNS subdomain prefix (at most
// 253 characters) and "/", then a name of at most 63 characters.
var (
	qualifiedNamePart = regexp.MustCompile(`^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$`)
	dnsSubdomain      = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)
)

func isQualifiedName(s string) bool {
	prefix, name, hasPrefix := strings.Cut(s, "/")
	if !hasPrefix {
		name = prefix
	} else if len(prefix) > 253 || !dnsSubdomain.MatchString(prefix) {
		return false
	}
	return len(name) <= 63 && qualifiedNamePart.MatchString(name)
}

// FuzzAnnotations checks the PodGroup annotation parsers on any value:
// no panic; rail alignment and topology spread accept exactly their two
// documented words;
// a preferred topology key is accepted exactly when it is a qualified name
// (checked independently) and is returned unchanged; every error names the
// annotation and quotes the value.
func FuzzAnnotations(f *testing.F) {
	for _, seed := range []string{
		RailAlignmentPreferred, RailAlignmentRequired, "Required", "",
		TopologySpreadPacked, TopologySpreadBalanced, "Balanced",
		TopologyKeyNVLinkDomain, TopologyKeyCluster, "topology.gpufabric.dev/rack",
		"topology.kubernetes.io/zone", "rack", "a/b/c", "/x", "x/", strings.Repeat("a", 64),
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, v string) {
		required, err := ParseRailAlignment(v)
		switch {
		case v == RailAlignmentRequired || v == RailAlignmentPreferred:
			if err != nil || required != (v == RailAlignmentRequired) {
				t.Fatalf("ParseRailAlignment(%q) = %t, %v", v, required, err)
			}
		case err == nil || required:
			t.Fatalf("ParseRailAlignment(%q) = %t, %v; want an error", v, required, err)
		default:
			checkAnnotationError(t, err, AnnotationRailAlignment, v, `"preferred"`, `"required"`)
		}
		balanced, err := ParseTopologySpread(v)
		switch {
		case v == TopologySpreadPacked || v == TopologySpreadBalanced:
			if err != nil || balanced != (v == TopologySpreadBalanced) {
				t.Fatalf("ParseTopologySpread(%q) = %t, %v", v, balanced, err)
			}
		case err == nil || balanced:
			t.Fatalf("ParseTopologySpread(%q) = %t, %v; want an error", v, balanced, err)
		default:
			checkAnnotationError(t, err, AnnotationTopologySpread, v, `"packed"`, `"balanced"`)
		}
		key, err := ParsePreferredTopologyKey(v)
		if want := isQualifiedName(v); (err == nil) != want {
			t.Fatalf("ParsePreferredTopologyKey(%q) error = %v, want accepted %t", v, err, want)
		}
		if err != nil {
			checkAnnotationError(t, err, AnnotationPreferredTopologyKey, v)
			return
		}
		if key != v {
			t.Fatalf("ParsePreferredTopologyKey(%q) = %q, want the value unchanged", v, key)
		}
	})
}

// TestParseErrorsBounded: an annotation value of 256 KiB (the API's limit
// for all of an object's annotations) is quoted cut short in the error.
func TestParseErrorsBounded(t *testing.T) {
	huge := strings.Repeat("€", (256<<10)/3)
	for name, parse := range map[string]func(string) error{
		AnnotationPreferredTopologyKey: func(v string) error { _, err := ParsePreferredTopologyKey(v); return err },
		AnnotationRailAlignment:        func(v string) error { _, err := ParseRailAlignment(v); return err },
		AnnotationTopologySpread:       func(v string) error { _, err := ParseTopologySpread(v); return err },
	} {
		err := parse(huge)
		if err == nil || len(err.Error()) > 4*maxQuotedValue+512 || !strings.Contains(err.Error(), `..."`) {
			t.Errorf("%s: error of %d bytes, want the value quoted cut short: %.200v", name, len(err.Error()), err)
		}
	}
}
