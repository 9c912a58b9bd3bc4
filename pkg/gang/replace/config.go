package replace

import (
	"fmt"
	"time"

	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"

	"github.com/gpufabric/gpufabric/pkg/gang/report"
	"github.com/gpufabric/gpufabric/pkg/gang/vocab"
)

// Defaults of Config, and the longest bound an annotation or a flag may
// set.
const (
	DefaultNodeFailureGrace   = 30 * time.Second
	DefaultReplacementTimeout = 60 * time.Second
	DefaultPolicy             = vocab.PolicyRestart
	MaxDuration               = time.Hour
)

// Config is the cluster's defaults. The zero value of each field is its
// default.
type Config struct {
	// NodeFailureGrace: a node whose Ready condition is False or Unknown
	// this long has lost its gang members (--node-failure-grace).
	NodeFailureGrace time.Duration
	// ReplacementTimeout bounds a lost member's replacement unless the
	// PodGroup's annotation says otherwise (--replacement-timeout).
	ReplacementTimeout time.Duration
	// Policy is what happens when the bound passes unless the PodGroup's
	// annotation says otherwise: vocab.PolicyWait, PolicyRestart or
	// PolicyFail (--member-loss-policy).
	Policy string
}

// WithDefaults validates c and fills in its defaults.
func (c Config) WithDefaults() (Config, error) {
	if c.NodeFailureGrace == 0 {
		c.NodeFailureGrace = DefaultNodeFailureGrace
	}
	if c.ReplacementTimeout == 0 {
		c.ReplacementTimeout = DefaultReplacementTimeout
	}
	if c.Policy == "" {
		c.Policy = DefaultPolicy
	}
	if err := ValidDuration("node failure grace", c.NodeFailureGrace); err != nil {
		return c, err
	}
	if err := ValidDuration("replacement timeout", c.ReplacementTimeout); err != nil {
		return c, err
	}
	if !validPolicy(c.Policy) {
		return c, fmt.Errorf("member loss policy %q: want %s, %s or %s", c.Policy, vocab.PolicyWait, vocab.PolicyRestart, vocab.PolicyFail)
	}
	return c, nil
}

// ValidDuration refuses a duration outside 0..MaxDuration.
func ValidDuration(what string, d time.Duration) error {
	if d < 0 || d > MaxDuration {
		return fmt.Errorf("%s %s: want 0s..%s", what, d, MaxDuration)
	}
	return nil
}

func validPolicy(p string) bool {
	return p == vocab.PolicyWait || p == vocab.PolicyRestart || p == vocab.PolicyFail
}

// Choice is a PodGroup's policy and bound, and what was wrong with its
// annotations (empty: nothing; the defaults stand in for a bad value).
type Choice struct {
	Policy  string
	Timeout time.Duration
	Invalid string
}

// Choose reads pg's annotations over c's defaults. A value a tenant wrote
// is only ever quoted cut (report.Quote).
func (c Config) Choose(pg *schedulingv1beta1.PodGroup) Choice {
	ch := Choice{Policy: c.Policy, Timeout: c.ReplacementTimeout}
	if v, ok := pg.Annotations[vocab.AnnotationOnMemberLoss]; ok {
		if validPolicy(v) {
			ch.Policy = v
		} else {
			ch.Invalid = fmt.Sprintf("annotation %s: %s is not %s, %s or %s; the default %s applies",
				vocab.AnnotationOnMemberLoss, report.Quote(v, report.MaxQuoted), vocab.PolicyWait, vocab.PolicyRestart, vocab.PolicyFail, c.Policy)
		}
	}
	if v, ok := pg.Annotations[vocab.AnnotationReplacementTimeout]; ok {
		d, err := time.ParseDuration(v)
		if err == nil {
			err = ValidDuration("duration", d)
		}
		if err == nil {
			ch.Timeout = d
		} else {
			ch.Invalid = joinNote(ch.Invalid, fmt.Sprintf("annotation %s: %s is not a duration of 0s..%s; the default %s applies",
				vocab.AnnotationReplacementTimeout, report.Quote(v, report.MaxQuoted), MaxDuration, c.ReplacementTimeout))
		}
	}
	return ch
}

func joinNote(a, b string) string {
	if a == "" {
		return b
	}
	return a + "; " + b
}
