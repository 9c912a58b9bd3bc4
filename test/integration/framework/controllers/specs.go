package controllers

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"sigs.k8s.io/yaml"
)

// spec is how one controller runs under the framework.
type spec struct {
	name Controller
	// webhooks: its default install registers webhooks (the assets
	// <name>-webhooks.yaml and its two patches exist).
	webhooks bool
	// namePrefix is the kustomize namePrefix its install gives the webhook
	// configurations ("" when its patches name them).
	namePrefix string
	// certDir is where it reads its webhook serving certificate (and
	// JobSet its metrics one), given its dir.
	certDir func(dir string) string
	// command returns its flags and extra environment, writing its
	// configuration file into r.dir.
	command func(r run) (args, env []string, err error)
}

// run is one start of a controller: its dir (under the control plane's
// state dir), certificate dir, the admin kubeconfig and its free ports.
type run struct {
	dir, certDir, kubeconfig             string
	webhookPort, healthPort, metricsPort int
}

func (r run) addr(port int) string { return "127.0.0.1:" + strconv.Itoa(port) }

func specOf(c Controller) (spec, bool) {
	certs := func(dir string) string { return filepath.Join(dir, "certs") }
	switch c {
	case JobSet:
		return spec{name: JobSet, webhooks: true, namePrefix: "jobset-", certDir: certs, command: jobSetCommand}, true
	case LWS:
		return spec{name: LWS, webhooks: true, namePrefix: "lws-", certDir: certs, command: lwsCommand}, true
	case Trainer:
		return spec{name: Trainer, webhooks: true, certDir: trainerCertDir, command: trainerCommand}, true
	case KubeRay:
		return spec{name: KubeRay, certDir: certs, command: kubeRayCommand}, true
	}
	return spec{}, false
}

// jobSetCommand: config.jobset.x-k8s.io/v1alpha1. With internal
// certificate management off, JobSet serves metrics with the certificate
// in metrics.certDir (else it wants one at a fixed path).
func jobSetCommand(r run) ([]string, []string, error) {
	path, err := writeConfig(r.dir, map[string]any{
		"apiVersion":             "config.jobset.x-k8s.io/v1alpha1",
		"kind":                   "Configuration",
		"leaderElection":         map[string]any{"leaderElect": false},
		"health":                 map[string]any{"healthProbeBindAddress": r.addr(r.healthPort)},
		"metrics":                map[string]any{"bindAddress": r.addr(r.metricsPort), "certDir": r.certDir},
		"webhook":                map[string]any{"host": "127.0.0.1", "port": r.webhookPort, "certDir": r.certDir},
		"internalCertManagement": map[string]any{"enable": false},
	})
	return []string{"--config=" + path, "--kubeconfig=" + r.kubeconfig, "--zap-log-level=2"}, nil, err
}

// lwsCommand: config.lws.x-k8s.io/v1alpha1; its metrics use a self-signed
// certificate.
func lwsCommand(r run) ([]string, []string, error) {
	path, err := writeConfig(r.dir, map[string]any{
		"apiVersion":             "config.lws.x-k8s.io/v1alpha1",
		"kind":                   "Configuration",
		"leaderElection":         map[string]any{"leaderElect": false},
		"health":                 map[string]any{"healthProbeBindAddress": r.addr(r.healthPort)},
		"metrics":                map[string]any{"bindAddress": r.addr(r.metricsPort)},
		"webhook":                map[string]any{"host": "127.0.0.1", "port": r.webhookPort, "certDir": r.certDir},
		"internalCertManagement": map[string]any{"enable": false},
	})
	return []string{"--config=" + path, "--kubeconfig=" + r.kubeconfig, "--zap-log-level=2"}, nil, err
}

// trainerCertDir: Trainer's configuration has no webhook certificate dir;
// controller-runtime's default is $TMPDIR/k8s-webhook-server/serving-certs,
// and trainerCommand points TMPDIR into the controller's dir.
func trainerCertDir(dir string) string {
	return filepath.Join(dir, "tmp", "k8s-webhook-server", "serving-certs")
}

// trainerCommand: config.trainer.kubeflow.org/v1alpha1 (decoded strictly);
// its metrics use a self-signed certificate.
func trainerCommand(r run) ([]string, []string, error) {
	path, err := writeConfig(r.dir, map[string]any{
		"apiVersion":     "config.trainer.kubeflow.org/v1alpha1",
		"kind":           "Configuration",
		"leaderElection": map[string]any{"leaderElect": false},
		"health":         map[string]any{"healthProbeBindAddress": r.addr(r.healthPort)},
		"metrics":        map[string]any{"bindAddress": r.addr(r.metricsPort), "secureServing": true},
		"webhook":        map[string]any{"host": "127.0.0.1", "port": r.webhookPort},
		"certManagement": map[string]any{"enable": false},
	})
	env := []string{"TMPDIR=" + filepath.Join(r.dir, "tmp")}
	return []string{"--config=" + path, "--kubeconfig=" + r.kubeconfig, "--zap-log-level=2"}, env, err
}

// kubeRayCommand: flags only (a config file replaces all of them). Its
// metrics are plain HTTP, as upstream serves them.
func kubeRayCommand(r run) ([]string, []string, error) {
	if err := os.MkdirAll(r.dir, 0o700); err != nil {
		return nil, nil, fmt.Errorf("create dir: %w", err)
	}
	return []string{
		"--kubeconfig=" + r.kubeconfig,
		"--metrics-addr=" + r.addr(r.metricsPort),
		"--health-probe-bind-address=" + r.addr(r.healthPort),
		"--enable-leader-election=false",
		"--log-stdout-encoder=console",
	}, nil, nil
}

// writeConfig writes a controller's configuration file into dir.
func writeConfig(dir string, cfg map[string]any) (string, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("create dir: %w", err)
	}
	data, err := yaml.Marshal(cfg)
	if err != nil {
		return "", fmt.Errorf("encode config: %w", err)
	}
	path := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		return "", fmt.Errorf("write config: %w", err)
	}
	return path, nil
}
