package cri

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	oci "github.com/opencontainers/runtime-spec/specs-go"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"nvdra.local/test/simnode/internal/proc"
	"nvdra.local/test/simnode/nodeconfig"
)

// imageBinDir is where the program of an image mapped to one program (not
// a folder) appears inside its container.
const imageBinDir = "/simnode/bin"

// MockNVMLStateDir is where every container sees its node's mock NVML state
// folder (<driver root>/mock-nvml), read-only.
const MockNVMLStateDir = "/run/mock-nvml"

const defaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// bootIDPath is where Linux shows its boot id (nodeconfig.BootIDHostPath;
// not imported: this package does not depend on the node's layout).
const bootIDPath = "/proc/sys/kernel/random/boot_id"

// PidFile is the file in a container's folder (Options.ContainersDir/<id>)
// that holds the pid of its process while it runs; the process leads its
// own process group. For fault injection (harness.KillContainer).
const PidFile = "pid"

// fileMountTargets are container paths the kubelet mounts as files; when the
// kubelet's fake OS interface did not create the source, it is made a file.
var fileMountTargets = map[string]bool{
	"/dev/termination-log": true, "/etc/hosts": true, "/etc/hostname": true, "/etc/resolv.conf": true,
}

// container is one container of the simulated runtime. Its fields are set at
// creation and not changed, except those guarded by mu.
type container struct {
	id        string
	sandboxID string
	dir       string // the runtime's folder for it: init specs and the root
	logPath   string
	view      *View
	spec      initSpec
	runs      bool // false: nothing to run here, it "runs" until deleted

	mu     sync.Mutex
	cmd    *exec.Cmd     // guarded by mu; nil until started
	exited chan struct{} // closed when the process has been reaped
	ready  chan struct{} // closed when container-init has exec'd the program (or died)
}

// newContainer resolves the container's CDI devices, records its view and
// plans how it runs.
func (r *Runtime) newContainer(id, sandboxID string, sandbox *runtimeapi.PodSandboxConfig, config *runtimeapi.ContainerConfig) (*container, error) {
	view, err := buildView(id, sandbox, config, r.opts.CDIDirs, r.opts.NodeDir)
	if err != nil {
		return nil, err
	}
	for i := range view.Mounts {
		src, err := r.nodePath(view.Mounts[i].Source, view.Mounts[i].Destination)
		if err != nil {
			return nil, err
		}
		view.Mounts[i].Source = src
	}
	if err := view.save(r.viewsDir); err != nil {
		return nil, fmt.Errorf("record view of %s: %w", view.Container, err)
	}
	c := &container{
		id:        id,
		sandboxID: sandboxID,
		dir:       filepath.Join(r.opts.ContainersDir, id),
		view:      view,
		exited:    make(chan struct{}),
		ready:     make(chan struct{}),
	}
	if sandbox.GetLogDirectory() != "" && config.GetLogPath() != "" {
		c.logPath = filepath.Join(sandbox.GetLogDirectory(), config.GetLogPath())
	}
	c.spec, c.runs = r.plan(c, config)
	return c, nil
}

// nodePath maps a host path of the kubelet's request into the node's folder:
// the kubelet's own volumes are there already, hostPath volumes name paths of
// the node's "/". A missing source is created, as the hostPath types
// DirectoryOrCreate and FileOrCreate would.
func (r *Runtime) nodePath(hostPath, containerPath string) (string, error) {
	p := hostPath
	if p != r.opts.NodeDir && !strings.HasPrefix(p, r.opts.NodeDir+"/") {
		p = filepath.Join(r.opts.NodeDir, hostPath)
	}
	if _, err := os.Stat(p); os.IsNotExist(err) {
		if fileMountTargets[containerPath] {
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				return "", err
			}
			if err := os.WriteFile(p, nil, 0o644); err != nil {
				return "", err
			}
		} else if err := os.MkdirAll(p, 0o755); err != nil {
			return "", err
		}
	}
	return p, nil
}

