// Package nodeconfig describes one simulated node: its name, address and
// folder tree. Kept apart from the node itself, so that the harness and tests
// can use it without linking the kubelet.
package nodeconfig

import (
	"crypto/rand"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Config describes one node; the harness writes it as node.json in the node's
// folder and starts `simnode node --config <that file>`.
type Config struct {
	Name string `json:"name"`
	// IP is the node's own loopback address (127.x.y.z): its InternalIP, the
	// kubelet's listen address, and the address of hostNetwork pods.
	IP string `json:"ip"`
	// PodIPPrefix is three octets ("127.130.0") from which pod IPs are drawn.
	PodIPPrefix string `json:"podIPPrefix"`
	// Dir is the node's folder; it plays the node's "/" for hostPath volumes.
	Dir        string `json:"dir"`
	Kubeconfig string `json:"kubeconfig"`
	// APIServer is host:port of the API server. Containers see it as the
	// kubernetes Service (KUBERNETES_SERVICE_HOST/PORT): there is no
	// kube-proxy to route the Service's cluster IP.
	APIServer   string            `json:"apiServer"`
	Labels      map[string]string `json:"labels,omitempty"`
	KubeletPort int               `json:"kubeletPort"`
	// FeatureGates are applied to this process' default feature gate, as the
	// kubelet's --feature-gates would.
	FeatureGates map[string]bool `json:"featureGates,omitempty"`
	// Images maps an image name (without tag) to a program on this machine:
	// containers of that image run the program, with the pod's volumes
	// bind-mounted in a private mount namespace.
	Images map[string]string `json:"images,omitempty"`
	// Verbosity is the kubelet's -v.
	Verbosity int `json:"verbosity,omitempty"`
	// GPUProfile names the mock NVML profile laid out as this node's driver
	// root (DriverRoot); empty: the node has no GPUs.
	GPUProfile string `json:"gpuProfile,omitempty"`
}

// DriverRootHostPath is where a node with a GPUProfile has its (mock) NVIDIA
// driver root, as the node sees it: the GPU Operator's driver container
// path, and what a plugin DaemonSet passes as nvidia-driver-root. hostPath
// volumes of it reach DriverRoot.
const DriverRootHostPath = "/run/nvidia/driver"

// EnvSimSysfs names test/simsysfs's binary (CMake target simsysfs), the
// simulated PCI driver core. A node process whose driver root has a mock
// sysfs (make-driver-root lays one out) starts it on that root and waits for
// it before the kubelet starts; nodes inherit the variable from the harness
// (ctest sets it; `simnode up --simsysfs` sets it too). Without it bind and
// unbind writes stay unanswered.
const EnvSimSysfs = "NVDRA_SIMSYSFS"

// GPUProfileLabel is the node label that names the node's mock NVML profile.
const GPUProfileLabel = "nvdra.test/gpu-profile"

// Derived paths, all under Dir, so that removing Dir removes the node.
func (c *Config) RootDir() string       { return filepath.Join(c.Dir, "var/lib/kubelet") }
func (c *Config) PodLogsDir() string    { return filepath.Join(c.Dir, "var/log/pods") }
func (c *Config) CRISocket() string     { return filepath.Join(c.Dir, "run/cri.sock") }
func (c *Config) ContainersDir() string { return filepath.Join(c.Dir, "containers") }
func (c *Config) StaticPodsDir() string { return filepath.Join(c.Dir, "etc/kubernetes/manifests") }

// ViewsDir holds the recorded container views (see package cri).
func (c *Config) ViewsDir() string { return filepath.Join(c.Dir, "views") }
func (c *Config) TmpDir() string   { return filepath.Join(c.Dir, "tmp") }

// DriverRoot is DriverRootHostPath in the node's folder.
func (c *Config) DriverRoot() string { return filepath.Join(c.Dir, DriverRootHostPath) }
func (c *Config) CDIDirs() []string {
	return []string{filepath.Join(c.Dir, "etc/cdi"), filepath.Join(c.Dir, "var/run/cdi")}
}

// BootIDHostPath is where Linux shows its boot id; a node's own boot id is
// this path in its folder (BootIDPath). Containers see that file at this
// path (the runtime bind-mounts it over procfs' file), and the kubelet
// reports it as status.nodeInfo.bootID, so a simulated reboot (a new id) is
// seen by plugins that checkpoint per boot and by the kubelet.
const BootIDHostPath = "/proc/sys/kernel/random/boot_id"

// BootIDPath is the node's boot id file (see BootIDHostPath).
func (c *Config) BootIDPath() string { return filepath.Join(c.Dir, BootIDHostPath) }

// BootID reads the node's boot id.
func (c *Config) BootID() (string, error) {
	data, err := os.ReadFile(c.BootIDPath())
	if err != nil {
		return "", fmt.Errorf("node %s: boot id: %w", c.Name, err)
	}
	return strings.TrimSpace(string(data)), nil
}

// EnsureBootID gives the node a boot id unless it has one.
func (c *Config) EnsureBootID() error {
	if _, err := os.Stat(c.BootIDPath()); err == nil {
		return nil
	}
	return c.NewBootID()
}

// NewBootID gives the node a fresh random boot id (what a reboot does). The
// file is replaced by rename, so a reader sees the old id or the new one.
func (c *Config) NewBootID() error {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return err
	}
	b[6] = b[6]&0x0f | 0x40 // version 4, as the kernel's
	b[8] = b[8]&0x3f | 0x80
	id := fmt.Sprintf("%x-%x-%x-%x-%x\n", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
	path := c.BootIDPath()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("node %s: boot id: %w", c.Name, err)
	}
	if err := os.WriteFile(path+".tmp", []byte(id), 0o644); err != nil {
		return fmt.Errorf("node %s: boot id: %w", c.Name, err)
	}
	return os.Rename(path+".tmp", path)
}

