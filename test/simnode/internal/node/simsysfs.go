package node

// The node's kernel PCI driver core: test/simsysfs serving the mock sysfs of
// the node's driver root (make-driver-root lays it out), so that a plugin
// binding a GPU to vfio-pci through sysfs sees the kernel's answers. It runs
// as long as the node process (a real node's kernel outlives its kubelet,
// but a simulated node's driver root is only in use while its process runs).

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"

	"nvdra.local/test/simnode/internal/proc"
	"nvdra.local/test/simnode/nodeconfig"
)

// simSysfsReadyTimeout bounds the wait for simsysfs's ready file; it takes
// milliseconds.
const simSysfsReadyTimeout = 30 * time.Second

// hasMockSysfs says whether the driver root has a sysfs tree for a driver
// core to serve.
func hasMockSysfs(driverRoot string) bool {
	info, err := os.Stat(filepath.Join(driverRoot, "sys", "bus", "pci", "drivers"))
	return err == nil && info.IsDir()
}

// linkNodeDevices makes the node's /dev/vfio, /dev/iommu and /sys those of
// its driver root (relative links, so they resolve in a container that
// mounts the node's "/" too): the simulated runtime resolves a CDI device
// node without a host path, /dev/vfio/<group>, in the node's folder, and
// the mock sysfs stands for the node's /sys. Existing entries are kept.
func linkNodeDevices(cfg *nodeconfig.Config) error {
	for _, rel := range []string{"dev/vfio", "dev/iommu", "sys"} {
		link := filepath.Join(cfg.Dir, rel)
		if _, err := os.Lstat(link); err == nil {
			continue
		}
		target, err := filepath.Rel(filepath.Dir(link), filepath.Join(cfg.DriverRoot(), rel))
		if err != nil {
			return err
		}
		if err := os.MkdirAll(filepath.Dir(link), 0o755); err != nil {
			return fmt.Errorf("node %s: %w", cfg.Name, err)
		}
		if err := os.Symlink(target, link); err != nil {
			return fmt.Errorf("node %s: %w", cfg.Name, err)
		}
	}
	return nil
}

// simSysfs is a running simsysfs.
type simSysfs struct {
	cmd    *exec.Cmd
	exited chan struct{}
}

// startSimSysfs starts `binary` on the driver root and returns once its
// ready file names it (every watch is in place). Its output goes to this
// process' stderr (the node's log).
func startSimSysfs(ctx context.Context, binary, driverRoot string) (*simSysfs, error) {
	ready := filepath.Join(driverRoot, "mock-nvml", "simsysfs.ready")
	// One left by an instance killed with the node would pass for the new one's.
	if err := os.Remove(ready); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	cmd := exec.Command(binary, driverRoot)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	// Dies with the node process (SIGKILL as death signal) even when that is
	// killed at once (reboot).
	if err := proc.NewSpawner().Start(cmd, false); err != nil {
		return nil, fmt.Errorf("start %s: %w", binary, err)
	}
	s := &simSysfs{cmd: cmd, exited: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		close(s.exited)
	}()
	if err := awaitReadyFile(ctx, ready, cmd.Process.Pid, s.exited); err != nil {
		s.stop()
		return nil, err
	}
	return s, nil
}

// awaitReadyFile waits, on an inotify watch of its folder, until `path`
// holds `pid`; it fails when `exited` closes first or after
// simSysfsReadyTimeout.
func awaitReadyFile(ctx context.Context, path string, pid int, exited <-chan struct{}) error {
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		return fmt.Errorf("inotify: %w", err)
	}
	defer unix.Close(fd)
	// The watch first, then the check: a write in between still wakes us.
	if _, err := unix.InotifyAddWatch(fd, filepath.Dir(path), unix.IN_MOVED_TO|unix.IN_CLOSE_WRITE); err != nil {
		return fmt.Errorf("watch %s: %w", filepath.Dir(path), err)
	}
	pidfd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return fmt.Errorf("pidfd of simsysfs: %w", err)
	}
	defer unix.Close(pidfd)
	deadline := time.Now().Add(simSysfsReadyTimeout)
	buf := make([]byte, 4096)
	for {
		if data, err := os.ReadFile(path); err == nil && strings.TrimSpace(string(data)) == strconv.Itoa(pid) {
			return nil
		}
		select {
		case <-exited:
			return fmt.Errorf("simsysfs ended before it was ready (its lines are in this log)")
		case <-ctx.Done():
			return ctx.Err()
		default:
		}
		left := time.Until(deadline)
		if left <= 0 {
			return fmt.Errorf("simsysfs wrote no %s within %s", path, simSysfsReadyTimeout)
		}
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}, {Fd: int32(pidfd), Events: unix.POLLIN}}
		if _, err := unix.Poll(fds, int(left.Milliseconds())+1); err != nil && !errors.Is(err, unix.EINTR) {
			return fmt.Errorf("poll: %w", err)
		}
		if fds[1].Revents&unix.POLLIN != 0 {
			<-exited // ended: reaped by the waiting goroutine
		}
		for {
			if n, _ := unix.Read(fd, buf); n <= 0 {
				break
			}
		}
	}
}

// stop ends simsysfs (SIGTERM; SIGKILL after 5 s) and waits for it.
func (s *simSysfs) stop() {
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.exited:
	case <-time.After(5 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.exited
	}
}

// startDriverCore links the node's device folders to its driver root and
// starts simsysfs (`binary`, empty: none) when the driver root has a mock
// sysfs. Returns a stop function (a no-op when nothing was started).
func startDriverCore(ctx context.Context, cfg *nodeconfig.Config, binary string) (func(), error) {
	if cfg.GPUProfile == "" || !hasMockSysfs(cfg.DriverRoot()) {
		return func() {}, nil
	}
	if err := linkNodeDevices(cfg); err != nil {
		return nil, err
	}
	if binary == "" {
		klog.FromContext(ctx).Info("No simulated PCI driver core: sysfs bind/unbind writes stay unanswered",
			"driverRoot", cfg.DriverRoot(), "env", nodeconfig.EnvSimSysfs)
		return func() {}, nil
	}
	s, err := startSimSysfs(ctx, binary, cfg.DriverRoot())
	if err != nil {
		return nil, fmt.Errorf("node %s: simulated PCI driver core: %w", cfg.Name, err)
	}
	klog.FromContext(ctx).Info("Simulated PCI driver core ready", "driverRoot", cfg.DriverRoot(), "pid", s.cmd.Process.Pid)
	return s.stop, nil
}
