package framework

import (
	"crypto/tls"
	"crypto/x509"
	"path/filepath"
	"testing"
)

// TestIssueServingCert: the certificate a webhook server gets is valid for
// 127.0.0.1 (its URL's host) and chains to the CA returned as its
// caBundle, and for nothing else named.
func TestIssueServingCert(t *testing.T) {
	p, err := newPKI(filepath.Join(t.TempDir(), "pki"))
	if err != nil {
		t.Fatal(err)
	}
	cp := &ControlPlane{pki: p}
	dir := filepath.Join(t.TempDir(), "certs")
	caPEM, err := cp.IssueServingCert(dir, "webhook.example.svc")
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.LoadX509KeyPair(filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key"))
	if err != nil {
		t.Fatalf("load the written pair: %v", err)
	}
	cert, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(caPEM) {
		t.Fatal("caBundle holds no certificate")
	}
	for _, tc := range []struct {
		name string
		ok   bool
	}{
		{"127.0.0.1", true},
		{"webhook.example.svc", true},
		{"localhost", false},
		{"10.0.0.1", false},
	} {
		_, err := cert.Verify(x509.VerifyOptions{Roots: roots, DNSName: tc.name, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
		if (err == nil) != tc.ok {
			t.Errorf("verify for %s: %v, want valid=%v", tc.name, err, tc.ok)
		}
	}
}
