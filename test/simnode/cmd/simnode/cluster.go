package main

// The cluster commands: up (run, in the background), run (the supervisor that
// holds the nodes, their API proxies and, without --kubeconfig, a control
// plane), fault (asks a running supervisor over its control socket) and down.
//
// Files in --dir:
//   run.pid         the supervisor's pid (up/run; removed when it ends)
//   simnode.log     the supervisor's log (up)
//   control.sock    the supervisor's control socket (one line per request)
//   kubeconfig      admin kubeconfig of the cluster the nodes joined
//   pids/<node>.pid each node process' pid (rewritten when a fault restarts it)
//   cp/             the control plane started by run, with its logs in cp/logs
//   <node>/         each node's folder: node.log (kubelet and runtime),
//                   var/log/pods/<ns>_<pod>_<uid>/<container>/<n>.log (CRI logs)
//
// For ComputeDomains (scripts/demo): --simimex puts the simulated IMEX into
// every driver root (make-driver-root reads NVDRA_SIMIMEX_DIR), and
// --imex-node-files adds what a GB200 host with IMEX has beyond that (see
// writeIMEXNodeFiles). --simsysfs has every GPU node run the simulated PCI
// driver core on its driver root's mock sysfs (nodes read NVDRA_SIMSYSFS).

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"nvdra.local/test/simnode/harness"
	"nvdra.local/test/simnode/internal/cri"
	"nvdra.local/test/simnode/nodeconfig"
)

// readyFD is the pipe on which `run`, started by `up`, reports "ready" or
// "error: ..." (fd 3: the first of exec.Cmd.ExtraFiles).
const readyFD = 3

const envReadyFD = "SIMNODE_READY_FD"

type upFlags struct {
	dir, kubeconfig, profile, profiles, prefix, mockNVML, simIMEX, simSysfs string
	nodes, verbosity                                                        int
	imexNodeFiles                                                           bool
	images                                                                  stringList
	timeout                                                                 time.Duration
}

type stringList []string

func (s *stringList) String() string     { return strings.Join(*s, ",") }
func (s *stringList) Set(v string) error { *s = append(*s, v); return nil }

func clusterCommand(verb string, args []string) error {
	switch verb {
	case "up", "run":
		f, err := parseUpFlags(verb, args)
		if err != nil {
			return err
		}
		if verb == "up" {
			return up(f, args)
		}
		return run(f)
	case "down":
		fs := flag.NewFlagSet("down", flag.ExitOnError)
		dir := fs.String("dir", "", "folder given to up")
		clean := fs.Bool("clean", false, "remove the folder afterwards")
		_ = fs.Parse(args)
		if *dir == "" {
			return errors.New("--dir is required")
		}
		return down(*dir, *clean)
	case "fault":
		fs := flag.NewFlagSet("fault", flag.ExitOnError)
		dir := fs.String("dir", "", "folder given to up")
		pos := parseInterspersed(fs, args)
		if *dir == "" || len(pos) < 2 {
			return errors.New("usage: simnode fault --dir D <kind> <node> [namespace/pod/container | GPU [XID]]")
		}
		answer, err := ask(*dir, "fault "+strings.Join(pos, " "))
		if err != nil {
			return err
		}
		fmt.Println(answer)
		return nil
	}
	return fmt.Errorf("unknown command %q", verb)
}

