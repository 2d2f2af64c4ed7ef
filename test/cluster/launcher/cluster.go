package main

// One test control plane: etcd, kube-apiserver, kube-controller-manager and
// kube-scheduler on loopback, with fresh credentials, in a directory of its own.

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

const (
	serviceClusterIPRange = "10.96.0.0/16"
	serviceClusterIP      = "10.96.0.1"
	kubernetesVersion     = "v1.37.2"
)

// featureGates are the gates passed to every server. In 1.37 every DRA gate the
// driver uses is on by default (partitionable devices, consumable capacity,
// binding conditions, device taints and taint rules, extended resource, admin
// access, prioritized list, device status); they are named here so that a
// cluster never silently runs without them. The alpha DRA gates of 1.37
// (DRADerivedAttributes, DRADeviceCompatibilityGroups, DRAListTypeAttributes,
// DRANodeAllocatableResources, DRAOptionalNodeOperations,
// DRAPartitionableDevicesType, DRAResourcePoolStatus,
// DRAWorkloadResourceClaims) are off: the driver uses none of them.
var featureGates = []string{
	"DRAPartitionableDevices=true",
	"DRAConsumableCapacity=true",
	"DRAFractionalCapacityRange=true",
	"DRADeviceBindingConditions=true",
	"DRADeviceTaints=true",
	"DRADeviceTaintRules=true",
	"DRASchedulerFilterTimeout=true",
	"DRAResourceClaimGranularStatusAuthorization=true",
}

// runtimeConfig serves the older DRA API versions beside resource.k8s.io/v1, so
// that clients which negotiate down (the upstream chart's DeviceClass
// templates, older kubelets) find them.
const runtimeConfig = "resource.k8s.io/v1beta1=true,resource.k8s.io/v1beta2=true"

type clusterOptions struct {
	dir          string
	binDir       string
	extraGates   []string
	startTimeout time.Duration
	auditLog     bool // the API server's audit log in logs/audit.log
	// Client QPS of kube-controller-manager and kube-scheduler (burst
	// twice that); 0: their defaults.
	controllerQPS int
	// kube-controller-manager's --node-monitor-grace-period; 0: its
	// default (50 s). Hundreds of simulated kubelets on a few cores can
	// miss heartbeats that kubelets on machines of their own would not.
	nodeMonitorGrace time.Duration
}

type cluster struct {
	opts        clusterOptions
	pki         *pki
	ports       map[string]int
	kubeconfig  string
	components  []*component // in start order; stopped in reverse
	apiRestarts int          // kube-apiserver restarts done by restartAPIServer
}

// freePort picks a port that is free now, below the kernel's ephemeral range
// (32768 and up by default): a port from that range, handed out by a ":0"
// listen, is soon reused by some outgoing connection on a busy machine and the
// server that binds it later fails. Several launchers side by side pick at
// random, and TestCluster retries a start that still loses a race.
func freePort() (int, error) {
	const low, high = 20000, 32000
	for attempt := 0; attempt < 200; attempt++ {
		port := low + rand.IntN(high-low)
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			continue
		}
		l.Close()
		return port, nil
	}
	return 0, errors.New("no free port in 20000-32000 after 200 tries")
}

func (c *cluster) path(parts ...string) string {
	return filepath.Join(append([]string{c.opts.dir}, parts...)...)
}

func (c *cluster) binary(name string) string { return filepath.Join(c.opts.binDir, name) }