// plan decides what runs: a mapped image runs its program; another image runs
// its command when this machine has it (shell one-liners); else nothing runs.
func (r *Runtime) plan(c *container, config *runtimeapi.ContainerConfig) (initSpec, bool) {
	spec := initSpec{Rootfs: filepath.Join(c.dir, "rootfs"), Args: c.view.Args, Cwd: c.view.WorkingDir}
	// The container's root: an image folder over this machine's root (each
	// of the image's top-level folders layered over this machine's folder
	// of the same name, the others alone, its files bound), so an image
	// file at usr/bin/x is /usr/bin/x in the container and this machine's
	// /usr/bin/sh is there too; then the pod's volumes and the CDI mounts on
	// top, as a real runtime mounts them over the image (a CDI mount at
	// /tmp/x shows in an image that has /tmp; /usr/bin/nvidia-smi lands in
	// the container's /usr/bin, made in its own upper folder).
	program, mapped := r.opts.Images[imageName(config.GetImage().GetImage())]
	imageDir := ""
	if mapped && isDir(program) {
		imageDir = program
	}
	spec.Binds = append(spec.Binds, rootBinds(imageDir)...)
	for _, d := range hostDirs {
		if isDir(d) {
			spec.Binds = append(spec.Binds, bind{Source: d, Target: d})
		}
	}
	if r.opts.BootIDFile != "" && fileExists(r.opts.BootIDFile) {
		// After /proc: it covers procfs' file in the container's view only.
		spec.Binds = append(spec.Binds, bind{Source: r.opts.BootIDFile, Target: bootIDPath, ReadOnly: true})
	}
	for _, f := range systemFiles {
		if imageDir != "" && fileExists(filepath.Join(imageDir, f)) {
			continue // the image's own
		}
		if _, err := os.Stat(f); err == nil {
			spec.Binds = append(spec.Binds, bind{Source: f, Target: f, ReadOnly: true})
		}
	}
	spec.Binds = append(spec.Binds, mountBinds(c.view)...)
	for _, f := range devFiles {
		if _, err := os.Stat(f); err == nil {
			spec.Binds = append(spec.Binds, bind{Source: f, Target: f})
		}
	}
	// The mock NVML's node state (MIG instances, compute policy) plays the
	// kernel driver's, which every process on a real node reaches: it is
	// visible read-only in every container at MockNVMLStateDir, where the
	// driver root's simulated nvidia-smi looks for it when it is mounted
	// alone into a workload.
	if state := filepath.Join(r.opts.NodeDir, nodeconfig.DriverRootHostPath, "mock-nvml"); isDir(state) {
		spec.Binds = append(spec.Binds, bind{Source: state, Target: MockNVMLStateDir, ReadOnly: true})
	}
	// CDI device nodes: a device node of the node's folder (the host path
	// their spec named, else the node's own /dev tree; make-driver-root's
	// are real character devices) is bound in; a fully specified node
	// without one (a MIG capability, /dev/nvidia-caps/nvidia-cap<N>, an IMEX
	// channel) is made with mknod as a real runtime makes it, in the
	// container's folder, and bound in. A plain file of the node's folder
	// standing for a node (a test's placeholder) is bound as it is.
	for _, d := range c.view.Devices {
		src := c.view.DeviceHostPaths[d.Path]
		if src == "" {
			src = filepath.Join(r.opts.NodeDir, d.Path)
		}
		if isDeviceNode(src) {
			spec.Binds = append(spec.Binds, bind{Source: src, Target: d.Path})
			continue
		}
		if d.Major > 0 && (d.Type == "c" || d.Type == "") {
			node, err := c.makeDeviceNode(d)
			if err == nil {
				spec.Binds = append(spec.Binds, bind{Source: node, Target: d.Path})
				continue
			}
			// Not made (a major this machine's kernel registers, or no
			// CAP_MKNOD): as before, a file stands for it, so that the
			// container still sees exactly the nodes its devices gave it.
			fmt.Fprintf(os.Stderr, "simnode runtime: container %s: device node %s: %v; a plain file stands for it\n", c.id, d.Path, err)
			if !fileExists(src) {
				src = filepath.Join(c.dir, "device-nodes", d.Path)
				if err := os.MkdirAll(filepath.Dir(src), 0o755); err != nil {
					continue
				}
				if err := os.WriteFile(src, nil, 0o666); err != nil {
					continue
				}
			}
		}
		if fileExists(src) {
			spec.Binds = append(spec.Binds, bind{Source: src, Target: d.Path})
		}
	}

	env := serviceEnv(c.view.Env, r.opts.APIServer)
	pathEnv := defaultPath
	// An image folder (the driver's image) is the container's root (above):
	// its programs are where the image has them (usr/bin), and the
	// container's command picks one, as in a real image without an
	// entrypoint. An image mapped to one program runs it as its entrypoint.
	if mapped && imageDir == "" {
		target := filepath.Join(imageBinDir, filepath.Base(program))
		spec.Binds = append(spec.Binds, bind{Source: program, Target: target, ReadOnly: true})
		pathEnv = imageBinDir + ":" + defaultPath
		if len(config.GetCommand()) == 0 {
			// The program is the image's entrypoint; args follow it.
			spec.Args = append([]string{target}, config.GetArgs()...)
		}
	}
	if _, ok := c.view.EnvValue("PATH"); !ok {
		env = append(env, "PATH="+pathEnv)
	}
	spec.Env = env
	if len(spec.Args) == 0 {
		return spec, false
	}
	return spec, mapped || hostHas(spec.Args[0])
}

