// Package harness starts and stops simulated nodes: one `simnode node` process
// per node, each with its own folder, loopback address and kubelet. It links
// client-go only, not the kubelet, so tests that use it build quickly.
package harness

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"nvdra.local/test/simnode/internal/proc"
	"nvdra.local/test/simnode/nodeconfig"
)

// Options say which nodes to start.
type Options struct {
	// Dir holds one folder per node. Unix socket paths under it must stay
	// below 108 bytes, so keep it short (a /tmp folder in tests).
	Dir        string
	Kubeconfig string
	Nodes      int
	NamePrefix string // default "sim-node-"
	// Simnode is the simnode binary (default: NVDRA_CLUSTER_BIN/simnode or
	// .cache/cluster-bin/simnode found from the working directory).
	Simnode string
	// Images maps image names (no tag) to programs run for their containers.
	Images       map[string]string
	Labels       map[string]string
	FeatureGates map[string]bool
	Verbosity    int
	// PidDir, when set, receives <node>.pid for each node process started
	// (and rewritten when a fault restarts it), for `simnode down`.
	PidDir string
	// GPUProfiles maps node names to mock NVML profiles ("h100-sxm", a name
	// in the profiles folder, or a path to a profile JSON). Each such node
	// gets, before it starts, a driver root at nodeconfig.DriverRootHostPath
	// of its folder made by make-driver-root, and the label
	// nodeconfig.GPUProfileLabel=<profile>. See gpu.go for where the mock
	// library and the script come from.
	GPUProfiles map[string]string
	// Nice is the node processes' nice value (0, the default, to 19), which
	// their containers inherit. The simulated nodes share this machine's
	// cores with the control plane, which a real cluster runs on machines
	// of its own; a positive value lets the control plane go first. The
	// rack-scale benchmark takes it from SIMNODE_CD_SCALE_NODE_NICE
	// (bench/README.md says what it changes, both ways).
	Nice int
}

// Node is one node: its process (replaced when a fault restarts it) and its
// API proxy.
type Node struct {
	Config  nodeconfig.Config
	cmd     *exec.Cmd
	exited  chan struct{}
	logFile *os.File
	proxy   *apiProxy
	deleted bool // DeleteNode ran: no process, no proxy
}

// Pid is the node process' id.
func (n *Node) Pid() int { return n.cmd.Process.Pid }

// Nice is the node process' nice value as the kernel has it (/proc/<pid>/stat).
func (n *Node) Nice() (int, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", n.Pid()))
	if err != nil {
		return 0, err
	}
	// After the name in parentheses: state(0) ... priority(15) nice(16).
	text := string(data)
	fields := strings.Fields(text[strings.LastIndexByte(text, ')')+1:])
	if len(fields) < 17 {
		return 0, fmt.Errorf("node %s: /proc/%d/stat has %d fields after the name", n.Config.Name, n.Pid(), len(fields))
	}
	return strconv.Atoi(fields[16])
}

// LogPath is the node process' log (kubelet and runtime).
func (n *Node) LogPath() string { return filepath.Join(n.Config.Dir, "node.log") }

// Cluster is a set of running nodes. Not thread-safe.
type Cluster struct {
	opts    Options
	client  kubernetes.Interface
	spawner *proc.Spawner
	Nodes   []*Node
	// blockLock holds this cluster's address block (see addressBlock).
	blockLock *os.File
	pods      podNetwork // where pod addresses come from (podnetwork.go)
}

// NodeIP is the loopback address of node i of address block 0: 127.10.0.1,
// 127.10.0.2, ... (block b: 127.(10+b).x.y; see addressBlock).
func NodeIP(i int) string { return nodeIP(0, i) }

func nodeIP(block, i int) string { return fmt.Sprintf("127.%d.%d.%d", 10+block, i/250, i%250+1) }

// addressBlocks is how many harnesses may run at once on one machine, each
// with its own block of node and pod addresses (the kubelets of two would
// otherwise both listen on 127.10.0.1:10250).
const addressBlocks = 10

