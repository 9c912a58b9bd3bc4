package framework

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"k8s.io/client-go/rest"
)

// Proxy is a loopback HTTPS proxy in front of the apiserver for one client
// (it forwards the client's bearer token as it is; its serving certificate
// is signed by the control plane's CA): it records every
// request, and its rules can delay, hold, drop or refuse them. Tests put it
// between a scheduler process and the apiserver to pause or break the
// conversation at exact points. Safe for concurrent use.
type Proxy struct {
	// URL is what the client dials (https on 127.0.0.1).
	URL   string
	caPEM []byte

	upstream  *url.URL
	transport http.RoundTripper
	streaming *httputil.ReverseProxy
	srv       *http.Server

	mu    sync.Mutex
	rules []*Rule
	log   []ProxyRecord
}

// Rule applies a Fault to the requests Match accepts, at most Times times
// (0: always). OnMatch, when set, is called (once per match) before the
// fault is applied.
type Rule struct {
	Match   func(r *http.Request) bool
	Fault   Fault
	Times   int
	OnMatch func(r *http.Request)
	matched int
}

// Fault is what happens to a matched request. The zero Fault forwards it.
type Fault struct {
	// Delay before anything else.
	Delay time.Duration
	// Hold blocks the request until the channel is closed (or the client
	// gives up), then goes on with the rest of the fault.
	Hold <-chan struct{}
	// Status answers with this HTTP status (a Kubernetes Status body)
	// without forwarding: 409, 429 (with Retry-After: 1), 500, 503...
	Status int
	// DropBefore closes the connection without forwarding; DropAfter
	// forwards the request, then closes the connection without answering
	// (the write may have happened, the client cannot know).
	DropBefore, DropAfter bool
}

// ProxyRecord is one request that passed the proxy.
type ProxyRecord struct {
	Start  time.Time
	Method string
	Path   string
	// Status is the answer the client got; 0 when the connection was
	// dropped. Forwarded says the apiserver saw the request.
	Status    int
	Forwarded bool
	// Body holds the start of an error answer.
	Body string
}

// NewProxy starts a proxy to the control plane's apiserver until ctx is done.
func (cp *ControlPlane) NewProxy(ctx context.Context) (*Proxy, error) {
	up, err := url.Parse(cp.Host())
	if err != nil {
		return nil, fmt.Errorf("parse apiserver URL: %w", err)
	}
	rt, err := rest.TransportFor(&rest.Config{TLSClientConfig: rest.TLSClientConfig{CAData: cp.pki.caPEM}})
	if err != nil {
		return nil, fmt.Errorf("proxy transport: %w", err)
	}
	certPEM, keyPEM, err := cp.pki.issue(pkix.Name{CommonName: "gpufabric-test-proxy"}, x509.ExtKeyUsageServerAuth, []net.IP{net.IPv4(127, 0, 0, 1)}, nil)
	if err != nil {
		return nil, fmt.Errorf("proxy serving certificate: %w", err)
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("proxy serving certificate: %w", err)
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12})
	if err != nil {
		return nil, fmt.Errorf("listen: %w", err)
	}
	p := &Proxy{URL: "https://" + ln.Addr().String(), caPEM: cp.pki.caPEM, upstream: up, transport: rt}
	p.streaming = &httputil.ReverseProxy{
		Rewrite:       func(r *httputil.ProxyRequest) { r.SetURL(up) },
		Transport:     rt,
		FlushInterval: -1,
	}
	p.srv = &http.Server{Handler: http.HandlerFunc(p.serve), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = p.srv.Serve(ln) }()
	context.AfterFunc(ctx, func() { _ = p.srv.Close() })
	return p, nil
}

// AddRule adds a rule; the first matching rule applies.
func (p *Proxy) AddRule(r *Rule) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.rules = append(p.rules, r)
}

// ClearRules removes every rule.
func (p *Proxy) ClearRules() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.rules = nil
}

// Log returns the requests so far (a copy).
func (p *Proxy) Log() []ProxyRecord {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]ProxyRecord(nil), p.log...)
}

// Close stops the proxy and drops its connections.
func (p *Proxy) Close() { _ = p.srv.Close() }

