// Package node runs one simulated node in this process: a real kubelet
// (built the way kubemark builds a hollow node, plus the real DRA manager) and
// the simulated CRI runtime it talks to. One process per node, because the
// kubelet registers its metrics in a process-global registry and a second
// kubelet in the same process panics.
package node

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	cadvisorapi "github.com/google/cadvisor/lib/model"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	clientset "k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	remote "k8s.io/cri-client/pkg"
	"k8s.io/klog/v2"
	kubeletapp "k8s.io/kubernetes/cmd/kubelet/app"
	"k8s.io/kubernetes/cmd/kubelet/app/options"
	kubeletconfig "k8s.io/kubernetes/pkg/kubelet/apis/config"
	cadvisortest "k8s.io/kubernetes/pkg/kubelet/cadvisor/testing"
	"k8s.io/kubernetes/pkg/kubemark"

	"nvdra.local/test/simnode/internal/cri"
	"nvdra.local/test/simnode/nodeconfig"
)

// Options are the node process' settings beyond its node.json.
type Options struct {
	// SimSysfs is test/simsysfs's binary (nodeconfig.EnvSimSysfs), started
	// on the driver root when it has a mock sysfs; empty: not started.
	SimSysfs string
}

// Run starts the node's runtime and kubelet and returns when ctx ends or the
// runtime fails. The kubelet has no clean stop in this embedding (kubemark's
// has none either); the process ends with it. A GPU node's simulated PCI
// driver core (simsysfs.go) is ready before the kubelet starts, so the node
// turns Ready with it, and is stopped when Run returns.
func Run(ctx context.Context, cfg *nodeconfig.Config, opts Options) error {
	logger := klog.FromContext(ctx)
	if err := cfg.MakeDirs(); err != nil {
		return err
	}
	// kubemark.GetHollowKubeletConfig makes its scratch folders with
	// os.MkdirTemp; keep them inside the node's folder.
	if err := os.Setenv("TMPDIR", cfg.TmpDir()); err != nil {
		return err
	}
	if err := utilfeature.DefaultMutableFeatureGate.SetFromMap(cfg.FeatureGates); err != nil {
		return fmt.Errorf("node %s: feature gates: %w", cfg.Name, err)
	}

	stopDriverCore, err := startDriverCore(ctx, cfg, opts.SimSysfs)
	if err != nil {
		return err
	}
	defer stopDriverCore()

	runtime, err := cri.NewRuntime(cri.Options{
		NodeName:      cfg.Name,
		NodeDir:       cfg.Dir,
		NodeIP:        cfg.IP,
		PodIPPrefix:   cfg.PodIPPrefix,
		CDIDirs:       cfg.CDIDirs(),
		ContainersDir: cfg.ContainersDir(),
		Images:        cfg.Images,
		APIServer:     cfg.APIServer,
		BootIDFile:    cfg.BootIDPath(),
	})
	if err != nil {
		return err
	}
	endpoint := "unix://" + cfg.CRISocket()
	if err := runtime.Serve(cfg.CRISocket()); err != nil {
		return err
	}
	defer runtime.Stop()

	if err := startKubelet(ctx, cfg, endpoint); err != nil {
		return err
	}
	logger.Info("Node started", "node", cfg.Name, "ip", cfg.IP, "port", cfg.KubeletPort)
	<-ctx.Done()
	return nil
}

