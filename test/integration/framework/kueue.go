package framework

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	"sigs.k8s.io/yaml"
)

// KueueBinDirEnv names the folder holding the Kueue binary and its CRDs and
// webhook configurations (what hack/build-kueue.sh prints). When it is
// unset, StartKueue runs hack/build-kueue.sh, which builds Kueue from the Go
// module proxy once and caches it.
const KueueBinDirEnv = "GPUFABRIC_KUEUE_BIN"

// Names Kueue's internal certificate management works with: its namespace,
// the webhook Service its serving certificate is issued for, and the Secret
// that holds the certificate (mounted into its pod in a real install).
const (
	KueueNamespace      = "kueue-system"
	kueueWebhookService = "kueue-webhook-service"
	kueueWebhookSecret  = "kueue-webhook-server-cert"
)

// KueueResource is a resource of Kueue's API (kueue.x-k8s.io) in the
// version its controllers use and store: workloads, clusterqueues,
// localqueues, resourceflavors.
func KueueResource(resource string) schema.GroupVersionResource {
	return schema.GroupVersionResource{Group: "kueue.x-k8s.io", Version: "v1beta2", Resource: resource}
}

// KueueQueueLabel is the label that puts a Job into a LocalQueue.
const KueueQueueLabel = "kueue.x-k8s.io/queue-name"

// KueueOptions configure the Kueue controller manager.
type KueueOptions struct {
	// DeviceClassMappings maps a Kueue quota resource name to the
	// DeviceClasses whose devices it counts (Kueue's DRA quota,
	// resources.deviceClassMappings).
	DeviceClassMappings map[string][]string
	// Frameworks are the Kueue integrations to enable; default batch/job.
	// Only their webhooks (and Kueue's own) are registered.
	Frameworks []string
}

// StartKueue runs the Kueue controller manager as a process of the control
// plane, the way a cluster install runs it, except that nothing runs in a pod:
//   - Kueue's CRDs and webhook configurations come from the module source
//     the binary was built from; the webhooks and the CRD conversion point
//     at https://127.0.0.1:<port> instead of the kueue-webhook-service;
//   - Kueue's internal certificate management stays on; the test plays the
//     kubelet that mounts the certificate Secret: it creates the Secret with
//     a CA and a serving certificate that is valid for the Service name
//     (so Kueue keeps it) and for 127.0.0.1 (so the apiserver accepts it),
//     and writes the same files into Kueue's certificate dir;
//   - leader election and the visibility API server (a fixed port) are off.
//
// It returns when Kueue is ready (certificates injected, webhook server up).
func (cp *ControlPlane) StartKueue(ctx context.Context, opts KueueOptions) error {
	logger := klog.FromContext(ctx)
	assets, err := kueueDir()
	if err != nil {
		return err
	}
	if len(opts.Frameworks) == 0 {
		opts.Frameworks = []string{"batch/job"}
	}
	ports, err := freePorts(2)
	if err != nil {
		return err
	}
	webhookURL := fmt.Sprintf("https://127.0.0.1:%d", ports[0])
	dir := filepath.Join(cp.dir, "kueue")
	certs, err := newKueueCerts(filepath.Join(dir, "certs"))
	if err != nil {
		return err
	}
	admin, err := kubernetes.NewForConfig(cp.AdminConfig())
	if err != nil {
		return fmt.Errorf("build admin client: %w", err)
	}
	if err := cp.installKueueCRDs(ctx, filepath.Join(assets, "kueue-crds.yaml"), webhookURL, certs.caPEM); err != nil {
		return err
	}
	if err := installKueueWebhooks(ctx, admin, filepath.Join(assets, "kueue-webhooks.yaml"), webhookURL, certs.caPEM, opts.Frameworks); err != nil {
		return err
	}
	if err := createKueueSecret(ctx, admin, certs); err != nil {
		return err
	}
	config := filepath.Join(dir, "config.yaml")
	if err := writeKueueConfig(config, opts, ports, certs.dir); err != nil {
		return err
	}
	if err := cp.StartProcess("kueue", filepath.Join(assets, "kueue"),
		"--config="+config, "--kubeconfig="+cp.kubeconfig, "--zap-log-level=2"); err != nil {
		return err
	}
	url := fmt.Sprintf("http://127.0.0.1:%d/readyz", ports[1])
	if err := waitReady(ctx, cp.process("kueue"), 90*time.Second, httpCheck(insecureClient(), url)); err != nil {
		return err
	}
	logger.Info("Kueue ready", "webhook", webhookURL, "log", cp.ProcessLog("kueue"))
	return nil
}

