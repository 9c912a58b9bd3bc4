package controllers

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
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

var crdResource = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// installCRDs creates the CRDs of multi-document YAML files, all at once
// (the apiserver takes about a second for each of these large schemas on
// 2 cores), and returns their names. The controllers' CRDs serve one
// version each, or several without a conversion webhook (KubeRay's), so
// the conversion webhooks some installs patch in are never called and not
// registered.
func installCRDs(ctx context.Context, dyn dynamic.Interface, paths ...string) ([]string, error) {
	var crds []*unstructured.Unstructured
	for _, path := range paths {
		data, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("read CRDs: %w", err)
		}
		docs, err := decodeDocs(data)
		if err != nil {
			return nil, fmt.Errorf("decode %s: %w", filepath.Base(path), err)
		}
		for _, doc := range docs {
			u := &unstructured.Unstructured{Object: doc}
			if u.GetKind() != "CustomResourceDefinition" {
				return nil, fmt.Errorf("%s holds a %s", filepath.Base(path), u.GetKind())
			}
			crds = append(crds, u)
		}
	}
	errs := make([]error, len(crds))
	names := make([]string, len(crds))
	var wg sync.WaitGroup
	for i, u := range crds {
		names[i] = u.GetName()
		wg.Go(func() {
			if _, err := dyn.Resource(crdResource).Create(ctx, u, metav1.CreateOptions{}); err != nil {
				errs[i] = fmt.Errorf("create CRD %s: %w", u.GetName(), err)
			}
		})
	}
	wg.Wait()
	return names, errors.Join(errs...)
}

// waitEstablished waits until every named CRD has Established=True.
func waitEstablished(ctx context.Context, dyn dynamic.Interface, names []string, timeout time.Duration) error {
	var pending string
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		for _, name := range names {
			u, err := dyn.Resource(crdResource).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, fmt.Errorf("get CRD %s: %w", name, err)
			}
			conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
			if !conditionTrue(conds, "Established") {
				pending = name
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("CRD %s not established: %w", pending, err)
	}
	return nil
}

func conditionTrue(conds []any, typ string) bool {
	for _, c := range conds {
		m, _ := c.(map[string]any)
		if m["type"] == typ && m["status"] == "True" {
			return true
		}
	}
	return false
}

// installWebhooks registers a controller's webhook configurations as its
// install renders them (webhookConfigs), pointing at baseURL, and returns
// the webhooks' URLs.
func installWebhooks(ctx context.Context, c kubernetes.Interface, assets string, s spec, baseURL string, caPEM []byte) ([]string, error) {
	read := func(suffix string) ([]byte, error) {
		return os.ReadFile(filepath.Join(assets, string(s.name)+suffix))
	}
	manifests, err := read("-webhooks.yaml")
	if err != nil {
		return nil, fmt.Errorf("read webhooks: %w", err)
	}
	mutatingPatch, err := read("-webhooks-mutating-patch.yaml")
	if err != nil {
		return nil, fmt.Errorf("read webhook patch: %w", err)
	}
	validatingPatch, err := read("-webhooks-validating-patch.yaml")
	if err != nil {
		return nil, fmt.Errorf("read webhook patch: %w", err)
	}
	mutating, validating, err := webhookConfigs(manifests, mutatingPatch, validatingPatch, s.namePrefix, baseURL, caPEM)
	if err != nil {
		return nil, err
	}
	var urls []string
	for _, cfg := range mutating {
		for _, w := range cfg.Webhooks {
			urls = append(urls, *w.ClientConfig.URL)
		}
		if _, err := c.AdmissionregistrationV1().MutatingWebhookConfigurations().Create(ctx, cfg, metav1.CreateOptions{}); err != nil {
			return nil, fmt.Errorf("create mutating webhooks %s: %w", cfg.Name, err)
		}
	}
	for _, cfg := range validating {
		for _, w := range cfg.Webhooks {
			urls = append(urls, *w.ClientConfig.URL)
		}
		if _, err := c.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(ctx, cfg, metav1.CreateOptions{}); err != nil {
			return nil, fmt.Errorf("create validating webhooks %s: %w", cfg.Name, err)
		}
	}
	return urls, nil
}

