package framework

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// pki is the throw-away certificate authority of one control plane. It signs
// the apiserver's serving certificate and a client certificate per identity,
// so every identity a test uses is authenticated for real and RBAC applies.
type pki struct {
	dir    string
	caCert *x509.Certificate
	caKey  crypto.Signer
	caPEM  []byte
}

// Paths of the files newPKI writes.
func (p *pki) caFile() string        { return filepath.Join(p.dir, "ca.crt") }
func (p *pki) servingCert() string   { return filepath.Join(p.dir, "apiserver.crt") }
func (p *pki) servingKey() string    { return filepath.Join(p.dir, "apiserver.key") }
func (p *pki) saPublicKey() string   { return filepath.Join(p.dir, "sa.pub") }
func (p *pki) saPrivateKey() string  { return filepath.Join(p.dir, "sa.key") }
func (p *pki) adminCertFile() string { return filepath.Join(p.dir, "admin.crt") }
func (p *pki) adminKeyFile() string  { return filepath.Join(p.dir, "admin.key") }

// newPKI creates a CA, the apiserver serving certificate for 127.0.0.1, an
// admin client certificate (group system:masters) and the service-account
// signing key pair in dir.
func newPKI(dir string) (*pki, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create pki dir: %w", err)
	}
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate ca key: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "gpufabric-test-ca"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, fmt.Errorf("sign ca: %w", err)
	}
	caCert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("parse ca: %w", err)
	}
	p := &pki{dir: dir, caCert: caCert, caKey: caKey, caPEM: pemEncode("CERTIFICATE", der)}
	if err := os.WriteFile(p.caFile(), p.caPEM, 0o600); err != nil {
		return nil, fmt.Errorf("write ca: %w", err)
	}
	if err := p.writeServing(); err != nil {
		return nil, err
	}
	if err := p.writeAdmin(); err != nil {
		return nil, err
	}
	return p, p.writeServiceAccountKeys()
}

func (p *pki) writeServing() error {
	certPEM, keyPEM, err := p.issue(pkix.Name{CommonName: "kube-apiserver"}, x509.ExtKeyUsageServerAuth,
		[]net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("10.0.0.1")},
		[]string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"})
	if err != nil {
		return fmt.Errorf("issue serving certificate: %w", err)
	}
	return writePair(p.servingCert(), certPEM, p.servingKey(), keyPEM)
}

func (p *pki) writeAdmin() error {
	certPEM, keyPEM, err := p.ClientCert("gpufabric-test-admin", "system:masters")
	if err != nil {
		return fmt.Errorf("issue admin certificate: %w", err)
	}
	return writePair(p.adminCertFile(), certPEM, p.adminKeyFile(), keyPEM)
}

func (p *pki) writeServiceAccountKeys() error {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return fmt.Errorf("generate service-account key: %w", err)
	}
	pub, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return fmt.Errorf("encode service-account public key: %w", err)
	}
	return writePair(p.saPublicKey(), pemEncode("PUBLIC KEY", pub),
		p.saPrivateKey(), pemEncode("RSA PRIVATE KEY", x509.MarshalPKCS1PrivateKey(key)))
}

// ClientCert issues a client certificate for user in groups (the apiserver
// maps CN to the user name and O to groups). Returns PEM cert and key.
func (p *pki) ClientCert(user string, groups ...string) (certPEM, keyPEM []byte, err error) {
	return p.issue(pkix.Name{CommonName: user, Organization: groups}, x509.ExtKeyUsageClientAuth, nil, nil)
}

func (p *pki) issue(subject pkix.Name, usage x509.ExtKeyUsage, ips []net.IP, dns []string) ([]byte, []byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("generate key: %w", err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		return nil, nil, fmt.Errorf("serial: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      subject,
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage:  []x509.ExtKeyUsage{usage},
		IPAddresses:  ips,
		DNSNames:     dns,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.caCert, &key.PublicKey, p.caKey)
	if err != nil {
		return nil, nil, fmt.Errorf("sign certificate for %q: %w", subject.CommonName, err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, fmt.Errorf("encode key: %w", err)
	}
	return pemEncode("CERTIFICATE", der), pemEncode("EC PRIVATE KEY", keyDER), nil
}

func pemEncode(kind string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der})
}

func writePair(certFile string, certPEM []byte, keyFile string, keyPEM []byte) error {
	if err := os.WriteFile(certFile, certPEM, 0o600); err != nil {
		return fmt.Errorf("write %s: %w", certFile, err)
	}
	if err := os.WriteFile(keyFile, keyPEM, 0o600); err != nil {
		return fmt.Errorf("write %s: %w", keyFile, err)
	}
	return nil
}
