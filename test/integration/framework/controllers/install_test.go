package controllers

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	admissionv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The shape of a kubebuilder install's webhooks (LWS and JobSet): a
// webhook for the CRD and one for pods, which the install's patch gives an
// objectSelector so that only the controller's own pods go through it.
const testManifests = `---
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingWebhookConfiguration
metadata:
  name: mutating-webhook-configuration
webhooks:
- admissionReviewVersions: [v1]
  clientConfig:
    service: {name: webhook-service, namespace: system, path: /mutate-x}
  failurePolicy: Fail
  name: mx.kb.io
  rules:
  - {apiGroups: [x.io], apiVersions: [v1], operations: [CREATE], resources: [xs]}
  sideEffects: None
- admissionReviewVersions: [v1]
  clientConfig:
    service: {name: webhook-service, namespace: system, path: /mutate--v1-pod}
  failurePolicy: Fail
  name: mpod.kb.io
  rules:
  - {apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [pods]}
  sideEffects: None
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata:
  name: validating-webhook-configuration
webhooks:
- admissionReviewVersions: [v1]
  clientConfig:
    service: {name: webhook-service, namespace: system, path: /validate-x}
  failurePolicy: Fail
  name: vx.kb.io
  rules:
  - {apiGroups: [x.io], apiVersions: [v1], operations: [CREATE], resources: [xs]}
  sideEffects: None
`

const testMutatingPatch = `- op: add
  path: /webhooks/1/objectSelector
  value:
    matchExpressions:
    - {key: x.io/name, operator: Exists}
`

const testValidatingPatch = `- op: replace
  path: /webhooks/0/failurePolicy
  value: Ignore
`

func TestWebhookConfigs(t *testing.T) {
	ca := []byte("-----BEGIN CERTIFICATE-----\n")
	tests := []struct {
		name       string
		manifests  string
		mutating   string
		validating string
		prefix     string
		wantErr    string
		check      func(t *testing.T, m []*admissionv1.MutatingWebhookConfiguration, v []*admissionv1.ValidatingWebhookConfiguration)
	}{{
		name: "patched, prefixed, pointed at the URL", manifests: testManifests,
		mutating: testMutatingPatch, validating: testValidatingPatch, prefix: "x-",
		check: func(t *testing.T, m []*admissionv1.MutatingWebhookConfiguration, v []*admissionv1.ValidatingWebhookConfiguration) {
			if len(m) != 1 || len(v) != 1 {
				t.Fatalf("got %d mutating, %d validating configurations, want 1 and 1", len(m), len(v))
			}
			if m[0].Name != "x-mutating-webhook-configuration" || v[0].Name != "x-validating-webhook-configuration" {
				t.Errorf("names %q, %q: want the install's prefix", m[0].Name, v[0].Name)
			}
			want := &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "x.io/name", Operator: metav1.LabelSelectorOpExists}}}
			if diff := cmp.Diff(want, m[0].Webhooks[1].ObjectSelector); diff != "" {
				t.Errorf("pod webhook's objectSelector (-want +got):\n%s", diff)
			}
			if m[0].Webhooks[0].ObjectSelector != nil {
				t.Errorf("the CRD's webhook got an objectSelector %v", m[0].Webhooks[0].ObjectSelector)
			}
			if got := *v[0].Webhooks[0].FailurePolicy; got != admissionv1.Ignore {
				t.Errorf("validating failurePolicy %s, want the patch's Ignore", got)
			}
			for _, w := range []admissionv1.WebhookClientConfig{m[0].Webhooks[0].ClientConfig, m[0].Webhooks[1].ClientConfig, v[0].Webhooks[0].ClientConfig} {
				if w.Service != nil || w.URL == nil || !strings.HasPrefix(*w.URL, "https://127.0.0.1:9443/") || string(w.CABundle) != string(ca) {
					t.Errorf("client config %+v: want a URL on https://127.0.0.1:9443 and the CA", w)
				}
			}
			if got := *m[0].Webhooks[1].ClientConfig.URL; got != "https://127.0.0.1:9443/mutate--v1-pod" {
				t.Errorf("pod webhook URL %s, want the Service's path", got)
			}
		},
	}, {
		name: "a patch that does not apply", manifests: testManifests,
		mutating: "- {op: replace, path: /webhooks/7/name, value: x}\n", validating: testValidatingPatch,
		wantErr: "patch MutatingWebhookConfiguration",
	}, {
		name: "not a webhook configuration", manifests: "apiVersion: v1\nkind: Service\nmetadata: {name: s}\n",
		mutating: testMutatingPatch, validating: testValidatingPatch,
		wantErr: `webhooks hold a "Service"`,
	}, {
		name: "a field the API does not have", manifests: strings.Replace(testManifests, "sideEffects: None\n---", "sideEffects: None\n  bogus: 1\n---", 1),
		mutating: testMutatingPatch, validating: testValidatingPatch,
		wantErr: "decode patched MutatingWebhookConfiguration",
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m, v, err := webhookConfigs([]byte(tc.manifests), []byte(tc.mutating), []byte(tc.validating), tc.prefix, "https://127.0.0.1:9443", ca)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, m, v)
		})
	}
}

func TestSpecsFor(t *testing.T) {
	tests := []struct {
		which   []Controller
		wantErr string
	}{
		{which: []Controller{JobSet, LWS, Trainer, KubeRay}},
		{which: []Controller{KubeRay}},
		{which: nil, wantErr: "no workload controller"},
		{which: []Controller{JobSet, JobSet}, wantErr: "named twice"},
		{which: []Controller{"volcano"}, wantErr: "unknown workload controller"},
		{which: []Controller{Trainer}, wantErr: "runs on JobSet"},
	}
	for _, tc := range tests {
		specs, err := specsFor(tc.which)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("specsFor(%v): error %v, want %q", tc.which, err, tc.wantErr)
			}
			continue
		}
		if err != nil || len(specs) != len(tc.which) {
			t.Errorf("specsFor(%v) = %d specs, %v", tc.which, len(specs), err)
		}
	}
}