// webhookConfigs renders webhook configurations as a kustomize install
// does: the JSON 6902 patches applied (mutatingPatch to each
// MutatingWebhookConfiguration, validatingPatch to each
// ValidatingWebhookConfiguration), namePrefix before each name; then each
// webhook's Service reference becomes baseURL + its path, with caPEM as
// its caBundle.
func webhookConfigs(manifests, mutatingPatch, validatingPatch []byte, namePrefix, baseURL string, caPEM []byte) (
	[]*admissionv1.MutatingWebhookConfiguration, []*admissionv1.ValidatingWebhookConfiguration, error,
) {
	patches := map[string]jsonpatch.Patch{}
	for kind, data := range map[string][]byte{"MutatingWebhookConfiguration": mutatingPatch, "ValidatingWebhookConfiguration": validatingPatch} {
		js, err := yaml.YAMLToJSON(data)
		if err != nil {
			return nil, nil, fmt.Errorf("decode %s patch: %w", kind, err)
		}
		if patches[kind], err = jsonpatch.DecodePatch(js); err != nil {
			return nil, nil, fmt.Errorf("decode %s patch: %w", kind, err)
		}
	}
	docs, err := decodeDocs(manifests)
	if err != nil {
		return nil, nil, fmt.Errorf("decode webhooks: %w", err)
	}
	var mutating []*admissionv1.MutatingWebhookConfiguration
	var validating []*admissionv1.ValidatingWebhookConfiguration
	for _, doc := range docs {
		kind, _ := doc["kind"].(string)
		patch, ok := patches[kind]
		if !ok {
			return nil, nil, fmt.Errorf("webhooks hold a %q", kind)
		}
		js, err := json.Marshal(doc)
		if err != nil {
			return nil, nil, fmt.Errorf("encode %s: %w", kind, err)
		}
		if js, err = patch.Apply(js); err != nil {
			return nil, nil, fmt.Errorf("patch %s: %w", kind, err)
		}
		switch kind {
		case "MutatingWebhookConfiguration":
			cfg := &admissionv1.MutatingWebhookConfiguration{}
			if err := yaml.UnmarshalStrict(js, cfg); err != nil {
				return nil, nil, fmt.Errorf("decode patched %s: %w", kind, err)
			}
			cfg.ObjectMeta = metav1.ObjectMeta{Name: namePrefix + cfg.Name}
			for i := range cfg.Webhooks {
				cfg.Webhooks[i].ClientConfig = clientConfig(cfg.Webhooks[i].ClientConfig, baseURL, caPEM)
			}
			mutating = append(mutating, cfg)
		default:
			cfg := &admissionv1.ValidatingWebhookConfiguration{}
			if err := yaml.UnmarshalStrict(js, cfg); err != nil {
				return nil, nil, fmt.Errorf("decode patched %s: %w", kind, err)
			}
			cfg.ObjectMeta = metav1.ObjectMeta{Name: namePrefix + cfg.Name}
			for i := range cfg.Webhooks {
				cfg.Webhooks[i].ClientConfig = clientConfig(cfg.Webhooks[i].ClientConfig, baseURL, caPEM)
			}
			validating = append(validating, cfg)
		}
	}
	return mutating, validating, nil
}

// clientConfig points a webhook of an install (a path on its Service) at
// baseURL.
func clientConfig(in admissionv1.WebhookClientConfig, baseURL string, caPEM []byte) admissionv1.WebhookClientConfig {
	path := ""
	if in.Service != nil && in.Service.Path != nil {
		path = *in.Service.Path
	}
	url := baseURL + path
	return admissionv1.WebhookClientConfig{URL: &url, CABundle: caPEM}
}

// decodeDocs decodes the non-empty documents of a multi-document YAML file.
func decodeDocs(data []byte) ([]map[string]any, error) {
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	var docs []map[string]any
	for {
		var doc map[string]any
		if err := dec.Decode(&doc); errors.Is(err, io.EOF) {
			return docs, nil
		} else if err != nil {
			return nil, err
		}
		if len(doc) > 0 {
			docs = append(docs, doc)
		}
	}
}

// webhooksServed is a readiness check: each URL answers a POST with
// anything but 404, over TLS with a certificate caPEM signed. A controller's
// webhook server may listen (and its readiness probe pass) before its
// handlers are registered: JobSet v0.12.0 registers them after its probes
// pass, and the apiserver then fails a create with "the server could not
// find the requested resource".
func webhooksServed(urls []string, caPEM []byte) (func(context.Context) error, error) {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, errors.New("parse CA bundle: no certificate")
	}
	client := &http.Client{
		Timeout:   2 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}},
	}
	return func(ctx context.Context) error {
		for _, url := range urls {
			req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader("{}"))
			if err != nil {
				return err
			}
			req.Header.Set("Content-Type", "application/json")
			resp, err := client.Do(req)
			if err != nil {
				return err
			}
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusNotFound {
				return fmt.Errorf("POST %s: %s", url, resp.Status)
			}
		}
		return nil
	}, nil
}
