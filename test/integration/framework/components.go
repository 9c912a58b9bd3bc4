package framework

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

func (cp *ControlPlane) startEtcd(ctx context.Context) (string, error) {
	ports, err := freePorts(2)
	if err != nil {
		return "", err
	}
	client := fmt.Sprintf("http://127.0.0.1:%d", ports[0])
	peer := fmt.Sprintf("http://127.0.0.1:%d", ports[1])
	p, err := cp.start("etcd", []string{
		"--name=default",
		"--data-dir=" + filepath.Join(cp.dir, "etcd"),
		"--listen-client-urls=" + client,
		"--advertise-client-urls=" + client,
		"--listen-peer-urls=" + peer,
		"--initial-advertise-peer-urls=" + peer,
		"--initial-cluster=default=" + peer,
		"--unsafe-no-fsync",
		"--log-level=warn",
	})
	if err != nil {
		return "", err
	}
	return client, waitReady(ctx, p, 30*time.Second, httpCheck(insecureClient(), client+"/health"))
}

func (cp *ControlPlane) startAPIServer(ctx context.Context, etcdURL string) error {
	ports, err := freePorts(1)
	if err != nil {
		return err
	}
	cp.host = fmt.Sprintf("https://127.0.0.1:%d", ports[0])
	k := cp.pki
	p, err := cp.start("kube-apiserver", []string{
		"--etcd-servers=" + etcdURL,
		"--bind-address=127.0.0.1",
		"--advertise-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(ports[0]),
		"--cert-dir=" + filepath.Join(cp.dir, "apiserver"),
		"--tls-cert-file=" + k.servingCert(),
		"--tls-private-key-file=" + k.servingKey(),
		"--client-ca-file=" + k.caFile(),
		"--service-account-key-file=" + k.saPublicKey(),
		"--service-account-signing-key-file=" + k.saPrivateKey(),
		"--service-account-issuer=https://kubernetes.default.svc",
		"--authorization-mode=RBAC",
		"--service-cluster-ip-range=10.0.0.0/24",
		"--allow-privileged=true",
		"--endpoint-reconciler-type=none",
		"--enable-priority-and-fairness=false",
		"--profiling=false",
		"--feature-gates=" + cp.gates,
		"--runtime-config=" + cp.runtimeConfig,
		"--v=1",
	})
	if err != nil {
		return err
	}
	httpClient, err := rest.HTTPClientFor(cp.AdminConfig())
	if err != nil {
		return fmt.Errorf("build admin http client: %w", err)
	}
	return waitReady(ctx, p, 90*time.Second, httpCheck(httpClient, cp.host+"/readyz"))
}

// bootstrap writes the admin kubeconfig and, when no controller manager runs,
// creates what it would: the default namespace's default ServiceAccount.
func (cp *ControlPlane) bootstrap(ctx context.Context, withoutKCM bool) error {
	cp.kubeconfig = filepath.Join(cp.dir, "admin.kubeconfig")
	if err := writeKubeconfig(cp.kubeconfig, cp.host, cp.pki); err != nil {
		return err
	}
	if !withoutKCM {
		return nil
	}
	client, err := kubernetes.NewForConfig(cp.AdminConfig())
	if err != nil {
		return fmt.Errorf("build admin client: %w", err)
	}
	return EnsureServiceAccount(ctx, client, metav1.NamespaceDefault)
}

// EnsureServiceAccount creates namespace's default ServiceAccount, which pod
// admission requires (kube-controller-manager does this when it runs).
// Idempotent.
func EnsureServiceAccount(ctx context.Context, client kubernetes.Interface, namespace string) error {
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default", Namespace: namespace}}
	_, err := client.CoreV1().ServiceAccounts(namespace).Create(ctx, sa, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create default service account in %s: %w", namespace, err)
	}
	return nil
}

func writeKubeconfig(path, host string, k *pki) error {
	return writeKubeconfigFor(path, host, k.caFile(), k.adminCertFile(), k.adminKeyFile())
}

func writeKubeconfigFor(path, host, caFile, certFile, keyFile string) error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["gpufabric"] = &clientcmdapi.Cluster{Server: host, CertificateAuthority: caFile}
	cfg.AuthInfos["user"] = &clientcmdapi.AuthInfo{ClientCertificate: certFile, ClientKey: keyFile}
	cfg.Contexts["gpufabric"] = &clientcmdapi.Context{Cluster: "gpufabric", AuthInfo: "user"}
	cfg.CurrentContext = "gpufabric"
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		return fmt.Errorf("write kubeconfig: %w", err)
	}
	return nil
}