// addressBlock takes the first free block: an flock on a file in the system's
// temporary folder, held while the returned file is open (Cluster.Stop
// closes it; the kernel releases it if the process dies).
func addressBlock() (int, *os.File, error) {
	for b := 0; b < addressBlocks; b++ {
		f, err := os.OpenFile(filepath.Join(os.TempDir(), fmt.Sprintf("simnode-address-block-%d.lock", b)), os.O_CREATE|os.O_RDWR, 0o666)
		if err != nil {
			return 0, nil, fmt.Errorf("address block lock: %w", err)
		}
		if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err == nil {
			return b, f, nil
		}
		f.Close()
	}
	return 0, nil, fmt.Errorf("all %d simnode address blocks are in use by other processes", addressBlocks)
}

// Start starts the nodes; it does not wait for them (see WaitReady).
func Start(opts Options) (*Cluster, error) {
	if opts.Nice < 0 || opts.Nice > 19 {
		return nil, fmt.Errorf("harness.Options.Nice = %d: a node process can only be made nicer, 0 to 19", opts.Nice)
	}
	if opts.NamePrefix == "" {
		opts.NamePrefix = "sim-node-"
	}
	if err := checkInotify(opts.Nodes); err != nil {
		return nil, err
	}
	if opts.Simnode == "" {
		bin, err := DefaultBinary("simnode")
		if err != nil {
			return nil, err
		}
		opts.Simnode = bin
	}
	restConfig, err := clientcmd.BuildConfigFromFlags("", opts.Kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("kubeconfig %s: %w", opts.Kubeconfig, err)
	}
	server, err := url.Parse(restConfig.Host)
	if err != nil {
		return nil, fmt.Errorf("API server address %q: %w", restConfig.Host, err)
	}
	client, err := kubernetes.NewForConfig(restConfig)
	if err != nil {
		return nil, err
	}
	var mock mockNVML
	if len(opts.GPUProfiles) > 0 {
		if mock, err = findMockNVML(); err != nil {
			return nil, err
		}
	}
	pods, err := podNetworkFromEnv()
	if err != nil {
		return nil, err
	}
	c := &Cluster{opts: opts, client: client, spawner: proc.NewSpawner(), pods: pods}
	apiServer := net.JoinHostPort(server.Hostname(), server.Port())
	block, blockLock, err := addressBlock()
	if err != nil {
		return nil, err
	}
	c.blockLock = blockLock
	for i := 0; i < opts.Nodes; i++ {
		name := fmt.Sprintf("%s%d", opts.NamePrefix, i)
		podIPPrefix, err := pods.prefix(block, i)
		if err != nil {
			c.Stop()
			return nil, err
		}
		labels := opts.Labels
		profile := opts.GPUProfiles[name]
		if profile != "" {
			labels = map[string]string{nodeconfig.GPUProfileLabel: profileLabel(profile)}
			for k, v := range opts.Labels {
				labels[k] = v
			}
		}
		// Every node reaches the API server through a proxy of its own,
		// which Partition cuts: the kubelet by its kubeconfig, containers
		// by the kubernetes Service variables.
		proxy, err := newAPIProxy(apiServer)
		if err != nil {
			c.Stop()
			return nil, err
		}
		dir := filepath.Join(opts.Dir, name)
		kubeconfig, err := writeNodeKubeconfig(opts.Kubeconfig, dir, proxy.Addr())
		if err != nil {
			proxy.Close()
			c.Stop()
			return nil, err
		}
		cfg := nodeconfig.Config{
			Name:         name,
			IP:           nodeIP(block, i),
			PodIPPrefix:  podIPPrefix,
			Dir:          dir,
			Kubeconfig:   kubeconfig,
			APIServer:    proxy.Addr(),
			Labels:       labels,
			KubeletPort:  10250,
			FeatureGates: opts.FeatureGates,
			Images:       opts.Images,
			Verbosity:    opts.Verbosity,
			GPUProfile:   profile,
		}
		if profile != "" {
			if err := layOutDriverRoot(mock, &cfg); err != nil {
				proxy.Close()
				c.Stop()
				return nil, err
			}
		}
		if err := cfg.MakeDirs(); err != nil { // and the boot id
			proxy.Close()
			c.Stop()
			return nil, err
		}
		n := &Node{Config: cfg, proxy: proxy}
		c.Nodes = append(c.Nodes, n)
		if err := c.startNode(n); err != nil {
			c.Stop()
			return nil, err
		}
	}
	return c, nil
}

