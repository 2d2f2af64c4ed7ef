package harness

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"nvdra.local/test/simnode/internal/cri"
)

// Faults. Each acts on one node by name and returns once the fault is in
// place (a process stopped and, where it comes back, started again); what
// the kubelet and the control plane make of it is for the caller to await.
// Like the rest of Cluster, not thread-safe.

// Fault kinds, as `simnode fault <kind> <node>` names them.
const (
	FaultRestartKubelet = "restart-kubelet"
	FaultKillContainer  = "kill-container" // needs namespace/pod/container
	FaultReboot         = "reboot"
	FaultPartition      = "partition"
	FaultHeal           = "heal"
	FaultDelete         = "delete"
)

// FaultKinds lists every kind Fault takes, node faults first.
var FaultKinds = []string{FaultRestartKubelet, FaultKillContainer, FaultReboot, FaultPartition,
	FaultHeal, FaultDelete, FaultXid, FaultGPULost, FaultGPURecovered, FaultFabricUnhealthy,
	FaultFabricHealthy}

// ErrNoNode: no (live) node of that name.
var ErrNoNode = errors.New("no such node")

// Node returns the live node called name.
func (c *Cluster) Node(name string) (*Node, error) {
	for _, n := range c.Nodes {
		if n.Config.Name == name && !n.deleted {
			return n, nil
		}
	}
	return nil, fmt.Errorf("%w: %q", ErrNoNode, name)
}

// RestartKubelet stops the node's process with SIGTERM and starts it again
// with the same folder and config. The kubelet comes back with its root dir
// (DRA checkpoint, plugin registry) intact. The runtime lives in the same
// process, so unlike a kubelet restart on a real node the containers end too
// and the new kubelet starts them again (as after a restart of kubelet and
// containerd together): plugins then register anew.
func (c *Cluster) RestartKubelet(name string) error {
	n, err := c.Node(name)
	if err != nil {
		return err
	}
	n.stop(false)
	return c.startNode(n)
}