func (cp *ControlPlane) startControllerManager(ctx context.Context, qps int, nodeGrace time.Duration) error {
	ports, err := freePorts(1)
	if err != nil {
		return err
	}
	var limits []string
	if qps > 0 {
		limits = []string{"--kube-api-qps=" + strconv.Itoa(qps), "--kube-api-burst=" + strconv.Itoa(2*qps)}
	}
	if nodeGrace > 0 {
		limits = append(limits,
			"--node-monitor-grace-period="+nodeGrace.String(),
			"--node-monitor-period="+(nodeGrace/4).String(),
			"--node-eviction-rate=10")
	}
	p, err := cp.start("kube-controller-manager", append(limits,
		"--kubeconfig="+cp.kubeconfig,
		"--controllers=*,-node-ipam-controller",
		"--leader-elect=false",
		"--use-service-account-credentials=false",
		"--service-account-private-key-file="+cp.pki.saPrivateKey(),
		"--root-ca-file="+cp.pki.caFile(),
		"--bind-address=127.0.0.1",
		"--secure-port="+strconv.Itoa(ports[0]),
		"--cert-dir="+filepath.Join(cp.dir, "kcm"),
		"--feature-gates="+cp.gates,
		"--v=1",
	))
	if err != nil {
		return err
	}
	url := fmt.Sprintf("https://127.0.0.1:%d/healthz", ports[0])
	return waitReady(ctx, p, 60*time.Second, httpCheck(insecureClient(), url))
}

// kwokLeaseSeconds is the duration of the node Leases kwok holds: it renews
// them every quarter of it. With a node monitor grace period, a quarter of
// the grace is a renewal (so a healthy node never misses the grace).
func kwokLeaseSeconds(nodeGrace time.Duration) int {
	if nodeGrace <= 0 {
		return 40
	}
	return int(nodeGrace / time.Second)
}

// minNodeMonitorGracePeriod keeps kwok's renewals (a quarter of it) at a
// second or more.
const minNodeMonitorGracePeriod = 4 * time.Second

func (cp *ControlPlane) startKwok(ctx context.Context, nodeGrace time.Duration) error {
	dir, err := binaryDir()
	if err != nil {
		return err
	}
	ports, err := freePorts(1)
	if err != nil {
		return err
	}
	p, err := cp.start("kwok", []string{
		"--kubeconfig=" + cp.kubeconfig,
		"--config=" + filepath.Join(dir, "kwok-stages-v2.yaml"),
		"--manage-all-nodes=false",
		"--manage-nodes-with-annotation-selector=" + KwokNodeAnnotation + "=fake",
		"--node-lease-duration-seconds=" + strconv.Itoa(kwokLeaseSeconds(nodeGrace)),
		"--server-address=127.0.0.1:" + strconv.Itoa(ports[0]),
	})
	if err != nil {
		return err
	}
	url := fmt.Sprintf("http://127.0.0.1:%d/healthz", ports[0])
	return waitReady(ctx, p, 30*time.Second, httpCheck(insecureClient(), url))
}

// KwokNodeAnnotation marks nodes whose lifecycle (and their pods') kwok runs.
const KwokNodeAnnotation = "kwok.x-k8s.io/node"

// KubeSchedulerQPS is kube-scheduler's client rate limit in the framework
// (its default, 50/100, would make it the bottleneck of any comparison).
const KubeSchedulerQPS, KubeSchedulerBurst = 200, 2000

func (cp *ControlPlane) startKubeScheduler(ctx context.Context) error {
	ports, err := freePorts(1)
	if err != nil {
		return err
	}
	kubeconfig, err := cp.WriteUserKubeconfig("system:kube-scheduler")
	if err != nil {
		return err
	}
	config := filepath.Join(cp.dir, "kube-scheduler.yaml")
	cfg := fmt.Sprintf(`apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
clientConnection:
  kubeconfig: %q
  qps: %d
  burst: %d
leaderElection:
  leaderElect: false
`, kubeconfig, KubeSchedulerQPS, KubeSchedulerBurst)
	if err := os.WriteFile(config, []byte(cfg), 0o600); err != nil {
		return fmt.Errorf("write kube-scheduler config: %w", err)
	}
	p, err := cp.start("kube-scheduler", []string{
		"--config=" + config,
		"--bind-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(ports[0]),
		"--feature-gates=" + cp.gates,
		"--v=1",
	})
	if err != nil {
		return err
	}
	url := fmt.Sprintf("https://127.0.0.1:%d/healthz", ports[0])
	return waitReady(ctx, p, 60*time.Second, httpCheck(insecureClient(), url))
}
