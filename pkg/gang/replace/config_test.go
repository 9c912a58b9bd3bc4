package replace

import (
	"strings"
	"testing"
	"time"

	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpufabric/gpufabric/pkg/gang/vocab"
)

// TestConfig: zero fields take the defaults; values out of range are
// refused with what is wrong.
func TestConfig(t *testing.T) {
	c, err := Config{}.WithDefaults()
	if err != nil || c != (Config{NodeFailureGrace: 30 * time.Second, ReplacementTimeout: time.Minute, Policy: vocab.PolicyRestart}) {
		t.Errorf("defaults %+v, %v", c, err)
	}
	for _, tc := range []struct {
		c    Config
		want string
	}{
		{Config{Policy: "restart"}, `member loss policy "restart"`},
		{Config{NodeFailureGrace: -time.Second}, "node failure grace -1s: want 0s..1h0m0s"},
		{Config{ReplacementTimeout: 2 * time.Hour}, "replacement timeout 2h0m0s"},
	} {
		if _, err := tc.c.WithDefaults(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want %q", tc.c, err, tc.want)
		}
	}
}

// TestChoose: a PodGroup's annotations override the defaults; a bad value
// is named (quoted, cut) and the default applies.
func TestChoose(t *testing.T) {
	c := Config{ReplacementTimeout: time.Minute, Policy: vocab.PolicyRestart}
	for _, tc := range []struct {
		name        string
		annotations map[string]string
		want        Choice
		invalid     []string
	}{
		{name: "none", want: Choice{Policy: vocab.PolicyRestart, Timeout: time.Minute}},
		{name: "both", annotations: map[string]string{vocab.AnnotationOnMemberLoss: "Fail", vocab.AnnotationReplacementTimeout: "0s"},
			want: Choice{Policy: vocab.PolicyFail}},
		{name: "wait 10m", annotations: map[string]string{vocab.AnnotationOnMemberLoss: "Wait", vocab.AnnotationReplacementTimeout: "10m"},
			want: Choice{Policy: vocab.PolicyWait, Timeout: 10 * time.Minute}},
		{name: "bad policy", annotations: map[string]string{vocab.AnnotationOnMemberLoss: strings.Repeat("x", 500)},
			want: Choice{Policy: vocab.PolicyRestart, Timeout: time.Minute}, invalid: []string{vocab.AnnotationOnMemberLoss, "the default Restart applies", `xxx..."`}},
		{name: "bad timeouts", annotations: map[string]string{vocab.AnnotationReplacementTimeout: "2h"},
			want: Choice{Policy: vocab.PolicyRestart, Timeout: time.Minute}, invalid: []string{vocab.AnnotationReplacementTimeout, `"2h"`, "the default 1m0s applies"}},
		{name: "negative", annotations: map[string]string{vocab.AnnotationReplacementTimeout: "-1s"},
			want: Choice{Policy: vocab.PolicyRestart, Timeout: time.Minute}, invalid: []string{vocab.AnnotationReplacementTimeout}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := c.Choose(&schedulingv1beta1.PodGroup{ObjectMeta: metav1.ObjectMeta{Annotations: tc.annotations}})
			if got.Policy != tc.want.Policy || got.Timeout != tc.want.Timeout {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
			if (got.Invalid != "") != (len(tc.invalid) > 0) || len(got.Invalid) > 1000 {
				t.Errorf("invalid %q", got.Invalid)
			}
			for _, w := range tc.invalid {
				if !strings.Contains(got.Invalid, w) {
					t.Errorf("invalid %q: want %q", got.Invalid, w)
				}
			}
		})
	}
}