// parseInterspersed parses flags that may come before, between or after the
// positional arguments, which it returns.
func parseInterspersed(fs *flag.FlagSet, args []string) []string {
	var pos []string
	for {
		_ = fs.Parse(args)
		args = fs.Args()
		if len(args) == 0 {
			return pos
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
}

func parseUpFlags(verb string, args []string) (*upFlags, error) {
	f := &upFlags{}
	fs := flag.NewFlagSet(verb, flag.ExitOnError)
	fs.StringVar(&f.dir, "dir", "", "folder for the nodes, their logs and pids (keep it short: unix socket paths below it)")
	fs.StringVar(&f.kubeconfig, "kubeconfig", "", "cluster to join (default: start a control plane in <dir>/cp)")
	fs.IntVar(&f.nodes, "nodes", 1, "number of nodes")
	fs.StringVar(&f.profile, "profile", "", "mock NVML profile of every node (h100-sxm, a100-mig, ... or a JSON path)")
	fs.StringVar(&f.profiles, "profiles", "", "per-node profiles: NODE=PROFILE,... (overrides --profile)")
	fs.StringVar(&f.prefix, "name-prefix", "sim-node-", "node name prefix")
	fs.StringVar(&f.mockNVML, "mocknvml", os.Getenv(harness.EnvMockNVMLLibrary), "built mock libnvidia-ml.so.1 (GPU nodes; env "+harness.EnvMockNVMLLibrary+")")
	fs.StringVar(&f.simIMEX, "simimex", os.Getenv(envSimIMEXDir), "folder with the built simulated nvidia-imex and nvidia-imex-ctl (<build>/test/simimex/bin), copied into every driver root (env "+envSimIMEXDir+")")
	fs.StringVar(&f.simSysfs, "simsysfs", os.Getenv(nodeconfig.EnvSimSysfs), "the built simulated PCI driver core (<build>/test/simsysfs/simsysfs), run by every GPU node on its driver root's mock sysfs (env "+nodeconfig.EnvSimSysfs+")")
	fs.BoolVar(&f.imexNodeFiles, "imex-node-files", false, "give every GPU node the fabric-imex-mgmt capability (minor 1) the compute-domain plugin needs, and the IMEX channel device nodes in its /dev")
	fs.IntVar(&f.verbosity, "v", 0, "kubelet verbosity")
	fs.Var(&f.images, "image", "NAME=PROGRAM or NAME=FOLDER: containers of image NAME run PROGRAM, or the program their command names from FOLDER/bin (repeatable)")
	fs.DurationVar(&f.timeout, "timeout", 5*time.Minute, "how long start-up may take")
	_ = fs.Parse(args)
	if f.dir == "" {
		return nil, errors.New("--dir is required")
	}
	abs, err := filepath.Abs(f.dir)
	if err != nil {
		return nil, err
	}
	f.dir = abs
	return f, nil
}

// up starts `run` with the same flags in a session of its own (it outlives
// this command and its terminal), its output in <dir>/simnode.log, and
// returns when it reports the nodes Ready.
func up(f *upFlags, args []string) error {
	if pid := runningPid(f.dir); pid != 0 {
		return fmt.Errorf("simnode already runs in %s (pid %d); stop it with: simnode down --dir %s", f.dir, pid, f.dir)
	}
	if err := os.MkdirAll(f.dir, 0o755); err != nil {
		return err
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	logFile, err := os.OpenFile(filepath.Join(f.dir, "simnode.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logFile.Close()
	readR, readW, err := os.Pipe()
	if err != nil {
		return err
	}
	cmd := exec.Command(self, append([]string{"run"}, args...)...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.ExtraFiles = []*os.File{readW}
	cmd.Env = append(os.Environ(), envReadyFD+"="+strconv.Itoa(readyFD))
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return err
	}
	readW.Close()
	line, _ := bufio.NewReader(readR).ReadString('\n')
	readR.Close()
	line = strings.TrimPrefix(strings.TrimSpace(line), "error: ")
	if line != "ready" {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if line == "" {
			line = "it exited"
		}
		return fmt.Errorf("start failed: %s (log: %s)", line, logFile.Name())
	}
	pid := cmd.Process.Pid
	_ = cmd.Process.Release()
	fmt.Printf("simnode: %d nodes Ready (pid %d)\n  kubeconfig: %s\n  logs: %s/simnode.log, %s/<node>/node.log, %s/<node>/var/log/pods/\n  stop: simnode down --dir %s\n",
		f.nodes, pid, filepath.Join(f.dir, "kubeconfig"), f.dir, f.dir, f.dir, f.dir)
	return nil
}

// run starts (a control plane and) the nodes, serves the control socket and
// stops everything on SIGINT/SIGTERM.
func run(f *upFlags) (err error) {
	var ready *os.File
	if fd, _ := strconv.Atoi(os.Getenv(envReadyFD)); fd > 0 {
		ready = os.NewFile(uintptr(fd), "ready")
		os.Unsetenv(envReadyFD)
	}
	report := func(msg string) {
		if ready != nil {
			fmt.Fprintln(ready, msg)
			ready.Close()
			ready = nil
		}
	}
	defer func() {
		if err != nil {
			report("error: " + err.Error())
		}
	}()
	if err := os.MkdirAll(f.dir, 0o755); err != nil {
		return err
	}
	if pid := runningPid(f.dir); pid != 0 && pid != os.Getpid() {
		return fmt.Errorf("simnode already runs in %s (pid %d)", f.dir, pid)
	}
	if err := os.WriteFile(pidFile(f.dir), []byte(strconv.Itoa(os.Getpid())+"\n"), 0o644); err != nil {
		return err
	}
	defer os.Remove(pidFile(f.dir))
	signals := make(chan os.Signal, 2)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM)

	self, err := os.Executable()
	if err != nil {
		return err
	}
	// cluster-launcher and simnode-test-driver sit beside simnode.
	if os.Getenv("NVDRA_CLUSTER_BIN") == "" {
		os.Setenv("NVDRA_CLUSTER_BIN", filepath.Dir(self))
	}
	if f.mockNVML != "" {
		os.Setenv(harness.EnvMockNVMLLibrary, f.mockNVML)
	}
	if f.simIMEX != "" {
		// Read by make-driver-root, which the harness runs per GPU node.
		abs, err := filepath.Abs(f.simIMEX)
		if err != nil {
			return err
		}
		for _, bin := range []string{"nvidia-imex", "nvidia-imex-ctl"} {
			if !fileExists(filepath.Join(abs, bin)) {
				return fmt.Errorf("--simimex %s: no %s there (build targets simimex_nvidia_imex and simimex_nvidia_imex_ctl)", abs, bin)
			}
		}
		os.Setenv(envSimIMEXDir, abs)
	}
	if f.simSysfs != "" {
		// Read by each node process (inherited through the harness).
		abs, err := filepath.Abs(f.simSysfs)
		if err != nil {
			return err
		}
		if !fileExists(abs) {
			return fmt.Errorf("--simsysfs %s: no such file (build target simsysfs)", abs)
		}
		os.Setenv(nodeconfig.EnvSimSysfs, abs)
	}
	opts := harness.Options{Dir: f.dir, Nodes: f.nodes, NamePrefix: f.prefix, Simnode: self,
		Verbosity: f.verbosity, PidDir: filepath.Join(f.dir, "pids"), Images: map[string]string{}}
	if driver := filepath.Join(filepath.Dir(self), "simnode-test-driver"); fileExists(driver) {
		opts.Images["simnode.test/test-driver"] = driver
	}
	for _, kv := range f.images {
		name, program, ok := strings.Cut(kv, "=")
		if !ok {
			return fmt.Errorf("--image %q: want NAME=PROGRAM", kv)
		}
		if program, err = filepath.Abs(program); err != nil {
			return err
		}
		opts.Images[name] = program
	}
	if opts.GPUProfiles, err = gpuProfiles(f); err != nil {
		return err
	}

	kubeconfig := f.kubeconfig
	if kubeconfig == "" {
		cp, err := harness.StartControlPlane(filepath.Join(f.dir, "cp"))
		if err != nil {
			return err
		}
		defer cp.Stop()
		kubeconfig = cp.Kubeconfig
	}
	if kubeconfig, err = filepath.Abs(kubeconfig); err != nil {
		return err
	}
	opts.Kubeconfig = kubeconfig
	link := filepath.Join(f.dir, "kubeconfig")
	_ = os.Remove(link)
	if err := os.Symlink(kubeconfig, link); err != nil {
		return err
	}
	cluster, err := harness.Start(opts)
	if err != nil {
		return err
	}
	defer cluster.Stop()
	if f.imexNodeFiles {
		// Before any plugin runs: the nodes are up but no DaemonSet is.
		for _, n := range cluster.Nodes {
			if n.Config.GPUProfile == "" {
				continue
			}
			if err := writeIMEXNodeFiles(n.Config.Dir, n.Config.DriverRoot()); err != nil {
				return fmt.Errorf("node %s: %w", n.Config.Name, err)
			}
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), f.timeout)
	waitErr := make(chan error, 1)
	go func() { waitErr <- cluster.WaitReady(ctx) }()
	select {
	case err := <-waitErr:
		cancel()
		if err != nil {
			return err
		}
	case sig := <-signals:
		cancel()
		return fmt.Errorf("%v during start-up", sig)
	}
	control, err := serveControl(f.dir, cluster)
	if err != nil {
		return err
	}
	defer control.Close()
	fmt.Fprintf(os.Stderr, "simnode: %d nodes Ready; control socket %s\n", f.nodes, control.Addr())
	report("ready")
	sig := <-signals
	fmt.Fprintf(os.Stderr, "simnode: %v, stopping\n", sig)
	return nil
}

// envSimIMEXDir names the simulated IMEX folder for make-driver-root.
const envSimIMEXDir = "NVDRA_SIMIMEX_DIR"

const (
	// fabricIMEXMgmtMinor is the capability's minor on real GB200 hosts.
	fabricIMEXMgmtMinor = 1
	// imexChannelPlaceholders (the number of channel device nodes) covers the chart's default channel count
	// (resources.computeDomains.imex.channelCount).
	imexChannelPlaceholders = 128
)

// writeIMEXNodeFiles lays out, for one GPU node:
//   - <driver root>/proc/driver/nvidia/capabilities/fabric-imex-mgmt in the
//     kernel's format, which the compute-domain plugin and daemon parse
//     (make-driver-root has none: not every GPU host has it; the e2e tests'
//     layOutCDNodeFiles writes the same);
//   - <node>/dev/nvidia-caps-imex-channels/channel<N>, character devices
//     c <major>:<N> with the major the driver root's proc/devices declares
//     for nvidia-caps-imex-channels, as the host's nodes. A container gets
//     a channel from its claim's CDI spec (fully specified), which the
//     runtime makes with mknod when the node has none. Not in the driver
//     root's dev/: the plugin would list those as host channels for every
//     container.
func writeIMEXNodeFiles(nodeDir, driverRoot string) error {
	caps := filepath.Join(driverRoot, "proc", "driver", "nvidia", "capabilities")
	if err := os.MkdirAll(caps, 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(caps, "fabric-imex-mgmt"),
		[]byte(fmt.Sprintf("DeviceFileMinor: %d\nDeviceFileMode: 256\nDeviceFileModify: 1\n", fabricIMEXMgmtMinor)), 0o644); err != nil {
		return err
	}
	channels := filepath.Join(nodeDir, "dev", "nvidia-caps-imex-channels")
	if err := os.MkdirAll(channels, 0o755); err != nil {
		return err
	}
	majors, err := cri.CharMajors(filepath.Join(driverRoot, "proc", "devices"))
	if err != nil {
		return err
	}
	var major int64 = -1
	for m, name := range majors {
		if name == "nvidia-caps-imex-channels" {
			major = m
		}
	}
	if major < 0 {
		return fmt.Errorf("%s/proc/devices has no nvidia-caps-imex-channels", driverRoot)
	}
	for i := 0; i < imexChannelPlaceholders; i++ {
		if err := cri.MakeCharDevice(filepath.Join(channels, fmt.Sprintf("channel%d", i)), major, int64(i), 0o666); err != nil {
			return err
		}
	}
	return nil
}

// gpuProfiles builds the node -> profile map of --profile and --profiles.
func gpuProfiles(f *upFlags) (map[string]string, error) {
	out := map[string]string{}
	if f.profile != "" {
		for i := 0; i < f.nodes; i++ {
			out[fmt.Sprintf("%s%d", f.prefix, i)] = f.profile
		}
	}
	if f.profiles != "" {
		for _, kv := range strings.Split(f.profiles, ",") {
			node, profile, ok := strings.Cut(kv, "=")
			if !ok || node == "" || profile == "" {
				return nil, fmt.Errorf("--profiles %q: want NODE=PROFILE,...", f.profiles)
			}
			out[node] = profile
		}
	}
	return out, nil
}

// serveControl answers one request line per connection on <dir>/control.sock:
// "fault <kind> <node> [args]" -> "ok <what>" or "error <why>"; "nodes" -> the
// live nodes' names. Requests run one at a time (Cluster is not thread-safe).
func serveControl(dir string, cluster *harness.Cluster) (net.Listener, error) {
	path := filepath.Join(dir, "control.sock")
	_ = os.Remove(path)
	l, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("control socket: %w", err)
	}
	var mu sync.Mutex
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				line, err := bufio.NewReader(c).ReadString('\n')
				if err != nil {
					return
				}
				mu.Lock()
				answer := handleControl(cluster, strings.Fields(line))
				mu.Unlock()
				fmt.Fprintln(c, answer)
			}()
		}
	}()
	return l, nil
}

