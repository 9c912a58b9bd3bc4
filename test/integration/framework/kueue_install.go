package framework

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"
)

// kueueCerts are the CA and the webhook serving certificate of Kueue, in the
// form its cert rotator (open-policy-agent/cert-controller) accepts without
// replacing them: RSA keys (the CA key PKCS#1), a CA valid for its name
// kueue-ca, a serving certificate valid for the webhook Service's DNS name,
// both valid beyond the rotator's 90-day lookahead.
type kueueCerts struct {
	dir                              string
	caPEM, caKeyPEM, certPEM, keyPEM []byte
}

func newKueueCerts(dir string) (*kueueCerts, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create kueue cert dir: %w", err)
	}
	now := time.Now()
	caKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, fmt.Errorf("generate kueue ca key: %w", err)
	}
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "kueue-ca", Organization: []string{"kueue"}},
		DNSNames:              []string{"kueue-ca"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(2 * 365 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, fmt.Errorf("sign kueue ca: %w", err)
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, fmt.Errorf("parse kueue ca: %w", err)
	}
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, fmt.Errorf("generate kueue serving key: %w", err)
	}
	dnsName := kueueWebhookService + "." + KueueNamespace + ".svc"
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: dnsName},
		DNSNames:     []string{dnsName},
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(365 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
	if err != nil {
		return nil, fmt.Errorf("sign kueue serving certificate: %w", err)
	}
	c := &kueueCerts{
		dir:      dir,
		caPEM:    pemEncode("CERTIFICATE", caDER),
		caKeyPEM: pemEncode("RSA PRIVATE KEY", x509.MarshalPKCS1PrivateKey(caKey)),
		certPEM:  pemEncode("CERTIFICATE", der),
		keyPEM:   pemEncode("RSA PRIVATE KEY", x509.MarshalPKCS1PrivateKey(key)),
	}
	return c, writePair(filepath.Join(dir, "tls.crt"), c.certPEM, filepath.Join(dir, "tls.key"), c.keyPEM)
}

// kueueConversionCRDs are the CRDs that Kueue's install patches with a
// conversion webhook (config/components/crd/kustomization.yaml) and whose
// caBundle its cert rotator maintains; it waits for them at startup.
func kueueConversionCRDs() []string {
	return []string{
		"localqueues.kueue.x-k8s.io", "clusterqueues.kueue.x-k8s.io", "cohorts.kueue.x-k8s.io",
		"workloads.kueue.x-k8s.io", "multikueueclusters.kueue.x-k8s.io",
	}
}

// installKueueCRDs creates Kueue's CRDs, with the conversion webhook at
// webhookURL/convert where Kueue's install has one, and waits until they
// serve.
func (cp *ControlPlane) installKueueCRDs(ctx context.Context, path, webhookURL string, caPEM []byte) error {
	dyn, err := dynamic.NewForConfig(cp.AdminConfig())
	if err != nil {
		return fmt.Errorf("build dynamic client: %w", err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("read kueue CRDs: %w", err)
	}
	crds := schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
	var served []schema.GroupVersionResource
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return fmt.Errorf("decode kueue CRDs: %w", err)
		}
		if len(u.Object) == 0 {
			continue
		}
		if slices.Contains(kueueConversionCRDs(), u.GetName()) {
			conversion := map[string]any{
				"strategy": "Webhook",
				"webhook": map[string]any{
					"conversionReviewVersions": []any{"v1"},
					"clientConfig": map[string]any{
						"url": webhookURL + "/convert", "caBundle": base64.StdEncoding.EncodeToString(caPEM),
					},
				},
			}
			if err := unstructured.SetNestedField(u.Object, conversion, "spec", "conversion"); err != nil {
				return fmt.Errorf("set conversion of %s: %w", u.GetName(), err)
			}
		}
		if _, err := dyn.Resource(crds).Create(ctx, u, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("create CRD %s: %w", u.GetName(), err)
		}
		group, _, _ := unstructured.NestedString(u.Object, "spec", "group")
		plural, _, _ := unstructured.NestedString(u.Object, "spec", "names", "plural")
		served = append(served, schema.GroupVersionResource{Group: group, Version: "v1beta2", Resource: plural})
	}
	return wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		for _, gvr := range served {
			if _, err := dyn.Resource(gvr).List(ctx, metav1.ListOptions{Limit: 1}); err != nil {
				return false, nil //nolint:nilerr // not served yet
			}
		}
		return true, nil
	})
}