// makeDeviceNode makes the character device of a fully specified CDI
// device node in the container's folder (device-nodes/<path>) and returns its
// path. Its mode is the spec's, else 0666.
func (c *container) makeDeviceNode(d oci.LinuxDevice) (string, error) {
	node := filepath.Join(c.dir, "device-nodes", d.Path)
	if err := os.MkdirAll(filepath.Dir(node), 0o755); err != nil {
		return "", err
	}
	mode := os.FileMode(0o666)
	if d.FileMode != nil {
		mode = d.FileMode.Perm()
	}
	if err := MakeCharDevice(node, d.Major, d.Minor, mode); err != nil {
		return "", err
	}
	uid, gid := -1, -1
	if d.UID != nil {
		uid = int(*d.UID)
	}
	if d.GID != nil {
		gid = int(*d.GID)
	}
	if uid >= 0 || gid >= 0 {
		if err := os.Lchown(node, uid, gid); err != nil {
			return "", err
		}
	}
	return node, nil
}

// rootBinds lays out a container's root from an image folder (none: "")
// over this machine's root. Each of this machine's systemDirs is an overlay
// mount whose lowest layer is this machine's folder and whose layer above
// is the image's folder of the same name, if it has one (a system folder
// that is a symbolic link here, /bin -> usr/bin, stays one unless the image
// has a folder of that name: then the image's folder lies over the link's
// target). The image's other top-level folders are overlay mounts of their
// own, its top-level files are bound read-only and its symbolic links are
// made as they are. Every overlay has an upper folder of the container's
// own, so the container writes, and the runtime makes mount points, there
// and never in the image folder or this machine's folders. The image's
// dev/, proc/ and sys/ are left out: the runtime gives those.
func rootBinds(imageDir string) []bind {
	var out []bind
	inImage := func(name string) (os.FileInfo, string) {
		if imageDir == "" {
			return nil, ""
		}
		p := filepath.Join(imageDir, name)
		st, err := os.Lstat(p)
		if err != nil {
			return nil, ""
		}
		return st, p
	}
	seen := map[string]bool{"dev": true, "proc": true, "sys": true}
	for _, d := range systemDirs {
		name := strings.TrimPrefix(d, "/")
		seen[name] = true
		ist, ipath := inImage(name)
		if ist != nil && ist.Mode()&os.ModeSymlink != 0 {
			if link, err := os.Readlink(ipath); err == nil {
				out = append(out, bind{Source: link, Target: d, Symlink: true})
			}
			continue
		}
		var lower []string
		if ist != nil && ist.IsDir() {
			lower = append(lower, ipath)
		}
		st, err := os.Lstat(d)
		switch {
		case err != nil:
		case st.Mode()&os.ModeSymlink != 0:
			if len(lower) == 0 {
				if link, err := os.Readlink(d); err == nil {
					out = append(out, bind{Source: link, Target: d, Symlink: true})
				}
				continue
			}
			if target, err := filepath.EvalSymlinks(d); err == nil && isDir(target) {
				lower = append(lower, target)
			}
		case st.IsDir():
			lower = append(lower, d)
		}
		if len(lower) > 0 {
			out = append(out, bind{Target: d, Lower: lower})
		}
	}
	if imageDir == "" {
		return out
	}
	entries, err := os.ReadDir(imageDir)
	if err != nil {
		return out
	}
	for _, e := range entries {
		if seen[e.Name()] {
			continue
		}
		p, target := filepath.Join(imageDir, e.Name()), "/"+e.Name()
		st, err := os.Lstat(p)
		switch {
		case err != nil:
		case st.Mode()&os.ModeSymlink != 0:
			if link, err := os.Readlink(p); err == nil {
				out = append(out, bind{Source: link, Target: target, Symlink: true})
			}
		case st.IsDir():
			out = append(out, bind{Target: target, Lower: []string{p}})
		case st.Mode().IsRegular():
			out = append(out, bind{Source: p, Target: target, ReadOnly: true})
		}
	}
	return out
}

func isDir(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.IsDir()
}

// mountBinds turns the view's mounts into binds, parents before children.
func mountBinds(v *View) []bind {
	var out []bind
	for _, m := range v.Mounts {
		ro := false
		for _, o := range m.Options {
			ro = ro || o == "ro"
		}
		out = append(out, bind{Source: m.Source, Target: m.Destination, ReadOnly: ro})
	}
	sort.SliceStable(out, func(i, j int) bool {
		return strings.Count(out[i].Target, "/") < strings.Count(out[j].Target, "/")
	})
	return out
}