func handleControl(cluster *harness.Cluster, words []string) string {
	switch {
	case len(words) >= 3 && words[0] == "fault":
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		what, err := cluster.Fault(ctx, words[1], words[2], words[3:])
		if err != nil {
			return "error " + err.Error()
		}
		fmt.Fprintf(os.Stderr, "simnode: fault %s on %s: %s\n", words[1], words[2], what)
		return "ok " + what
	case len(words) == 1 && words[0] == "nodes":
		var names []string
		for _, n := range cluster.Nodes {
			if _, err := cluster.Node(n.Config.Name); err == nil {
				names = append(names, n.Config.Name)
			}
		}
		sort.Strings(names)
		return "ok " + strings.Join(names, " ")
	}
	return "error unknown request " + strconv.Quote(strings.Join(words, " "))
}

// ask sends one request to the supervisor in dir and returns its answer.
func ask(dir, request string) (string, error) {
	c, err := net.Dial("unix", filepath.Join(dir, "control.sock"))
	if err != nil {
		return "", fmt.Errorf("no simnode running in %s: %w", dir, err)
	}
	defer c.Close()
	if _, err := fmt.Fprintln(c, request); err != nil {
		return "", err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return "", fmt.Errorf("no answer: %w", err)
	}
	line = strings.TrimSpace(line)
	if rest, ok := strings.CutPrefix(line, "error "); ok {
		return "", errors.New(rest)
	}
	return strings.TrimPrefix(line, "ok "), nil
}