// KillContainer sends SIGKILL to the process (group) of a running container,
// found by the view the runtime recorded for its latest attempt. The runtime
// reports the exit (code 137) and the kubelet restarts it per restartPolicy.
// Returns the killed pid.
func (c *Cluster) KillContainer(name, namespace, pod, container string) (int, error) {
	n, err := c.Node(name)
	if err != nil {
		return 0, err
	}
	view, err := cri.ReadView(cri.ViewPath(n.Config.ViewsDir(), namespace, pod, container))
	if err != nil {
		return 0, fmt.Errorf("container %s/%s/%s on %s: %w", namespace, pod, container, name, err)
	}
	data, err := os.ReadFile(filepath.Join(n.Config.ContainersDir(), view.ContainerID, cri.PidFile))
	if err != nil {
		return 0, fmt.Errorf("container %s/%s/%s on %s runs no process: %w", namespace, pod, container, name, err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil || pid <= 0 {
		return 0, fmt.Errorf("container %s: bad pid file %q", view.ContainerID, data)
	}
	// The process leads its own group; children it started die with it.
	if err := syscall.Kill(-pid, syscall.SIGKILL); err != nil {
		return 0, fmt.Errorf("kill container %s (pid %d): %w", view.ContainerID, pid, err)
	}
	return pid, nil
}

// Reboot stops the node at once (SIGKILL: its containers die with it, nothing
// is cleaned up), empties its volatile folders (nodeconfig.VolatileDirs:
// var/run with the CDI specs, run, the runtime's state, tmp), gives it a new
// boot id and starts it again. /var/lib/kubelet, the plugins' folders and the
// driver root stay, as on disk.
func (c *Cluster) Reboot(name string) error {
	n, err := c.Node(name)
	if err != nil {
		return err
	}
	n.stop(true)
	if err := n.Config.ClearVolatile(); err != nil {
		return err
	}
	if err := n.Config.NewBootID(); err != nil {
		return err
	}
	return c.startNode(n)
}

// Partition cuts the node's API proxy: open connections of its kubelet and
// containers close, new ones are refused, until Heal.
func (c *Cluster) Partition(name string) error {
	n, err := c.Node(name)
	if err != nil {
		return err
	}
	n.proxy.Cut()
	return nil
}

// Heal undoes Partition.
func (c *Cluster) Heal(name string) error {
	n, err := c.Node(name)
	if err != nil {
		return err
	}
	n.proxy.Heal()
	return nil
}

// RefusedConnections counts the node's API connections refused while it was
// partitioned, and returns a channel closed at the next refusal.
func (c *Cluster) RefusedConnections(name string) (int, <-chan struct{}, error) {
	n, err := c.Node(name)
	if err != nil {
		return 0, nil, err
	}
	count, next := n.proxy.Refused()
	return count, next, nil
}

// DeleteNode stops the node's process (SIGTERM, so its containers end), then
// deletes its Node object, as when a machine leaves the cluster. Objects that
// name the Node as owner (its ResourceSlices) are then removed by the
// garbage collector. The node's folder stays; the node is gone from Nodes'
// live set (Node, WaitReady).
func (c *Cluster) DeleteNode(ctx context.Context, name string) error {
	n, err := c.Node(name)
	if err != nil {
		return err
	}
	n.stop(false)
	n.proxy.Close()
	n.deleted = true
	if c.opts.PidDir != "" {
		_ = os.Remove(pidPath(c.opts.PidDir, name))
	}
	err = c.client.CoreV1().Nodes().Delete(ctx, name, metav1.DeleteOptions{})
	if err != nil && !isNotFound(err) {
		return fmt.Errorf("delete node %s: %w", name, err)
	}
	return nil
}

// Fault applies the fault kind to node; args are kind-specific
// (kill-container: namespace/pod/container; the GPU kinds of nvml.go: GPU,
// and XID for xid). The CLI's entry point.
func (c *Cluster) Fault(ctx context.Context, kind, node string, args []string) (string, error) {
	if isGPUFault(kind) {
		return c.gpuFault(kind, node, args)
	}
	switch kind {
	case FaultRestartKubelet:
		return "restarted", c.RestartKubelet(node)
	case FaultKillContainer:
		if len(args) != 1 || strings.Count(args[0], "/") != 2 {
			return "", errors.New("kill-container wants namespace/pod/container")
		}
		parts := strings.Split(args[0], "/")
		pid, err := c.KillContainer(node, parts[0], parts[1], parts[2])
		return fmt.Sprintf("killed pid %d", pid), err
	case FaultReboot:
		return "rebooted", c.Reboot(node)
	case FaultPartition:
		return "partitioned", c.Partition(node)
	case FaultHeal:
		return "healed", c.Heal(node)
	case FaultDelete:
		return "deleted", c.DeleteNode(ctx, node)
	}
	return "", fmt.Errorf("unknown fault %q (want %s)", kind, strings.Join(FaultKinds, ", "))
}

func pidPath(dir, node string) string { return filepath.Join(dir, node+".pid") }

func writePid(dir, node string, pid int) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	return os.WriteFile(pidPath(dir, node), []byte(strconv.Itoa(pid)+"\n"), 0o644)
}

// ExecSync runs cmd in a running container of the node through the node's
// CRI socket (the runtime's ExecSync, as the kubelet's exec probes do), and
// returns its stdout and stderr together; a non-zero exit is an error.
func ExecSync(ctx context.Context, n *Node, namespace, pod, container string, cmd ...string) (string, error) {
	view, err := cri.ReadView(cri.ViewPath(n.Config.ViewsDir(), namespace, pod, container))
	if err != nil {
		return "", err
	}
	conn, err := grpc.NewClient("unix://"+n.Config.CRISocket(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return "", err
	}
	defer conn.Close()
	resp, err := runtimeapi.NewRuntimeServiceClient(conn).ExecSync(ctx, &runtimeapi.ExecSyncRequest{
		ContainerId: view.ContainerID, Cmd: cmd, Timeout: 30,
	})
	if err != nil {
		return "", err
	}
	out := string(resp.Stdout) + string(resp.Stderr)
	if resp.ExitCode != 0 {
		return out, fmt.Errorf("exit code %d", resp.ExitCode)
	}
	return out, nil
}