func hostHas(program string) bool {
	if strings.Contains(program, "/") {
		return fileExists(program)
	}
	_, err := exec.LookPath(program)
	return err == nil
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// writeSpec writes an init spec for container-init and returns its path.
func (c *container) writeSpec(name string, spec initSpec) (string, error) {
	if err := os.MkdirAll(spec.Rootfs, 0o755); err != nil {
		return "", err
	}
	data, err := json.Marshal(spec)
	if err != nil {
		return "", err
	}
	path := filepath.Join(c.dir, name)
	return path, os.WriteFile(path, data, 0o644)
}

// start runs the container's program, if it has one; onExit records its end.
func (c *container) start(sp *proc.Spawner, self string, onExit func(id string, code int32, reason string)) error {
	if !c.runs {
		return nil
	}
	spec := c.spec
	spec.ReadyFD = 3 // the first of cmd.ExtraFiles
	specPath, err := c.writeSpec("init.json", spec)
	if err != nil {
		return err
	}
	logw, err := openCRILog(c.logPath)
	if err != nil {
		return err
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		logw.close()
		return err
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		logw.close()
		outR.Close()
		outW.Close()
		return err
	}
	// container-init marks readyW close-on-exec: readyR sees EOF once the
	// program runs in the finished root, or once init failed.
	readyR, readyW, err := os.Pipe()
	if err != nil {
		logw.close()
		outR.Close()
		outW.Close()
		errR.Close()
		errW.Close()
		return err
	}
	cmd := exec.Command(self, InitCommand, specPath)
	cmd.Stdout, cmd.Stderr = outW, errW
	cmd.ExtraFiles = []*os.File{readyW}
	err = sp.Start(cmd, true)
	outW.Close()
	errW.Close()
	readyW.Close()
	if err != nil {
		logw.close()
		outR.Close()
		errR.Close()
		readyR.Close()
		return err
	}
	go func() { _, _ = io.Copy(io.Discard, readyR); readyR.Close(); close(c.ready) }()
	c.mu.Lock()
	c.cmd = cmd
	c.mu.Unlock()
	// Best effort: only fault injection reads it.
	_ = os.WriteFile(filepath.Join(c.dir, PidFile), []byte(fmt.Sprintf("%d\n", cmd.Process.Pid)), 0o644)

	// The log closes when both streams end, which may be after the process:
	// a child it left behind can still hold them.
	var streams sync.WaitGroup
	streams.Add(2)
	go func() { defer streams.Done(); logw.copyStream("stdout", outR); outR.Close() }()
	go func() { defer streams.Done(); logw.copyStream("stderr", errR); errR.Close() }()
	go func() { streams.Wait(); logw.close() }()
	go func() {
		werr := cmd.Wait()
		_ = os.Remove(filepath.Join(c.dir, PidFile))
		code := exitCode(werr)
		reason := "Completed"
		if code != 0 {
			reason = "Error"
		}
		onExit(c.id, code, reason)
		close(c.exited)
	}()
	return nil
}

// stop ends the process with SIGTERM and, after grace, SIGKILL, and returns
// once it has been reaped. It returns false when no process ever ran.
func (c *container) stop(grace time.Duration) bool {
	c.mu.Lock()
	cmd := c.cmd
	c.mu.Unlock()
	if cmd == nil {
		return false
	}
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-c.exited:
	case <-time.After(grace):
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-c.exited
	}
	return true
}

// kill ends the process group at once and waits for it.
func (c *container) kill() {
	c.mu.Lock()
	cmd := c.cmd
	c.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	<-c.exited
}

// remove deletes the container's folder and log. The root holds mount points
// only inside the container's own mount namespace, gone with its processes,
// so here it is a tree of empty folders and files.
func (c *container) remove() {
	_ = os.RemoveAll(c.dir)
	if c.logPath != "" {
		_ = os.Remove(c.logPath)
	}
}