// installKueueWebhooks registers Kueue's webhook configurations (named as
// its install names them, so that its cert rotator maintains their
// caBundle), keeping Kueue's own webhooks and those of the enabled
// frameworks, each pointing at baseURL + its path.
func installKueueWebhooks(ctx context.Context, c kubernetes.Interface, path, baseURL string, caPEM []byte, frameworks []string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("read kueue webhooks: %w", err)
	}
	keep, err := kueueWebhookFilter(frameworks)
	if err != nil {
		return err
	}
	for _, doc := range strings.Split(string(data), "\n---\n") {
		var meta metav1.TypeMeta
		if err := yaml.Unmarshal([]byte(doc), &meta); err != nil {
			return fmt.Errorf("decode kueue webhooks: %w", err)
		}
		switch meta.Kind {
		case "MutatingWebhookConfiguration":
			var cfg admissionv1.MutatingWebhookConfiguration
			if err := yaml.UnmarshalStrict([]byte(doc), &cfg); err != nil {
				return fmt.Errorf("decode kueue mutating webhooks: %w", err)
			}
			cfg.ObjectMeta = metav1.ObjectMeta{Name: "kueue-mutating-webhook-configuration"}
			cfg.Webhooks = slices.DeleteFunc(cfg.Webhooks, func(w admissionv1.MutatingWebhook) bool { return !keep(w.Rules) })
			for i := range cfg.Webhooks {
				cfg.Webhooks[i].ClientConfig = kueueClientConfig(cfg.Webhooks[i].ClientConfig, baseURL, caPEM)
			}
			if _, err := c.AdmissionregistrationV1().MutatingWebhookConfigurations().Create(ctx, &cfg, metav1.CreateOptions{}); err != nil {
				return fmt.Errorf("create kueue mutating webhooks: %w", err)
			}
		case "ValidatingWebhookConfiguration":
			var cfg admissionv1.ValidatingWebhookConfiguration
			if err := yaml.UnmarshalStrict([]byte(doc), &cfg); err != nil {
				return fmt.Errorf("decode kueue validating webhooks: %w", err)
			}
			cfg.ObjectMeta = metav1.ObjectMeta{Name: "kueue-validating-webhook-configuration"}
			cfg.Webhooks = slices.DeleteFunc(cfg.Webhooks, func(w admissionv1.ValidatingWebhook) bool { return !keep(w.Rules) })
			for i := range cfg.Webhooks {
				cfg.Webhooks[i].ClientConfig = kueueClientConfig(cfg.Webhooks[i].ClientConfig, baseURL, caPEM)
			}
			if _, err := c.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(ctx, &cfg, metav1.CreateOptions{}); err != nil {
				return fmt.Errorf("create kueue validating webhooks: %w", err)
			}
		}
	}
	return nil
}

// kueueClientConfig points a webhook of Kueue's install (a path on its
// Service) at baseURL.
func kueueClientConfig(in admissionv1.WebhookClientConfig, baseURL string, caPEM []byte) admissionv1.WebhookClientConfig {
	path := ""
	if in.Service != nil && in.Service.Path != nil {
		path = *in.Service.Path
	}
	url := baseURL + path
	return admissionv1.WebhookClientConfig{URL: &url, CABundle: caPEM}
}

// kueueWebhookFilter keeps Kueue's own webhooks and those of the given
// frameworks (the ones the framework knows the resources of).
func kueueWebhookFilter(frameworks []string) (func([]admissionv1.RuleWithOperations) bool, error) {
	wanted := []string{"kueue.x-k8s.io/*"}
	for _, f := range frameworks {
		switch f {
		case "batch/job":
			wanted = append(wanted, "batch/jobs")
		case "pod":
			wanted = append(wanted, "/pods")
		default:
			return nil, fmt.Errorf("kueue framework %q: its webhooks are not known to the test framework", f)
		}
	}
	return func(rules []admissionv1.RuleWithOperations) bool {
		for _, r := range rules {
			for _, g := range r.APIGroups {
				for _, res := range r.Resources {
					if slices.Contains(wanted, g+"/"+res) || slices.Contains(wanted, g+"/*") {
						return true
					}
				}
			}
		}
		return false
	}, nil
}
