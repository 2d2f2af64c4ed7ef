package harness

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// inotifyPerNode is what one simulated node takes at least: its kubelet
// three instances (plugin watcher, config and certificate watches), each
// plugin container one, and a GPU node's simulated PCI driver core
// (simsysfs) one.
const inotifyPerNode = 5

// checkInotify fails early, with the fix, when starting `nodes` simulated
// nodes would run out of inotify instances (fs.inotify.max_user_instances,
// shared by every process of the user): otherwise plugins fail their start
// ("inotify_init1: Too many open files") and crash-loop, and kubelets never
// start their plugin watcher, which a test only sees as a time-out minutes
// later.
func checkInotify(nodes int) error {
	raw, err := os.ReadFile("/proc/sys/fs/inotify/max_user_instances")
	if err != nil {
		return nil // not Linux as we know it: nothing to check
	}
	limit, err := strconv.Atoi(strings.TrimSpace(string(raw)))
	if err != nil {
		return nil
	}
	used := 0
	fds, _ := filepath.Glob("/proc/[0-9]*/fd/*")
	for _, fd := range fds {
		if target, err := os.Readlink(fd); err == nil && target == "anon_inode:inotify" {
			used++
		}
	}
	need := inotifyPerNode * nodes
	if limit-used >= need {
		return nil
	}
	return fmt.Errorf("%d simulated nodes need at least %d inotify instances, but %d of the %d allowed "+
		"(fs.inotify.max_user_instances) are in use: raise the limit (sysctl -w fs.inotify.max_user_instances=%d), "+
		"stop other clusters, or start fewer nodes", nodes, need, used, limit, max(1024, 2*(used+need)))
}
