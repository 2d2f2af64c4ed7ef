// Command simnode-test-driver is a small DRA driver on the reference kubelet
// plugin helper (k8s.io/dynamic-resource-allocation/kubeletplugin), so that
// the simulated nodes are proven against DRA code we did not write. It
// publishes --devices devices per node, answers NodePrepareResources with one
// CDI device per allocated device (an env var and a device node) and appends
// every prepare and unprepare call to a journal that tests read.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/klog/v2"
)

type config struct {
	nodeName     string
	driverName   string
	devices      int
	cdiDir       string
	pluginDir    string
	registrarDir string
	journal      string
	kubeconfig   string
}

func main() {
	var c config
	flag.StringVar(&c.nodeName, "node-name", os.Getenv("NODE_NAME"), "node this plugin serves (env NODE_NAME)")
	flag.StringVar(&c.driverName, "driver-name", "gpu.simnode.test", "DRA driver name")
	flag.IntVar(&c.devices, "devices", 2, "devices published for the node")
	flag.StringVar(&c.cdiDir, "cdi-dir", "/var/run/cdi", "where CDI specs are written")
	flag.StringVar(&c.pluginDir, "plugin-dir", "", "plugin data folder (default /var/lib/kubelet/plugins/<driver>)")
	flag.StringVar(&c.registrarDir, "registrar-dir", kubeletplugin.KubeletRegistryDir, "kubelet plugin registration folder")
	flag.StringVar(&c.journal, "journal", "", "file the calls are appended to (default <plugin-dir>/calls.jsonl)")
	flag.StringVar(&c.kubeconfig, "kubeconfig", "", "kubeconfig (default: in-cluster)")
	klog.InitFlags(nil) // -v and friends
	flag.Parse()
	if c.pluginDir == "" {
		c.pluginDir = filepath.Join(kubeletplugin.KubeletPluginsDir, c.driverName)
	}
	if c.journal == "" {
		c.journal = filepath.Join(c.pluginDir, "calls.jsonl")
	}
	if err := run(c); err != nil {
		fmt.Fprintf(os.Stderr, "simnode-test-driver: %v\n", err)
		os.Exit(1)
	}
}

func run(c config) error {
	if c.nodeName == "" {
		return fmt.Errorf("--node-name (or NODE_NAME) is required")
	}
	var restConfig *rest.Config
	var err error
	if c.kubeconfig != "" {
		restConfig, err = clientcmd.BuildConfigFromFlags("", c.kubeconfig)
	} else {
		restConfig, err = rest.InClusterConfig()
	}
	if err != nil {
		return fmt.Errorf("client config: %w", err)
	}
	client, err := kubernetes.NewForConfig(restConfig)
	if err != nil {
		return err
	}
	// The helper listens in the plugin folder; it must exist first.
	for _, d := range []string{c.pluginDir, c.cdiDir, c.registrarDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	logger := klog.Background().WithValues("node", c.nodeName)
	ctx = klog.NewContext(ctx, logger)

	d := &driver{config: c}
	helper, err := kubeletplugin.Start(ctx, d,
		kubeletplugin.DriverName(c.driverName),
		kubeletplugin.NodeName(c.nodeName),
		kubeletplugin.KubeClient(client),
		kubeletplugin.PluginDataDirectoryPath(c.pluginDir),
		kubeletplugin.RegistrarDirectoryPath(c.registrarDir),
		kubeletplugin.HealthService(false),
	)
	if err != nil {
		return fmt.Errorf("start plugin: %w", err)
	}
	defer helper.Stop()
	if err := helper.PublishResources(ctx, d.resources()); err != nil {
		return fmt.Errorf("publish resources: %w", err)
	}
	logger.Info("Test driver running", "driver", c.driverName, "devices", c.devices)
	<-ctx.Done()
	return nil
}
