package secureserving

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"math/big"
	"net"
	"os"
	"sync"
	"time"

	"k8s.io/klog/v2"
)

// selfSignedValidity is how long a self-signed certificate is valid (a
// restart makes a new one), as kube-scheduler's.
const selfSignedValidity = 365 * 24 * time.Hour

// certRecheck is how often the certificate files are checked for a
// change.
const certRecheck = 10 * time.Second

// selfSigned makes a self-signed serving certificate for localhost, the
// host's name and the listen address's host.
func selfSigned(name, address string, now time.Time) (*tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("self-signed certificate: %w", err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, fmt.Errorf("self-signed certificate: %w", err)
	}
	if name == "" {
		name = "gpufabric"
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: fmt.Sprintf("%s@%d", name, now.Unix())},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(selfSignedValidity),
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		DNSNames:              []string{"localhost"},
		IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
	}
	if h, err := os.Hostname(); err == nil && h != "" {
		tmpl.DNSNames = append(tmpl.DNSNames, h)
	}
	if host, _, err := net.SplitHostPort(address); err == nil {
		if ip := net.ParseIP(host); ip != nil && !ip.IsUnspecified() && !ip.IsLoopback() {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else if ip == nil && host != "" && host != "localhost" {
			tmpl.DNSNames = append(tmpl.DNSNames, host)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("self-signed certificate: %w", err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("self-signed certificate: %w", err)
	}
	return &tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, nil
}

// fileCert serves the certificate of a pair of files and loads them
// again when either changes (checked at most every certRecheck, at a
// handshake); a pair that fails to load keeps the previous one serving.
type fileCert struct {
	logger            klog.Logger
	certFile, keyFile string
	now               func() time.Time

	mu      sync.Mutex
	cert    *tls.Certificate
	stamp   string // both files' size and modification time
	checked time.Time
}

func newFileCert(logger klog.Logger, certFile, keyFile string) (*fileCert, error) {
	fc := &fileCert{logger: logger, certFile: certFile, keyFile: keyFile, now: time.Now}
	stamp, err := fc.stampOf()
	if err != nil {
		return nil, err
	}
	if err := fc.load(stamp); err != nil {
		return nil, err
	}
	return fc, nil
}

func (fc *fileCert) get(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	fc.mu.Lock()
	defer fc.mu.Unlock()
	if now := fc.now(); now.Sub(fc.checked) >= certRecheck {
		fc.checked = now
		stamp, err := fc.stampOf()
		if err == nil && stamp != fc.stamp {
			err = fc.load(stamp)
			if err == nil {
				fc.logger.Info("Serving certificate reloaded", "certFile", fc.certFile)
			}
		}
		if err != nil {
			fc.logger.Error(err, "Keeping the serving certificate loaded before")
		}
	}
	return fc.cert, nil
}

func (fc *fileCert) stampOf() (string, error) {
	var stamp string
	for _, f := range []string{fc.certFile, fc.keyFile} {
		st, err := os.Stat(f)
		if err != nil {
			return "", fmt.Errorf("serving certificate: %w", err)
		}
		stamp += fmt.Sprintf("%d/%d;", st.Size(), st.ModTime().UnixNano())
	}
	return stamp, nil
}

// load reads the pair; callers hold mu (or own fc).
func (fc *fileCert) load(stamp string) error {
	cert, err := tls.LoadX509KeyPair(fc.certFile, fc.keyFile)
	if err != nil {
		return fmt.Errorf("serving certificate %s: %w", fc.certFile, err)
	}
	fc.cert, fc.stamp = &cert, stamp
	return nil
}