// execSync runs cmd in the container as `runc exec` does: in the mount
// namespace, root and environment of the container's running process, with
// the container's working folder. Joining costs one small process (nsenter)
// where building the container's mounts again cost a Go process and a mount
// per volume; every IMEX daemon pod runs a startup probe each second. A
// container with nothing running (plan: "runs until deleted") has no
// namespace to join: its exec gets a fresh one built like the container's.
func (c *container) execSync(ctx context.Context, sp *proc.Spawner, self string, args []string) ([]byte, []byte, int32, error) {
	if len(args) == 0 {
		return nil, nil, 0, fmt.Errorf("empty command")
	}
	nsenter := nsenterPath()
	if !c.runs || nsenter == "" {
		return c.execFresh(ctx, sp, self, args)
	}
	c.mu.Lock()
	running := c.cmd
	c.mu.Unlock()
	if running == nil {
		return nil, nil, 0, fmt.Errorf("container is not running (never started)")
	}
	// Until container-init has built the root and exec'd the program, its
	// process still sees this machine's root.
	select {
	case <-c.ready:
	case <-c.exited:
		return nil, nil, 0, errContainerExited
	case <-ctx.Done():
		return nil, nil, 0, fmt.Errorf("timed out waiting for the container to start: %w", ctx.Err())
	}
	select {
	case <-c.exited:
		return nil, nil, 0, errContainerExited
	default:
	}
	pid := running.Process.Pid
	cwd := c.spec.Cwd
	if cwd == "" {
		cwd = "/"
	}
	// nsenter opens --wd's path before it enters the namespace; through
	// /proc/<pid>/root that path resolves in the container's mounts.
	nsArgs := []string{"--target", strconv.Itoa(pid), "--mount", "--root",
		"--wd=" + filepath.Join(fmt.Sprintf("/proc/%d/root", pid), cwd), "--"}
	cmd := exec.Command(nsenter, append(nsArgs, args...)...)
	cmd.Env = c.spec.Env // nsenter passes it on; its execvp searches PATH in the container's root
	stdout, stderr, code, err := runExec(ctx, sp, cmd, false, c.exited)
	if err == nil && code != 0 {
		// nsenter fails when the process ended after the check above.
		select {
		case <-c.exited:
			return nil, nil, 0, errContainerExited
		default:
		}
	}
	return stdout, stderr, code, err
}

var errContainerExited = errors.New("container is not running: its process has exited")

// nsenterPath is util-linux nsenter on this machine, or "" without it.
var nsenterPath = sync.OnceValue(func() string {
	p, err := exec.LookPath("nsenter")
	if err != nil {
		return ""
	}
	return p
})

// execFresh runs cmd in a fresh mount namespace built like the container's,
// so it sees the same files (volumes, devices, its program).
func (c *container) execFresh(ctx context.Context, sp *proc.Spawner, self string, args []string) ([]byte, []byte, int32, error) {
	spec := c.spec
	spec.Args = args
	spec.ReadyFD = 0
	spec.Rootfs = filepath.Join(c.dir, fmt.Sprintf("exec-%d", time.Now().UnixNano()))
	spec.Layers = spec.Rootfs + ".layers"
	defer os.RemoveAll(spec.Rootfs)
	defer os.RemoveAll(spec.Layers)
	specPath, err := c.writeSpec(filepath.Base(spec.Rootfs)+".json", spec)
	if err != nil {
		return nil, nil, 0, err
	}
	defer os.Remove(specPath)
	return runExec(ctx, sp, exec.Command(self, InitCommand, specPath), true, nil)
}

// runExec runs cmd to its end, or kills its process group when ctx ends or
// containerExited is closed: an exec'd process ends with its container, as
// in a runtime that gives the container its own PID namespace.
func runExec(ctx context.Context, sp *proc.Spawner, cmd *exec.Cmd, newMountNamespace bool, containerExited <-chan struct{}) ([]byte, []byte, int32, error) {
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := sp.Start(cmd, newMountNamespace); err != nil {
		return nil, nil, 0, err
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var err error
	select {
	case err = <-done:
	case <-ctx.Done():
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-done
		return stdout.Bytes(), stderr.Bytes(), 0, fmt.Errorf("timed out: %w", ctx.Err())
	case <-containerExited:
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-done
		return stdout.Bytes(), stderr.Bytes(), 0, errContainerExited
	}
	return stdout.Bytes(), stderr.Bytes(), exitCode(err), nil
}

// serviceEnv points the kubernetes Service variables the kubelet set at the
// API server's real address.
func serviceEnv(env []string, apiServer string) []string {
	host, port, err := net.SplitHostPort(apiServer)
	if err != nil {
		return append([]string(nil), env...)
	}
	out := make([]string, 0, len(env))
	for _, kv := range env {
		switch {
		case strings.HasPrefix(kv, "KUBERNETES_SERVICE_HOST="):
			kv = "KUBERNETES_SERVICE_HOST=" + host
		case strings.HasPrefix(kv, "KUBERNETES_SERVICE_PORT="):
			kv = "KUBERNETES_SERVICE_PORT=" + port
		}
		out = append(out, kv)
	}
	return out
}
