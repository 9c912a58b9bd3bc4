package secureserving

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/klog/v2/ktesting"
)

func serve(t *testing.T, cfg Config) string {
	t.Helper()
	_, ctx := ktesting.NewTestContext(t)
	if cfg.Address == "" {
		cfg.Address = "127.0.0.1:0"
	}
	if cfg.Handler == nil {
		cfg.Handler = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })
	}
	addr, err := Serve(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return addr.String()
}

func insecureClient(h2 bool) *http.Client {
	tr := &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, ForceAttemptHTTP2: h2} //nolint:gosec // self-signed on purpose
	return &http.Client{Transport: tr, Timeout: 10 * time.Second}
}

// TestServesTLSOnly: the port speaks TLS (a self-signed certificate for
// the loopback address without files), HTTP/1.1 only, and refuses plain
// HTTP.
func TestServesTLSOnly(t *testing.T) {
	addr := serve(t, Config{Name: "gpufabric-scheduler"})
	resp, err := insecureClient(true).Get("https://" + addr + "/livez")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(body) != "ok" || resp.Proto != "HTTP/1.1" {
		t.Errorf("GET over TLS: %d %q %s, want 200 ok HTTP/1.1", resp.StatusCode, body, resp.Proto)
	}
	leaf := resp.TLS.PeerCertificates[0]
	if !strings.HasPrefix(leaf.Subject.CommonName, "gpufabric-scheduler@") || leaf.VerifyHostname("127.0.0.1") != nil || leaf.NotAfter.Before(time.Now().Add(300*24*time.Hour)) {
		t.Errorf("self-signed certificate %q for %v %v until %s", leaf.Subject.CommonName, leaf.DNSNames, leaf.IPAddresses, leaf.NotAfter)
	}
	plain, err := http.Get("http://" + addr + "/livez")
	if err == nil {
		plain.Body.Close()
		if plain.StatusCode != http.StatusBadRequest {
			t.Errorf("plain HTTP: %d, want 400", plain.StatusCode)
		}
	}
}

// TestBounds: the server has every timeout and the header limit set,
// and HTTP/2 off.
func TestBounds(t *testing.T) {
	s := NewServer(http.NotFoundHandler())
	if s.ReadHeaderTimeout != ReadHeaderTimeout || s.ReadTimeout != ReadTimeout || s.WriteTimeout != WriteTimeout || s.IdleTimeout != IdleTimeout ||
		s.MaxHeaderBytes != MaxHeaderBytes || s.TLSNextProto == nil || len(s.TLSNextProto) != 0 {
		t.Errorf("server %+v", s)
	}
	for name, d := range map[string]time.Duration{"ReadHeaderTimeout": ReadHeaderTimeout, "ReadTimeout": ReadTimeout, "WriteTimeout": WriteTimeout, "IdleTimeout": IdleTimeout} {
		if d <= 0 {
			t.Errorf("%s is %s", name, d)
		}
	}
	if WriteTimeout <= MaxProfileSeconds*time.Second {
		t.Errorf("WriteTimeout %s leaves no room for a %d s profile", WriteTimeout, MaxProfileSeconds)
	}
}

// TestSlowLorisClosed: a client that connects and never finishes its TLS
// handshake, and one that finishes it but sends its request header a
// piece at a time, are both cut off by the header timeout.
func TestSlowLorisClosed(t *testing.T) {
	addr := serve(t, Config{})
	limit := ReadHeaderTimeout + 5*time.Second
	for _, tc := range []struct {
		name  string
		setup func(t *testing.T, raw net.Conn) net.Conn
	}{
		{name: "no handshake", setup: func(_ *testing.T, raw net.Conn) net.Conn { return raw }},
		{name: "header never ends", setup: func(t *testing.T, raw net.Conn) net.Conn {
			c := tls.Client(raw, &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // self-signed on purpose
			if err := c.Handshake(); err != nil {
				t.Fatal(err)
			}
			if _, err := c.Write([]byte("GET /livez HTTP/1.1\r\nHost: x\r\n")); err != nil {
				t.Fatal(err)
			}
			return c
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			raw, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer raw.Close()
			c := tc.setup(t, raw)
			start := time.Now()
			if err := raw.SetReadDeadline(start.Add(limit)); err != nil {
				t.Fatal(err)
			}
			buf := make([]byte, 512)
			for {
				_, err = c.Read(buf)
				if err != nil {
					break
				}
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				t.Fatalf("connection still open after %s (read: %v)", limit, err)
			}
			if waited := time.Since(start); waited < ReadHeaderTimeout-time.Second {
				t.Errorf("closed after %s, before the header timeout %s: %v", waited, ReadHeaderTimeout, err)
			}
		})
	}
}

// TestCertFilesReloaded: the certificate given as files is served, and a
// new pair written over them is served after the recheck interval; a
// broken pair keeps the old one.
func TestCertFilesReloaded(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	write := func(name string) *x509.Certificate {
		c, err := selfSigned(name, "127.0.0.1:0", time.Now())
		if err != nil {
			t.Fatal(err)
		}
		key, err := x509.MarshalPKCS8PrivateKey(c.PrivateKey)
		if err != nil {
			t.Fatal(err)
		}
		mustWrite(t, certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Certificate[0]}))
		mustWrite(t, keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: key}))
		return c.Leaf
	}
	first := write("first")
	logger, _ := ktesting.NewTestContext(t)
	fc, err := newFileCert(logger, certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	fc.now = func() time.Time { return now }
	served := func() string {
		c, _ := fc.get(nil)
		leaf, err := x509.ParseCertificate(c.Certificate[0])
		if err != nil {
			t.Fatal(err)
		}
		return leaf.Subject.CommonName
	}
	if got := served(); got != first.Subject.CommonName {
		t.Fatalf("served %s, want %s", got, first.Subject.CommonName)
	}
	time.Sleep(10 * time.Millisecond) // a new modification time
	second := write("second")
	now = now.Add(certRecheck)
	if got := served(); got != second.Subject.CommonName {
		t.Errorf("after a rotation: served %s, want %s", got, second.Subject.CommonName)
	}
	mustWrite(t, keyFile, []byte("broken"))
	now = now.Add(certRecheck)
	if got := served(); got != second.Subject.CommonName {
		t.Errorf("with a broken pair: served %s, want the last good %s", got, second.Subject.CommonName)
	}
	if _, err := Serve(t.Context(), Config{Address: "127.0.0.1:0", CertFile: certFile}); err == nil {
		t.Error("a certificate without its key accepted")
	}
}

func mustWrite(t *testing.T, path string, data []byte) {
	t.Helper()
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
}