// VolatileDirs are the node's folders that a real node keeps in memory
// (tmpfs /run and /var/run, the runtime's state, /tmp), which a reboot
// empties. Not among them: the driver root under run/nvidia/driver, which
// stands for the driver container's files that come back after a reboot.
func (c *Config) VolatileDirs() []string {
	return []string{filepath.Join(c.Dir, "var/run"), filepath.Join(c.Dir, "run"), c.ContainersDir(), c.TmpDir()}
}

// ClearVolatile empties VolatileDirs (keeping the folders and the driver
// root). Only while the node is down.
func (c *Config) ClearVolatile() error {
	keep := c.DriverRoot()
	for _, dir := range c.VolatileDirs() {
		entries, err := os.ReadDir(dir)
		if os.IsNotExist(err) {
			continue
		} else if err != nil {
			return fmt.Errorf("node %s: %w", c.Name, err)
		}
		for _, e := range entries {
			p := filepath.Join(dir, e.Name())
			if p == keep || strings.HasPrefix(keep, p+"/") {
				if err := clearAllBut(p, keep); err != nil {
					return fmt.Errorf("node %s: %w", c.Name, err)
				}
				continue
			}
			if err := os.RemoveAll(p); err != nil {
				return fmt.Errorf("node %s: %w", c.Name, err)
			}
		}
	}
	return nil
}

// clearAllBut removes what is under dir except keep and its parents.
func clearAllBut(dir, keep string) error {
	if dir == keep {
		return nil
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		p := filepath.Join(dir, e.Name())
		if p == keep || strings.HasPrefix(keep, p+"/") {
			if err := clearAllBut(p, keep); err != nil {
				return err
			}
		} else if err := os.RemoveAll(p); err != nil {
			return err
		}
	}
	return nil
}

// LoadConfig reads a node.json.
func LoadConfig(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read node config: %w", err)
	}
	c := &Config{}
	if err := json.Unmarshal(data, c); err != nil {
		return nil, fmt.Errorf("parse node config %s: %w", path, err)
	}
	if c.Name == "" || c.IP == "" || c.Dir == "" || c.Kubeconfig == "" {
		return nil, fmt.Errorf("node config %s: name, ip, dir and kubeconfig are required", path)
	}
	return c, nil
}

// Save writes the config to path.
func (c *Config) Save(path string) error {
	data, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, data, 0o644)
}

// MakeDirs creates the node's folder tree: what the kubelet, the plugins
// (plugins_registry, plugins) and the runtime expect to exist.
func (c *Config) MakeDirs() error {
	dirs := []string{
		c.RootDir(), filepath.Join(c.RootDir(), "plugins_registry"), filepath.Join(c.RootDir(), "plugins"),
		c.PodLogsDir(), filepath.Dir(c.CRISocket()), c.ContainersDir(), c.StaticPodsDir(), c.TmpDir(),
		filepath.Join(c.Dir, "dev"),
	}
	dirs = append(dirs, c.CDIDirs()...)
	for _, d := range dirs {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return fmt.Errorf("node %s: %w", c.Name, err)
		}
	}
	return c.EnsureBootID()
}
