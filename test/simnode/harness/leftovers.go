package harness

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// Container processes whose node process is gone. The runtime starts each
// container's program with PDEATHSIG, in its own process group, and stops a
// container by killing that group; but a node process that dies at once
// (SIGKILL: Reboot, or Stop's fallback) leaves the groups alone: the
// programs die of their death signal, their children do not. A real
// container's PID namespace would take them along. Seen: a compute-domain
// daemon's nvidia-imex, reparented to init, kept its pod address bound, and
// the next harness that took the same address block failed to start one
// there (EADDRINUSE). Every container runs chrooted below its node's folder
// (containers/<id>/rootfs), which names its processes exactly, even after
// the folder was removed.

// leftoverProcesses returns the pids under procDir (normally /proc) whose
// root directory lies below nodeDir.
func leftoverProcesses(procDir, nodeDir string) []int {
	entries, err := os.ReadDir(procDir)
	if err != nil {
		return nil
	}
	prefix := filepath.Clean(nodeDir) + string(filepath.Separator)
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid <= 0 {
			continue
		}
		root, err := os.Readlink(filepath.Join(procDir, e.Name(), "root"))
		if err != nil {
			continue // gone, or not ours to read
		}
		// A removed root reads "<path> (deleted)".
		root = strings.TrimSuffix(root, " (deleted)")
		if strings.HasPrefix(root+string(filepath.Separator), prefix) && root != filepath.Clean(nodeDir) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// killLeftovers sends SIGKILL to every process whose root lies below the
// node's folder; call it once the node process has exited.
func (n *Node) killLeftovers() {
	dir, err := filepath.Abs(n.Config.Dir)
	if err != nil {
		return
	}
	for _, pid := range leftoverProcesses("/proc", dir) {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
}