// profileLabel is a profile's label value: its file name without .json.
func profileLabel(profile string) string {
	return strings.TrimSuffix(filepath.Base(profile), ".json")
}

// startNode starts n's process from its config (again, after a fault).
func (c *Cluster) startNode(n *Node) error {
	cfg := n.Config
	if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
		return fmt.Errorf("node %s: %w", cfg.Name, err)
	}
	configPath := filepath.Join(cfg.Dir, "node.json")
	if err := cfg.Save(configPath); err != nil {
		return fmt.Errorf("node %s: %w", cfg.Name, err)
	}
	logFile, err := os.OpenFile(n.LogPath(), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	cmd := exec.Command(c.opts.Simnode, "node", "--config", configPath)
	if c.opts.Nice != 0 {
		// nice(1) sets it before exec, so every thread the Go runtime starts
		// has it (setpriority on a running process reaches one thread only).
		cmd = exec.Command("nice", "-n", strconv.Itoa(c.opts.Nice), c.opts.Simnode, "node", "--config", configPath)
	}
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := c.spawner.Start(cmd, false); err != nil {
		logFile.Close()
		return fmt.Errorf("node %s: start %s: %w", cfg.Name, c.opts.Simnode, err)
	}
	exited := make(chan struct{})
	n.cmd, n.exited, n.logFile = cmd, exited, logFile
	go func() {
		_ = cmd.Wait()
		logFile.Close()
		close(exited)
	}()
	if c.opts.PidDir != "" {
		if err := writePid(c.opts.PidDir, cfg.Name, cmd.Process.Pid); err != nil {
			return err
		}
	}
	return nil
}

// stopNode ends n's process and waits for it: with SIGTERM (the node stops
// its containers) and SIGKILL after 10 s, or with SIGKILL at once.
func (n *Node) stop(kill bool) {
	if n.cmd == nil {
		return
	}
	if kill {
		_ = syscall.Kill(-n.cmd.Process.Pid, syscall.SIGKILL)
	} else {
		_ = n.cmd.Process.Signal(syscall.SIGTERM)
	}
	select {
	case <-n.exited:
	case <-time.After(10 * time.Second):
		_ = syscall.Kill(-n.cmd.Process.Pid, syscall.SIGKILL)
		<-n.exited
	}
	n.killLeftovers() // see leftovers.go
}

// Client is an admin client of the cluster the nodes joined.
func (c *Cluster) Client() kubernetes.Interface { return c.client }

// Stop ends every node process (SIGTERM, then SIGKILL after 10 s); their
// containers die with them. Node objects stay in the API (see DeleteNodes).
func (c *Cluster) Stop() {
	for _, n := range c.Nodes {
		if n.cmd != nil {
			_ = n.cmd.Process.Signal(syscall.SIGTERM)
		}
	}
	for _, n := range c.Nodes {
		n.stop(false)
		if n.proxy != nil {
			n.proxy.Close()
		}
	}
	if c.blockLock != nil {
		c.blockLock.Close()
		c.blockLock = nil
	}
}

// DeleteNodes removes the nodes' Node objects from the API server.
func (c *Cluster) DeleteNodes(ctx context.Context) error {
	for _, n := range c.Nodes {
		err := c.client.CoreV1().Nodes().Delete(ctx, n.Config.Name, metav1.DeleteOptions{})
		if err != nil && !isNotFound(err) {
			return fmt.Errorf("delete node %s: %w", n.Config.Name, err)
		}
	}
	return nil
}

// Exited reports a node process that ended, or nil.
func (c *Cluster) Exited() *Node {
	for _, n := range c.Nodes {
		if n.deleted {
			continue
		}
		select {
		case <-n.exited:
			return n
		default:
		}
	}
	return nil
}

func nodeReady(n *corev1.Node) bool {
	for _, cond := range n.Status.Conditions {
		if cond.Type == corev1.NodeReady {
			return cond.Status == corev1.ConditionTrue
		}
	}
	return false
}