func startKubelet(ctx context.Context, cfg *nodeconfig.Config, endpoint string) error {
	restConfig, err := clientcmd.BuildConfigFromFlags("", cfg.Kubeconfig)
	if err != nil {
		return fmt.Errorf("node %s: kubeconfig: %w", cfg.Name, err)
	}
	restConfig.UserAgent = "simnode-kubelet/" + cfg.Name
	client, err := clientset.NewForConfig(restConfig)
	if err != nil {
		return err
	}

	flags, kc := kubemark.GetHollowKubeletConfig(&kubemark.HollowKubeletOptions{
		NodeName:            cfg.Name,
		KubeletPort:         cfg.KubeletPort,
		KubeletReadOnlyPort: 0,
		MaxPods:             110,
		NodeLabels:          cfg.Labels,
	})
	adjustKubeletConfig(cfg, flags, kc, endpoint)

	// The heartbeat client as kubemark makes it: no rate limit, a timeout no
	// longer than the lease.
	hb := *restConfig
	hb.Timeout = kc.NodeStatusUpdateFrequency.Duration
	if lease := time.Duration(kc.NodeLeaseDurationSeconds) * time.Second; hb.Timeout > lease {
		hb.Timeout = lease
	}
	hb.QPS = -1
	heartbeatClient, err := clientset.NewForConfig(&hb)
	if err != nil {
		return err
	}

	runtimeService, err := remote.NewRemoteRuntimeServiceBuilder().WithEndpoint(endpoint).
		WithConnectionTimeout(15 * time.Second).Build(ctx)
	if err != nil {
		return fmt.Errorf("node %s: connect to runtime: %w", cfg.Name, err)
	}
	imageService, err := remote.NewRemoteImageServiceBuilder().WithEndpoint(endpoint).
		WithConnectionTimeout(15 * time.Second).Build(ctx)
	if err != nil {
		return fmt.Errorf("node %s: connect to image service: %w", cfg.Name, err)
	}
	containerManager, err := newDRAContainerManager(klog.FromContext(ctx), client, cfg.RootDir(), cfg.Dir)
	if err != nil {
		return err
	}

	hollow := kubemark.NewHollowKubelet(flags, kc, client, heartbeatClient,
		&machine{Fake: &cadvisortest.Fake{NodeName: cfg.Name}, bootIDPath: cfg.BootIDPath()}, imageService, runtimeService, containerManager)
	// kubemark fakes probes; nil makes the kubelet build its real prober, so
	// exec probes reach the runtime's ExecSync.
	hollow.KubeletDeps.ProbeManager = nil
	// kubemark drops the kubelet's Events (a FakeRecorder); nil and an event
	// client make RunKubelet build the real recorder, so Events such as a
	// failed DRA prepare reach the API server and `kubectl describe pod`.
	// Their own client and limits, as the kubelet's (eventRecordQPS,
	// eventBurst), so Events never take the pod status updates' budget.
	ev := *restConfig
	ev.QPS = float32(kc.EventRecordQPS)
	ev.Burst = int(kc.EventBurst)
	eventClient, err := clientset.NewForConfig(&ev)
	if err != nil {
		return err
	}
	hollow.KubeletDeps.Recorder = nil
	hollow.KubeletDeps.EventClient = eventClient.CoreV1()
	// kubemark serves plain HTTP; the API server speaks HTTPS to kubelets
	// (logs, exec), so serve a self-signed certificate as a kubelet does.
	tlsOptions, err := kubeletapp.InitializeTLS(ctx, hollow.KubeletFlags, hollow.KubeletConfiguration)
	if err != nil {
		return fmt.Errorf("node %s: kubelet TLS: %w", cfg.Name, err)
	}
	hollow.KubeletDeps.TLSOptions = tlsOptions
	err = kubeletapp.RunKubelet(ctx, &options.KubeletServer{
		KubeletFlags:         *hollow.KubeletFlags,
		KubeletConfiguration: *hollow.KubeletConfiguration,
	}, hollow.KubeletDeps)
	if err != nil {
		return fmt.Errorf("node %s: run kubelet: %w", cfg.Name, err)
	}
	go keepInternalIP(ctx, client, cfg.Name, cfg.IP)
	return nil
}

// adjustKubeletConfig moves kubemark's settings to this node's folder and
// address. Every listener binds the node's own IP, so nodes never share a
// port, and the kubelet's server trusts every caller (anonymous, AlwaysAllow):
// only processes on this machine can reach a loopback address.
func adjustKubeletConfig(cfg *nodeconfig.Config, f *options.KubeletFlags, c *kubeletconfig.KubeletConfiguration, endpoint string) {
	f.RootDirectory = cfg.RootDir()
	f.CertDirectory = cfg.RootDir() + "/pki"
	f.NodeIP = cfg.IP
	c.Address = cfg.IP
	c.HealthzBindAddress = cfg.IP
	c.PodLogsDir = cfg.PodLogsDir()
	c.StaticPodPath = cfg.StaticPodsDir()
	c.ContainerRuntimeEndpoint = endpoint
	c.ImageServiceEndpoint = endpoint
	c.ProviderID = "simnode://" + cfg.Name
	c.Authentication.Anonymous.Enabled = true
	c.Authentication.Webhook.Enabled = false
	c.Authorization.Mode = kubeletconfig.KubeletAuthorizationModeAlwaysAllow
	c.RegisterWithTaints = nil
}

// machine is cadvisor's fake with a GPU-node-sized machine: kubemark's fake
// has one core and 3.75 GiB, too small for the pods a GPU node runs. Its
// boot id is the node's (nodeconfig.BootIDPath), which the kubelet reports in
// status.nodeInfo.bootID (and, when it changed, records a Rebooted event).
type machine struct {
	*cadvisortest.Fake
	bootIDPath string
}

func (m *machine) MachineInfo(logger klog.Logger) (*cadvisorapi.MachineInfo, error) {
	info, err := m.Fake.MachineInfo(logger)
	if err != nil {
		return nil, err
	}
	info.NumCores = 64
	info.MemoryCapacity = 512 << 30
	if data, err := os.ReadFile(m.bootIDPath); err == nil {
		info.BootID = strings.TrimSpace(string(data))
	}
	return info, nil
}
