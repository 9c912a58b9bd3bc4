package main

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"k8s.io/klog/v2/ktesting"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

// fakeRegistration answers the kubelet's registration calls.
type fakeRegistration struct {
	registerapi.UnimplementedRegistrationServer
}

func (fakeRegistration) GetInfo(context.Context, *registerapi.InfoRequest) (*registerapi.PluginInfo, error) {
	return &registerapi.PluginInfo{Type: "DRAPlugin", Name: "gpufabric.dev"}, nil
}

func (fakeRegistration) NotifyRegistrationStatus(context.Context, *registerapi.RegistrationStatus) (*registerapi.RegistrationStatusResponse, error) {
	return &registerapi.RegistrationStatusResponse{}, nil
}

func serveSocket(t *testing.T, path string, srv *grpc.Server) {
	t.Helper()
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(srv.Stop)
}

// TestProbes: both checks fail while the plugin starts; sockets passes
// once both servers answer, and fails when the DRA server stops;
// registration passes only after the kubelet's NotifyRegistrationStatus
// said registered, and says why when the kubelet refused.
func TestProbes(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	logger, _ := ktesting.NewTestContext(t)
	dir := t.TempDir()
	o := &runOptions{pluginDir: filepath.Join(dir, "plugin"), registrarDir: dir}
	pr := &probes{}
	hh, err := pr.handler(logger)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	hh.Install(mux)
	get := func(path string) (int, string) {
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		return rec.Code, rec.Body.String()
	}
	expect := func(step, path string, wantCode int, want string) {
		t.Helper()
		code, body := get(path)
		if code != wantCode || !strings.Contains(body, want) {
			t.Errorf("%s: GET %s = %d %q, want %d with %q", step, path, code, body, wantCode, want)
		}
	}
	expect("starting", "/livez?verbose", 500, "[-]sockets failed: starting: discovering the hardware")

	o.pluginDir = dir
	dra, reg := o.socketPaths()
	if filepath.Base(dra) != "dra.sock" || filepath.Base(reg) != "gpufabric.dev-reg.sock" {
		t.Errorf("socket paths %s, %s", dra, reg)
	}
	regServer := grpc.NewServer(grpc.UnaryInterceptor(pr.interceptor))
	registerapi.RegisterRegistrationServer(regServer, fakeRegistration{})
	serveSocket(t, reg, regServer)
	draServer := grpc.NewServer()
	serveSocket(t, dra, draServer)
	pr.started(o)
	expect("listening", "/livez?verbose", 200, "[+]sockets ok")
	expect("not registered", "/readyz?verbose", 500, "[-]registration failed: the kubelet has not registered the plugin yet: it watches "+dir+" for gpufabric.dev-reg.sock")

	notify := func(s *registerapi.RegistrationStatus) {
		t.Helper()
		conn, err := grpc.NewClient("unix://"+reg, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		if _, err := registerapi.NewRegistrationClient(conn).NotifyRegistrationStatus(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	notify(&registerapi.RegistrationStatus{PluginRegistered: false, Error: "plugin gpufabric.dev: unsupported versions"})
	expect("refused", "/readyz?verbose", 500, "[-]registration failed: the kubelet refused the registration: plugin gpufabric.dev: unsupported versions")
	notify(&registerapi.RegistrationStatus{PluginRegistered: true})
	expect("registered", "/readyz?verbose", 200, "[+]registration ok")

	draServer.Stop()
	expect("DRA server gone", "/livez?verbose", 500, "[-]sockets failed: DRA socket "+dra)

	o.podUID = "0b8b0d7e-1c7e-4b6a-9d1e-5c8f2a3b4c5d"
	if dra, reg := o.socketPaths(); filepath.Base(dra) != "dra-"+o.podUID+".sock" || !strings.Contains(reg, o.podUID) {
		t.Errorf("rolling-update socket paths %s, %s", dra, reg)
	}
}

// TestVersionAndHelp: --version (top level, as a subcommand or among a
// subcommand's flags) prints the build; a subcommand's help lists
// component-base's logging flags and none of klog's legacy ones.
func TestVersionAndHelp(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	for _, args := range [][]string{{"--version"}, {"version"}, {"run", "--version"}} {
		var stdout, stderr bytes.Buffer
		if code := dispatch(ctx, args, &stdout, &stderr); code != 0 || !strings.HasPrefix(stdout.String(), "kubelet-plugin devel (commit ") {
			t.Errorf("%v: exit %d, stdout %q, stderr %q", args, code, stdout.String(), stderr.String())
		}
	}
	fs := newFlagSet("run", &bytes.Buffer{})
	var help bytes.Buffer
	fs.SetOutput(&help)
	fs.PrintDefaults()
	for _, want := range []string{"-logging-format", "(env GPUFABRIC_LOGGING_FORMAT)", "-v value", "-vmodule"} {
		if !strings.Contains(help.String(), want) {
			t.Errorf("help lacks %q", want)
		}
	}
	for _, legacy := range []string{"logtostderr", "alsologtostderr", "log_dir", "log_file", "stderrthreshold", "skip_headers", "add_dir_header", "one_output", "log_backtrace_at"} {
		if strings.Contains(help.String(), "-"+legacy) {
			t.Errorf("help lists klog's legacy flag -%s", legacy)
		}
	}
}
