package cri

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// InitCommand is the hidden sub-command of the simnode binary that becomes a
// container: started in a new mount namespace, it builds the container's root
// from bind mounts, chroots into it and execs the container's program. Go
// cannot run code between fork and exec, hence the re-exec.
const InitCommand = "container-init"

// initSpec is what container-init needs; the runtime writes it next to the
// container's root folder.
type initSpec struct {
	Rootfs string `json:"rootfs"`
	// Layers holds the upper and work folders of the root's overlay mounts
	// (Rootfs + ".layers" when empty).
	Layers string   `json:"layers,omitempty"`
	Binds  []bind   `json:"binds"`
	Args   []string `json:"args"`
	Env    []string `json:"env"`
	Cwd    string   `json:"cwd,omitempty"`
	// ReadyFD, when set, is an inherited descriptor container-init makes
	// close-on-exec, so the runtime sees EOF on it once the program runs.
	ReadyFD int `json:"readyFD,omitempty"`
}

type bind struct {
	Source   string `json:"source"`
	Target   string `json:"target"` // path inside the container
	ReadOnly bool   `json:"readOnly,omitempty"`
	// Symlink: create Target as a symbolic link to Source instead of mounting
	// (merged-/usr hosts have /bin -> usr/bin).
	Symlink bool `json:"symlink,omitempty"`
	// Lower, when set, makes Target an overlayfs mount of these folders,
	// the first on top (an image's usr/ over this machine's /usr), with an
	// upper folder of the container's own: the container may write there
	// and mount points are made there, never in a lower folder.
	Lower []string `json:"lower,omitempty"`
}

// systemDirs come from this machine into every container, so that shell
// one-liners and our binaries find their interpreter and libraries: each
// the lowest layer of an overlay mount (with the image's folder of the
// same name above it), so the container sees them but never writes to them.
var systemDirs = []string{"/bin", "/sbin", "/lib", "/lib32", "/lib64", "/usr"}

// hostDirs are this machine's kernel file systems, bound into every
// container as they are.
var hostDirs = []string{"/proc", "/sys"}

// systemFiles are single files of /etc a program may need; /etc itself is
// not shared, because pods mount files into it (/etc/hosts, CDI specs).
var systemFiles = []string{"/etc/passwd", "/etc/group", "/etc/nsswitch.conf", "/etc/ld.so.cache", "/etc/localtime"}

// devFiles are the character devices every container gets from the host.
var devFiles = []string{"/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/tty"}

// underHostDir reports whether a container path lies below a folder bound
// from this machine (hostDirs), where making a mount point would write to
// this machine.
func underHostDir(target string) bool {
	for _, d := range hostDirs {
		if strings.HasPrefix(target, d+"/") {
			return true
		}
	}
	return false
}

// RunInit is container-init: it never returns on success (the process becomes
// the container's program).
func RunInit(specPath string) error {
	data, err := os.ReadFile(specPath)
	if err != nil {
		return fmt.Errorf("container-init: %w", err)
	}
	var spec initSpec
	if err := json.Unmarshal(data, &spec); err != nil {
		return fmt.Errorf("container-init: parse %s: %w", specPath, err)
	}
	if spec.ReadyFD > 0 {
		unix.CloseOnExec(spec.ReadyFD)
	}
	layers := spec.Layers
	if layers == "" {
		layers = spec.Rootfs + ".layers"
	}
	for i, b := range spec.Binds {
		if len(b.Lower) > 0 {
			if err := mountOverlay(spec.Rootfs, filepath.Join(layers, fmt.Sprint(i)), b); err != nil {
				return fmt.Errorf("container-init: overlay %v -> %s: %w", b.Lower, b.Target, err)
			}
			continue
		}
		if err := applyBind(spec.Rootfs, b); err != nil {
			return fmt.Errorf("container-init: %s -> %s: %w", b.Source, b.Target, err)
		}
	}
	path, err := lookPath(spec.Rootfs, spec.Args[0], spec.Env)
	if err != nil {
		return fmt.Errorf("container-init: %w", err)
	}
	if err := unix.Chroot(spec.Rootfs); err != nil {
		return fmt.Errorf("container-init: chroot %s: %w", spec.Rootfs, err)
	}
	cwd := spec.Cwd
	if cwd == "" {
		cwd = "/"
	}
	if err := os.Chdir(cwd); err != nil {
		return fmt.Errorf("container-init: chdir %s: %w", cwd, err)
	}
	return fmt.Errorf("container-init: exec %s: %w", path, syscall.Exec(path, spec.Args, spec.Env))
}

func applyBind(rootfs string, b bind) error {
	target := filepath.Join(rootfs, b.Target)
	st, err := os.Stat(b.Source)
	if err != nil && !b.Symlink {
		return err
	}
	// A mount point that exists already needs no write; a file of a shared
	// folder (the node's boot id over procfs' own) may then be covered.
	if tst, terr := os.Stat(target); !b.Symlink && terr == nil && tst.IsDir() == st.IsDir() {
		return mountBind(b, target)
	}
	if !b.Symlink && underHostDir(b.Target) {
		return errors.New("mount point lies below a folder bound from this machine")
	}
	if b.Symlink {
		if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
			return err
		}
		return os.Symlink(b.Source, target)
	}
	if st.IsDir() {
		if err := os.MkdirAll(target, 0o755); err != nil {
			return err
		}
	} else {
		if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
			return err
		}
		f, err := os.OpenFile(target, os.O_CREATE|os.O_WRONLY, 0o644)
		if err != nil {
			return err
		}
		f.Close()
	}
	return mountBind(b, target)
}

func mountBind(b bind, target string) error {
	if err := unix.Mount(b.Source, target, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("bind mount: %w", err)
	}
	if b.ReadOnly {
		if err := unix.Mount("", target, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY|unix.MS_REC, ""); err != nil {
			return fmt.Errorf("remount read-only: %w", err)
		}
	}
	return nil
}

// mountOverlay mounts an overlayfs at b.Target in the root: b.Lower the
// read-only layers (first on top), an upper and a work folder under dir.
func mountOverlay(rootfs, dir string, b bind) error {
	target := filepath.Join(rootfs, b.Target)
	upper, work := filepath.Join(dir, "upper"), filepath.Join(dir, "work")
	for _, d := range []string{target, upper, work} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	for _, p := range append(append([]string{}, b.Lower...), upper, work) {
		if strings.ContainsAny(p, ":,\\") {
			return fmt.Errorf("overlayfs cannot take the path %q (':', ',' or '\\' in it)", p)
		}
	}
	options := "lowerdir=" + strings.Join(b.Lower, ":") + ",upperdir=" + upper + ",workdir=" + work
	if err := unix.Mount("overlay", target, "overlay", 0, options); err != nil {
		return fmt.Errorf("mount overlay (%s): %w", options, err)
	}
	return nil
}

// lookPath resolves the program as the container would: relative to its root,
// through the PATH of its environment.
func lookPath(rootfs, name string, env []string) (string, error) {
	if strings.Contains(name, "/") {
		return name, nil
	}
	pathEnv := "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			pathEnv = v
		}
	}
	for _, dir := range filepath.SplitList(pathEnv) {
		candidate := filepath.Join(dir, name)
		if st, err := os.Stat(filepath.Join(rootfs, candidate)); err == nil && !st.IsDir() && st.Mode()&0o111 != 0 {
			return candidate, nil
		}
	}
	return "", fmt.Errorf("%q not found in PATH %s", name, pathEnv)
}
