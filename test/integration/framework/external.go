package framework

import (
	"context"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"time"
)

// What packages that run other programs under a control plane (the
// workload controllers of test/integration/framework/controllers) need of
// it: free ports, serving certificates its apiserver trusts, a process with
// its own environment, and readiness waits that end early when the process
// exits.

// FreePorts returns n distinct free TCP ports on 127.0.0.1.
func FreePorts(n int) ([]int, error) { return freePorts(n) }

// StartProcessEnv is StartProcess with env added to the process's
// environment (after this process's own, so it wins).
func (cp *ControlPlane) StartProcessEnv(name, binaryPath string, env []string, args ...string) error {
	abs, err := filepath.EvalSymlinks(binaryPath)
	if err != nil {
		return fmt.Errorf("find %s: %w", binaryPath, err)
	}
	p, err := startProcess(cp.dir, name, abs, args, env)
	if err != nil {
		return err
	}
	cp.mu.Lock()
	cp.procs = append(cp.procs, p)
	cp.mu.Unlock()
	return nil
}

// WaitHTTPReady waits until GET url (http, or https with any certificate)
// answers 200, the process started as name exits, or timeout passes; the
// error carries the tail of the process's log.
func (cp *ControlPlane) WaitHTTPReady(ctx context.Context, name, url string, timeout time.Duration) error {
	p := cp.process(name)
	if p == nil {
		return fmt.Errorf("no process %s", name)
	}
	return waitReady(ctx, p, timeout, httpCheck(insecureClient(), url))
}

// WaitProcessReady waits until check succeeds, the process started as
// name exits, or timeout passes; the error carries the tail of the
// process's log.
func (cp *ControlPlane) WaitProcessReady(ctx context.Context, name string, timeout time.Duration, check func(context.Context) error) error {
	p := cp.process(name)
	if p == nil {
		return fmt.Errorf("no process %s", name)
	}
	return waitReady(ctx, p, timeout, check)
}

// IssueServingCert writes tls.crt and tls.key into dir: a serving
// certificate for 127.0.0.1 and dnsNames, signed by the control plane's CA.
// It returns that CA (PEM), the caBundle of a webhook served with it.
func (cp *ControlPlane) IssueServingCert(dir string, dnsNames ...string) ([]byte, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create cert dir: %w", err)
	}
	cn := "127.0.0.1"
	if len(dnsNames) > 0 {
		cn = dnsNames[0]
	}
	certPEM, keyPEM, err := cp.pki.issue(pkix.Name{CommonName: cn}, x509.ExtKeyUsageServerAuth,
		[]net.IP{net.ParseIP("127.0.0.1")}, dnsNames)
	if err != nil {
		return nil, fmt.Errorf("issue serving certificate: %w", err)
	}
	if err := writePair(filepath.Join(dir, "tls.crt"), certPEM, filepath.Join(dir, "tls.key"), keyPEM); err != nil {
		return nil, err
	}
	return cp.pki.caPEM, nil
}