// writeKubeconfig writes a kubeconfig with embedded credentials, so the file
// can be copied anywhere.
func (c *cluster) writeKubeconfig(path, user string, kp *keyPair) error {
	caPEM, err := os.ReadFile(c.pki.caCert)
	if err != nil {
		return err
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["nvdra-test"] = &clientcmdapi.Cluster{
		Server:                   fmt.Sprintf("https://127.0.0.1:%d", c.ports["apiserver"]),
		CertificateAuthorityData: caPEM,
	}
	cfg.AuthInfos[user] = &clientcmdapi.AuthInfo{ClientCertificateData: kp.certPEM, ClientKeyData: kp.keyPEM}
	cfg.Contexts["nvdra-test"] = &clientcmdapi.Context{Cluster: "nvdra-test", AuthInfo: user}
	cfg.CurrentContext = "nvdra-test"
	return clientcmd.WriteToFile(*cfg, path)
}

func (c *cluster) prepare() error {
	if err := os.RemoveAll(c.path("etcd")); err != nil {
		return err
	}
	for _, d := range []string{"pki", "logs", "etcd"} {
		if err := os.MkdirAll(c.path(d), 0o700); err != nil {
			return err
		}
	}
	var err error
	if c.pki, err = createPKI(c.path("pki")); err != nil {
		return err
	}
	c.ports = map[string]int{}
	for _, name := range []string{"etcd-client", "etcd-peer", "apiserver", "controller-manager", "scheduler"} {
		if c.ports[name], err = freePort(); err != nil {
			return fmt.Errorf("no free port for %s: %w", name, err)
		}
	}
	c.kubeconfig = c.path("kubeconfig")
	if err := c.writeKubeconfig(c.kubeconfig, "admin", c.pki.admin); err != nil {
		return err
	}
	if err := c.writeKubeconfig(c.path("pki", "controller-manager.kubeconfig"), "system:kube-controller-manager", c.pki.controllerMgr); err != nil {
		return err
	}
	return c.writeKubeconfig(c.path("pki", "scheduler.kubeconfig"), "system:kube-scheduler", c.pki.scheduler)
}

func (c *cluster) gates() string {
	return strings.Join(append(append([]string{}, featureGates...), c.opts.extraGates...), ",")
}

func (c *cluster) start(name, binary string, args []string) (*component, error) {
	comp, err := startComponent(name, binary, args, c.path("logs"))
	if err != nil {
		return nil, err
	}
	c.components = append(c.components, comp)
	return comp, nil
}

func (c *cluster) startEtcd() (*component, error) {
	client := fmt.Sprintf("http://127.0.0.1:%d", c.ports["etcd-client"])
	peer := fmt.Sprintf("http://127.0.0.1:%d", c.ports["etcd-peer"])
	return c.start("etcd", c.binary("etcd"), []string{
		"--name=default",
		"--data-dir=" + c.path("etcd"),
		"--listen-client-urls=" + client,
		"--advertise-client-urls=" + client,
		"--listen-peer-urls=" + peer,
		"--initial-advertise-peer-urls=" + peer,
		"--initial-cluster=default=" + peer,
		// A test cluster is thrown away at the end: durability buys nothing
		// and fsync dominates API write latency on a busy CI machine.
		"--unsafe-no-fsync=true",
		"--log-level=warn",
	})
}

func (c *cluster) startAPIServer() (*component, error) {
	if c.opts.auditLog {
		if err := os.WriteFile(c.path("audit-policy.yaml"), []byte(auditPolicy), 0o644); err != nil {
			return nil, err
		}
	}
	return c.start("kube-apiserver", c.binary("kube-apiserver"), c.apiServerArgs())
}

// auditPolicy records every request once it is answered (a watch once its
// response starts), without bodies: enough to attribute requests to clients.
const auditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
- level: Metadata
`

// restartAPIServer stops kube-apiserver and starts it again on the same port
// with the same flags, plus those listed in apiserver-restart-args (later
// flags win), and waits for /readyz. Etcd and the other servers keep running,
// so clients see what they would see in a rolling API server update: broken
// watches, refused connections, then a server whose watch cache starts anew.
// Returns how many restarts this launcher has done.
func (c *cluster) restartAPIServer() (int, error) {
	idx := -1
	for i, comp := range c.components {
		if comp.name == "kube-apiserver" {
			idx = i
		}
	}
	if idx < 0 {
		return 0, errors.New("no kube-apiserver is running")
	}
	args := c.apiServerArgs()
	if data, err := os.ReadFile(c.path("apiserver-restart-args")); err == nil {
		for _, line := range strings.Split(string(data), "\n") {
			if line = strings.TrimSpace(line); line != "" {
				args = append(args, line)
			}
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return 0, err
	}
	c.components[idx].stop(30 * time.Second)
	comp, err := startComponent("kube-apiserver", c.binary("kube-apiserver"), args, c.path("logs"))
	if err != nil {
		return 0, err
	}
	c.components[idx] = comp
	c.apiRestarts++
	admin, err := c.httpClient(true)
	if err != nil {
		return 0, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.opts.startTimeout)
	defer cancel()
	url := fmt.Sprintf("https://127.0.0.1:%d/readyz", c.ports["apiserver"])
	if err := c.waitHealthy(ctx, comp, url, admin); err != nil {
		return 0, err
	}
	return c.apiRestarts, nil
}

func (c *cluster) apiServerArgs() []string {
	p := c.pki
	var audit []string
	if c.opts.auditLog {
		audit = []string{"--audit-policy-file=" + c.path("audit-policy.yaml"), "--audit-log-path=" + c.path("logs", "audit.log")}
	}
	return append(audit, []string{
		fmt.Sprintf("--etcd-servers=http://127.0.0.1:%d", c.ports["etcd-client"]),
		"--bind-address=127.0.0.1",
		"--advertise-address=127.0.0.1",
		fmt.Sprintf("--secure-port=%d", c.ports["apiserver"]),
		"--tls-cert-file=" + p.serverCert,
		"--tls-private-key-file=" + p.serverKey,
		"--client-ca-file=" + p.caCert,
		"--service-account-key-file=" + p.saPub,
		"--service-account-signing-key-file=" + p.saKey,
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--api-audiences=https://kubernetes.default.svc.cluster.local",
		"--service-cluster-ip-range=" + serviceClusterIPRange,
		"--authorization-mode=Node,RBAC",
		"--enable-admission-plugins=NodeRestriction",
		"--allow-privileged=true",
		"--kubelet-client-certificate=" + p.kubeletClientCert,
		"--kubelet-client-key=" + p.kubeletKey,
		"--proxy-client-cert-file=" + p.frontProxyCert,
		"--proxy-client-key-file=" + p.frontProxyKey,
		"--requestheader-client-ca-file=" + p.frontProxyCA,
		"--requestheader-allowed-names=front-proxy-client",
		"--requestheader-username-headers=X-Remote-User",
		"--requestheader-group-headers=X-Remote-Group",
		"--requestheader-extra-headers-prefix=X-Remote-Extra-",
		// No service proxy runs here: the API server must reach webhooks and
		// aggregated servers through the endpoints of their Service (pod IPs).
		"--enable-aggregator-routing=true",
		// Loopback addresses are not valid Endpoints for the kubernetes
		// Service; clients in this cluster are given the address directly.
		"--endpoint-reconciler-type=none",
		"--runtime-config=" + runtimeConfig,
		// Close open watches within 3 s of a SIGTERM. With the default (0)
		// the server does not end them, and its HTTP server's shutdown then
		// waits for them: restartAPIServer's stop ran into its 30 s grace
		// and SIGKILL whenever a client held a watch (33 s away instead of
		// 7 s, measured).
		"--shutdown-watch-termination-grace-period=3s",
		"--feature-gates=" + c.gates(),
		"--profiling=false",
		"--v=1",
	}...)
}

func (c *cluster) startControllerManager() (*component, error) {
	p := c.pki
	kc := c.path("pki", "controller-manager.kubeconfig")
	return c.start("kube-controller-manager", c.binary("kube-controller-manager"), append([]string{
		"--kubeconfig=" + kc,
		"--authentication-kubeconfig=" + kc,
		"--authorization-kubeconfig=" + kc,
		"--bind-address=127.0.0.1",
		fmt.Sprintf("--secure-port=%d", c.ports["controller-manager"]),
		"--leader-elect=false",
		"--use-service-account-credentials=true",
		"--service-account-private-key-file=" + p.saKey,
		"--root-ca-file=" + p.caCert,
		"--cluster-signing-cert-file=" + p.caCert,
		"--cluster-signing-key-file=" + p.caKey,
		"--service-cluster-ip-range=" + serviceClusterIPRange,
		"--allocate-node-cidrs=false",
		"--controllers=*",
		"--feature-gates=" + c.gates(),
		"--profiling=false",
		"--v=1",
	}, append(c.qpsFlags(), c.nodeMonitorFlags()...)...))
}

// nodeMonitorFlags sets how long a node may miss heartbeats before it is
// NotReady (nodeMonitorGrace), when asked.
func (c *cluster) nodeMonitorFlags() []string {
	if c.opts.nodeMonitorGrace <= 0 {
		return nil
	}
	return []string{"--node-monitor-grace-period=" + c.opts.nodeMonitorGrace.String()}
}

// qpsFlags raises the client limits of kube-controller-manager and
// kube-scheduler when asked (controllerQPS), as large clusters do.
func (c *cluster) qpsFlags() []string {
	if c.opts.controllerQPS <= 0 {
		return nil
	}
	return []string{fmt.Sprintf("--kube-api-qps=%d", c.opts.controllerQPS),
		fmt.Sprintf("--kube-api-burst=%d", 2*c.opts.controllerQPS)}
}

func (c *cluster) startScheduler() (*component, error) {
	kc := c.path("pki", "scheduler.kubeconfig")
	return c.start("kube-scheduler", c.binary("kube-scheduler"), append([]string{
		"--kubeconfig=" + kc,
		"--authentication-kubeconfig=" + kc,
		"--authorization-kubeconfig=" + kc,
		"--bind-address=127.0.0.1",
		fmt.Sprintf("--secure-port=%d", c.ports["scheduler"]),
		"--leader-elect=false",
		"--feature-gates=" + c.gates(),
		"--profiling=false",
		"--v=1",
	}, c.qpsFlags()...))
}

// waitHealthy polls url until it answers 200 "ok", the component exits, or the
// deadline passes. A starting server has no event to wait on, so a short poll
// it is.
func (c *cluster) waitHealthy(ctx context.Context, comp *component, url string, client *http.Client) error {
	for {
		resp, err := client.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-comp.exited:
			return fmt.Errorf("%s exited during start-up (%v); see %s", comp.name, comp.err, comp.logPath())
		case <-ctx.Done():
			return fmt.Errorf("%s not healthy at %s within %s; see %s", comp.name, url, c.opts.startTimeout, comp.logPath())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (c *cluster) httpClient(withAdminCert bool) (*http.Client, error) {
	caPEM, err := os.ReadFile(c.pki.caCert)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	cfg := &tls.Config{RootCAs: pool}
	if withAdminCert {
		cert, err := tls.X509KeyPair(c.pki.admin.certPEM, c.pki.admin.keyPEM)
		if err != nil {
			return nil, err
		}
		cfg.Certificates = []tls.Certificate{cert}
	} else {
		// The scheduler and controller manager serve health with self-signed
		// certificates of their own.
		cfg = &tls.Config{InsecureSkipVerify: true}
	}
	return &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg}}, nil
}

// waitDefaultServiceAccount waits until the ServiceAccount controller has
// created "default" in the default namespace: before that, pods cannot be
// created there.
func (c *cluster) waitDefaultServiceAccount(ctx context.Context) error {
	cfg, err := clientcmd.BuildConfigFromFlags("", c.kubeconfig)
	if err != nil {
		return err
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	for {
		_, err := cs.CoreV1().ServiceAccounts("default").Get(ctx, "default", metav1.GetOptions{})
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("ServiceAccount default/default not created within %s (last error: %v)", c.opts.startTimeout, err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// up starts every component in dependency order and returns when the cluster
// can take workloads.
func (c *cluster) up() error {
	for _, b := range []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler"} {
		if _, err := os.Stat(c.binary(b)); err != nil {
			return fmt.Errorf("%s is missing in %s: run scripts/setup", b, c.opts.binDir)
		}
	}
	if err := c.prepare(); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.opts.startTimeout)
	defer cancel()
	insecure, err := c.httpClient(false)
	if err != nil {
		return err
	}
	admin, err := c.httpClient(true)
	if err != nil {
		return err
	}
	etcd, err := c.startEtcd()
	if err != nil {
		return err
	}
	if err := c.waitHealthy(ctx, etcd, fmt.Sprintf("http://127.0.0.1:%d/health", c.ports["etcd-client"]), insecure); err != nil {
		return err
	}
	apiserver, err := c.startAPIServer()
	if err != nil {
		return err
	}
	if err := c.waitHealthy(ctx, apiserver, fmt.Sprintf("https://127.0.0.1:%d/readyz", c.ports["apiserver"]), admin); err != nil {
		return err
	}
	kcm, err := c.startControllerManager()
	if err != nil {
		return err
	}
	sched, err := c.startScheduler()
	if err != nil {
		return err
	}
	if err := c.waitHealthy(ctx, kcm, fmt.Sprintf("https://127.0.0.1:%d/healthz", c.ports["controller-manager"]), insecure); err != nil {
		return err
	}
	if err := c.waitHealthy(ctx, sched, fmt.Sprintf("https://127.0.0.1:%d/healthz", c.ports["scheduler"]), insecure); err != nil {
		return err
	}
	if err := c.waitDefaultServiceAccount(ctx); err != nil {
		return err
	}
	return c.writeEnvFile()
}

// writeEnvFile records where everything is, for scripts and for components
// started later (simulated nodes, the driver's processes).
func (c *cluster) writeEnvFile() error {
	var b strings.Builder
	fmt.Fprintf(&b, "KUBECONFIG=%s\n", c.kubeconfig)
	fmt.Fprintf(&b, "KUBERNETES_SERVICE_HOST=127.0.0.1\n")
	fmt.Fprintf(&b, "KUBERNETES_SERVICE_PORT=%d\n", c.ports["apiserver"])
	fmt.Fprintf(&b, "CLUSTER_CA_CERT=%s\n", c.pki.caCert)
	fmt.Fprintf(&b, "CLUSTER_CA_KEY=%s\n", c.pki.caKey)
	fmt.Fprintf(&b, "CLUSTER_SA_KEY=%s\n", c.pki.saKey)
	fmt.Fprintf(&b, "CLUSTER_LOG_DIR=%s\n", c.path("logs"))
	fmt.Fprintf(&b, "KUBERNETES_VERSION=%s\n", kubernetesVersion)
	for _, name := range []string{"etcd-client", "apiserver", "controller-manager", "scheduler"} {
		fmt.Fprintf(&b, "PORT_%s=%s\n", strings.ToUpper(strings.ReplaceAll(name, "-", "_")), strconv.Itoa(c.ports[name]))
	}
	tmp := c.path("cluster.env.tmp")
	if err := os.WriteFile(tmp, []byte(b.String()), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, c.path("cluster.env"))
}

// firstExit returns a channel that yields the first component to exit.
func (c *cluster) firstExit() <-chan *component {
	ch := make(chan *component, len(c.components))
	for _, comp := range c.components {
		go func(comp *component) {
			<-comp.exited
			ch <- comp
		}(comp)
	}
	return ch
}

// down stops the components in reverse start order.
func (c *cluster) down() {
	_ = os.Remove(c.path("cluster.env"))
	for i := len(c.components) - 1; i >= 0; i-- {
		c.components[i].stop(10 * time.Second)
	}
}

var errComponentExited = errors.New("a control-plane component exited")