// writeKueueConfig writes Kueue's Configuration (config.kueue.x-k8s.io/v1beta2).
func writeKueueConfig(path string, opts KueueOptions, ports []int, certDir string) error {
	names := make([]string, 0, len(opts.DeviceClassMappings))
	for name := range opts.DeviceClassMappings {
		names = append(names, name)
	}
	sort.Strings(names)
	var mappings []map[string]any
	for _, name := range names {
		mappings = append(mappings, map[string]any{"name": name, "deviceClassNames": opts.DeviceClassMappings[name]})
	}
	cfg := map[string]any{
		"apiVersion":     "config.kueue.x-k8s.io/v1beta2",
		"kind":           "Configuration",
		"namespace":      KueueNamespace,
		"health":         map[string]any{"healthProbeBindAddress": fmt.Sprintf("127.0.0.1:%d", ports[1])},
		"metrics":        map[string]any{"bindAddress": "0"},
		"webhook":        map[string]any{"host": "127.0.0.1", "port": ports[0], "certDir": certDir},
		"leaderElection": map[string]any{"leaderElect": false},
		"internalCertManagement": map[string]any{
			"enable": true, "webhookServiceName": kueueWebhookService, "webhookSecretName": kueueWebhookSecret,
		},
		"clientConnection": map[string]any{"qps": 300, "burst": 500},
		"integrations":     map[string]any{"frameworks": opts.Frameworks},
		// The visibility API server listens on a fixed port (8082).
		"featureGates": map[string]bool{"VisibilityOnDemand": false},
	}
	if len(mappings) > 0 {
		cfg["resources"] = map[string]any{"deviceClassMappings": mappings}
	}
	data, err := yaml.Marshal(cfg)
	if err != nil {
		return fmt.Errorf("encode kueue config: %w", err)
	}
	if err := os.WriteFile(path, data, 0o600); err != nil {
		return fmt.Errorf("write kueue config: %w", err)
	}
	return nil
}

// createKueueSecret creates Kueue's namespace and the certificate Secret its
// cert rotator reads (keys as the rotator writes them).
func createKueueSecret(ctx context.Context, c kubernetes.Interface, certs *kueueCerts) error {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: KueueNamespace}}
	if _, err := c.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create namespace %s: %w", KueueNamespace, err)
	}
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: KueueNamespace, Name: kueueWebhookSecret},
		Data: map[string][]byte{
			"ca.crt": certs.caPEM, "ca.key": certs.caKeyPEM,
			"tls.crt": certs.certPEM, "tls.key": certs.keyPEM,
		},
	}
	if _, err := c.CoreV1().Secrets(KueueNamespace).Create(ctx, secret, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create kueue certificate secret: %w", err)
	}
	return nil
}

// kueueDir returns the folder with the kueue binary and its manifests,
// building them if needed.
func kueueDir() (string, error) {
	if dir := os.Getenv(KueueBinDirEnv); dir != "" {
		return filepath.Abs(dir)
	}
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	cmd := exec.Command(filepath.Join(root, "hack", "build-kueue.sh"))
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = os.Stderr // progress of a cold build
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("build kueue (hack/build-kueue.sh): %w", err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	return lines[len(lines)-1], nil
}