// IsWrite reports whether a request changes state.
func IsWrite(r *http.Request) bool {
	return r.Method != http.MethodGet && r.Method != http.MethodHead && r.Method != http.MethodOptions
}

func (p *Proxy) fault(r *http.Request) Fault {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, rule := range p.rules {
		if (rule.Times == 0 || rule.matched < rule.Times) && rule.Match(r) {
			rule.matched++
			if rule.OnMatch != nil {
				rule.OnMatch(r)
			}
			return rule.Fault
		}
	}
	return Fault{}
}

func (p *Proxy) record(rec ProxyRecord) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.log = append(p.log, rec)
}

func (p *Proxy) serve(w http.ResponseWriter, r *http.Request) {
	rec := ProxyRecord{Start: time.Now(), Method: r.Method, Path: r.URL.Path}
	f := p.fault(r)
	if f.Delay > 0 {
		time.Sleep(f.Delay)
	}
	if f.Hold != nil {
		select {
		case <-f.Hold:
		case <-r.Context().Done():
			p.record(rec)
			return
		}
	}
	switch {
	case f.DropBefore:
		drop(w)
	case f.Status != 0:
		rec.Status = f.Status
		writeStatus(w, f.Status)
	case r.URL.Query().Get("watch") == "true":
		rec.Forwarded, rec.Status = true, http.StatusOK
		p.streaming.ServeHTTP(w, r)
	default:
		rec.Forwarded = true
		rec.Status, rec.Body = p.forward(w, r, f.DropAfter)
	}
	p.record(rec)
}

// forward sends a request upstream and, unless dropAfter, copies the answer
// back. It returns the status the client got and the start of an error body.
func (p *Proxy) forward(w http.ResponseWriter, r *http.Request, dropAfter bool) (int, string) {
	out := r.Clone(r.Context())
	out.RequestURI = ""
	out.URL.Scheme, out.URL.Host, out.Host = p.upstream.Scheme, p.upstream.Host, p.upstream.Host
	resp, err := p.transport.RoundTrip(out)
	if err != nil {
		writeStatus(w, http.StatusBadGateway)
		return http.StatusBadGateway, err.Error()
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || dropAfter {
		drop(w)
		return 0, ""
	}
	for k, vs := range resp.Header {
		for _, v := range vs {
			w.Header().Add(k, v)
		}
	}
	w.WriteHeader(resp.StatusCode)
	_, _ = w.Write(body)
	snippet := ""
	if resp.StatusCode >= 300 {
		snippet = string(body[:min(len(body), 1024)])
	}
	return resp.StatusCode, snippet
}

// drop closes the client's connection without an answer.
func drop(w http.ResponseWriter) {
	hj, ok := w.(http.Hijacker)
	if !ok {
		panic(http.ErrAbortHandler)
	}
	conn, _, err := hj.Hijack()
	if err == nil {
		_ = conn.Close()
	}
}

// writeStatus answers like the apiserver does for an error status.
func writeStatus(w http.ResponseWriter, code int) {
	reason := map[int]string{409: "Conflict", 429: "TooManyRequests", 500: "InternalError", 503: "ServiceUnavailable", 504: "Timeout"}[code]
	if reason == "" {
		reason = "Unknown"
	}
	if code == http.StatusTooManyRequests || code == http.StatusServiceUnavailable {
		w.Header().Set("Retry-After", "1")
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	var b bytes.Buffer
	fmt.Fprintf(&b, `{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"injected by the test proxy","reason":%q,"code":%d}`, reason, code)
	_, _ = w.Write(b.Bytes())
}

// Kubeconfig writes a kubeconfig that reaches the apiserver through the
// proxy with a bearer token, and returns its path.
func (p *Proxy) Kubeconfig(dir, name, token string) (string, error) {
	path := filepath.Join(dir, name+".kubeconfig")
	cfg := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: c
  cluster: {server: %q, certificate-authority-data: %q}
users:
- name: u
  user: {token: %q}
contexts:
- name: c
  context: {cluster: c, user: u}
current-context: c
`, p.URL, base64.StdEncoding.EncodeToString(p.caPEM), token)
	if strings.ContainsAny(token, "\n\"") {
		return "", errors.New("token has quotes or newlines")
	}
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		return "", fmt.Errorf("write kubeconfig: %w", err)
	}
	return path, nil
}
