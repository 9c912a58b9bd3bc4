package secureserving

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"k8s.io/klog/v2"
)

// The server's bounds (doc.go).
const (
	ReadHeaderTimeout = 5 * time.Second
	ReadTimeout       = 10 * time.Second
	// WriteTimeout leaves a MaxProfileSeconds profile room to stream.
	WriteTimeout   = 60 * time.Second
	IdleTimeout    = 90 * time.Second
	MaxHeaderBytes = 64 << 10
)

// Config of Serve.
type Config struct {
	// Address to listen on ("host:port", ":8080"; port 0 picks one).
	Address string
	// CertFile and KeyFile are a PEM certificate (chain) and its key;
	// both empty: a self-signed certificate made at start.
	CertFile, KeyFile string
	// Name goes into the self-signed certificate's subject
	// ("<Name>@<unix time>").
	Name string
	// Handler serves every request.
	Handler http.Handler
}

// Serve listens on cfg.Address and serves cfg.Handler over TLS until ctx
// is done, then closes the listener and every connection. It returns the
// address it listens on once listening; serving errors are logged.
func Serve(ctx context.Context, cfg Config) (net.Addr, error) {
	if (cfg.CertFile == "") != (cfg.KeyFile == "") {
		return nil, errors.New("serving certificate: give both the certificate and the key file, or neither")
	}
	logger := klog.FromContext(ctx)
	var getCert func(*tls.ClientHelloInfo) (*tls.Certificate, error)
	if cfg.CertFile != "" {
		fc, err := newFileCert(logger, cfg.CertFile, cfg.KeyFile)
		if err != nil {
			return nil, err
		}
		getCert = fc.get
	} else {
		cert, err := selfSigned(cfg.Name, cfg.Address, time.Now())
		if err != nil {
			return nil, err
		}
		getCert = func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return cert, nil }
	}
	ln, err := net.Listen("tcp", cfg.Address)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", cfg.Address, err)
	}
	srv := NewServer(cfg.Handler)
	srv.TLSConfig = &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: getCert, NextProtos: []string{"http/1.1"}}
	go func() {
		if err := srv.ServeTLS(ln, "", ""); err != nil && !errors.Is(err, http.ErrServerClosed) {
			logger.Error(err, "HTTPS server failed", "address", ln.Addr().String())
		}
	}()
	context.AfterFunc(ctx, func() { _ = srv.Close() })
	logger.Info("Serving securely", "address", ln.Addr().String(), "selfSigned", cfg.CertFile == "")
	return ln.Addr(), nil
}

// NewServer is an http.Server for handler with the bounds of doc.go and
// HTTP/2 off.
func NewServer(handler http.Handler) *http.Server {
	return &http.Server{
		Handler:           handler,
		ReadHeaderTimeout: ReadHeaderTimeout,
		ReadTimeout:       ReadTimeout,
		WriteTimeout:      WriteTimeout,
		IdleTimeout:       IdleTimeout,
		MaxHeaderBytes:    MaxHeaderBytes,
		// A non-nil empty map turns HTTP/2 off.
		TLSNextProto: map[string]func(*http.Server, *tls.Conn, http.Handler){},
	}
}