// down stops the supervisor in dir (SIGTERM: it stops nodes and control
// plane), waits for it, then kills any node process a crashed supervisor
// left (their pids in pids/).
func down(dir string, clean bool) error {
	if pid := runningPid(dir); pid != 0 {
		if err := stopAndWait(pid, 90*time.Second); err != nil {
			return err
		}
	}
	entries, _ := os.ReadDir(filepath.Join(dir, "pids"))
	for _, e := range entries {
		data, err := os.ReadFile(filepath.Join(dir, "pids", e.Name()))
		if pid, _ := strconv.Atoi(strings.TrimSpace(string(data))); err == nil && pid > 0 && isSimnode(pid) {
			_ = stopAndWait(pid, 15*time.Second)
		}
		_ = os.Remove(filepath.Join(dir, "pids", e.Name()))
	}
	if clean {
		return os.RemoveAll(dir)
	}
	return nil
}

// stopAndWait sends SIGTERM, waits on a pidfd for the process to end, and
// sends SIGKILL after grace.
func stopAndWait(pid int, grace time.Duration) error {
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		if errors.Is(err, unix.ESRCH) {
			return nil
		}
		return fmt.Errorf("pidfd of %d: %w", pid, err)
	}
	defer unix.Close(fd)
	if err := unix.PidfdSendSignal(fd, unix.SIGTERM, nil, 0); err != nil {
		return nil // gone already
	}
	fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	n, err := unix.Poll(fds, int(grace.Milliseconds()))
	for err == unix.EINTR {
		n, err = unix.Poll(fds, int(grace.Milliseconds()))
	}
	if n == 0 {
		_ = unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0)
		_, _ = unix.Poll(fds, 10000)
	}
	return nil
}

func pidFile(dir string) string { return filepath.Join(dir, "run.pid") }

// runningPid returns the pid of a live supervisor of dir, or 0.
func runningPid(dir string) int {
	data, err := os.ReadFile(pidFile(dir))
	if err != nil {
		return 0
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil || pid <= 0 || !isSimnode(pid) {
		return 0
	}
	return pid
}

// isSimnode reports whether pid is alive and runs this program (a recycled
// pid must not be signalled).
func isSimnode(pid int) bool {
	if syscall.Kill(pid, 0) != nil {
		return false
	}
	exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
	self, _ := os.Executable()
	// A rebuilt binary shows as "simnode (deleted)" in running processes.
	return err == nil && strings.HasPrefix(filepath.Base(exe), filepath.Base(self))
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}
