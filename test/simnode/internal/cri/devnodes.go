package cri

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// HostProcDevices is this machine's list of registered device majors.
const HostProcDevices = "/proc/devices"

// hostCharMajors are the character majors this machine's kernel has
// registered (major -> driver name), read once.
var hostCharMajors = sync.OnceValues(func() (map[int64]string, error) {
	return CharMajors(HostProcDevices)
})

// CharMajors parses the "Character devices:" section of a /proc/devices
// file (this machine's, or a mock driver root's proc/devices): major -> name.
func CharMajors(path string) (map[int64]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := map[int64]string{}
	inChar := false
	scanner := bufio.NewScanner(f)
	for scanner.Scan() {
		line := strings.TrimSpace(scanner.Text())
		switch {
		case line == "Character devices:":
			inChar = true
		case line == "Block devices:":
			inChar = false
		case inChar && line != "":
			number, name, _ := strings.Cut(line, " ")
			if major, err := strconv.ParseInt(number, 10, 64); err == nil {
				out[major] = strings.TrimSpace(name)
			}
		}
	}
	return out, scanner.Err()
}

// MakeCharDevice makes path a character device major:minor with mode (an
// existing file there is replaced), as a runtime makes a fully specified CDI
// device node. It refuses a major this machine's kernel registers: such a
// node would open that real driver, where a simulated node's devices must
// answer ENXIO. Needs CAP_MKNOD.
func MakeCharDevice(path string, major, minor int64, mode os.FileMode) error {
	taken, err := hostCharMajors()
	if err != nil {
		return fmt.Errorf("mknod %s: cannot check this machine's majors: %w", path, err)
	}
	if name, ok := taken[major]; ok {
		return fmt.Errorf("mknod %s c %d:%d: major %d is registered on this machine (%s %q), so the node would reach a real driver",
			path, major, minor, major, HostProcDevices, name)
	}
	if major < 0 || minor < 0 {
		return fmt.Errorf("mknod %s: no device number (%d:%d)", path, major, minor)
	}
	_ = os.Remove(path)
	if err := unix.Mknod(path, unix.S_IFCHR|uint32(mode.Perm()), int(unix.Mkdev(uint32(major), uint32(minor)))); err != nil {
		return fmt.Errorf("mknod %s c %d:%d: %w", path, major, minor, err)
	}
	// mknod applies the umask; the mode is the spec's.
	return os.Chmod(path, mode.Perm())
}

// isDeviceNode reports whether p is a character or block device.
func isDeviceNode(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.Mode()&os.ModeDevice != 0
}
