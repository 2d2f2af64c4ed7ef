// Command cluster-launcher runs a real Kubernetes control plane on loopback for
// tests and demos: etcd, kube-apiserver, kube-controller-manager and
// kube-scheduler, with a fresh CA, RBAC, ServiceAccount tokens and the DRA APIs.
//
//	cluster-launcher run  --dir D   foreground; prints "ready <kubeconfig>" when up
//	cluster-launcher up   --dir D   starts "run" in the background and returns when ready
//	cluster-launcher down --dir D   stops the cluster started by "up"
//	cluster-launcher kubeconfig --dir D
//
// With --audit-log (or CLUSTER_AUDIT_LOG=1 in the environment, which a test
// process can set for the launchers it starts) the API server writes one JSON line per request to
// D/logs/audit.log (level Metadata: who, which user agent, verb, resource,
// status; no bodies), so that a benchmark can say which client made which
// request.
//
// While "run" runs, SIGUSR1 restarts kube-apiserver alone, with the same flags
// and port plus the extra flags listed (one per line) in D/apiserver-restart-args,
// if that file exists; once it is ready again (or failed) the launcher prints
// "apiserver-restarted N" (or "apiserver-restart-failed REASON") on stdout.
//
// Nothing outlives the launcher: every server gets PR_SET_PDEATHSIG, and with
// --die-with-parent the launcher itself ends when the process that started it
// does (a crashed test leaves no servers behind).
package main

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"
)

func init() {
	// Children's death signal is tied to the thread that forked them; keep
	// main on one thread for the life of the process.
	runtime.LockOSThread()
}

func usage() {
	fmt.Fprintf(os.Stderr, `usage: cluster-launcher <run|up|down|kubeconfig|env> --dir DIR [flags]

  run         start the control plane in the foreground; stop with SIGINT/SIGTERM
  up          start it in the background, return when it is ready
  down        stop a control plane started by up
  kubeconfig  print the path of the admin kubeconfig of a running control plane
  env         print the cluster.env file of a running control plane

flags:
`)
	flag.PrintDefaults()
}

func main() {
	if len(os.Args) < 2 || strings.HasPrefix(os.Args[1], "-") {
		usage()
		os.Exit(2)
	}
	verb := os.Args[1]
	fs := flag.NewFlagSet(verb, flag.ExitOnError)
	dir := fs.String("dir", "", "state directory of this cluster (certificates, etcd data, logs, kubeconfig)")
	binDir := fs.String("bin-dir", "", "directory with etcd, kube-apiserver, kube-controller-manager, kube-scheduler (default: the launcher's own directory)")
	gates := fs.String("feature-gates", "", "extra feature gates for every server, e.g. DRAResourcePoolStatus=true")
	timeout := fs.Duration("start-timeout", 120*time.Second, "how long start-up may take")
	dieWithParent := fs.Bool("die-with-parent", false, "end (and stop the cluster) when the parent process ends")
	auditLog := fs.Bool("audit-log", os.Getenv(envAuditLog) == "1",
		"write the API server's audit log (every request's user, user agent, verb and resource; no bodies) to DIR/logs/audit.log (env "+envAuditLog+"=1)")
	controllerQPS := fs.Int("controller-qps", envInt(envControllerQPS),
		"client QPS of kube-controller-manager and kube-scheduler (burst twice that); 0 keeps their defaults (20/30 and 50/100); Kubernetes' own scalability tests use 100 (env "+envControllerQPS+")")
	nodeMonitorGrace := fs.Duration("node-monitor-grace-period", envDuration(envNodeMonitorGrace),
		"how long a node may miss heartbeats before kube-controller-manager marks it NotReady (and, 5 minutes later, evicts its pods); 0 keeps the default, 50s. For hundreds of simulated kubelets on a few cores (env "+envNodeMonitorGrace+")")
	fs.Usage = usage
	_ = fs.Parse(os.Args[2:])
	if *dir == "" {
		fmt.Fprintln(os.Stderr, "cluster-launcher: --dir is required")
		os.Exit(2)
	}
	absDir, err := filepath.Abs(*dir)
	if err != nil {
		fatal(err)
	}
	if *binDir == "" {
		self, err := os.Executable()
		if err != nil {
			fatal(err)
		}
		*binDir = filepath.Dir(self)
	}
	opts := clusterOptions{dir: absDir, binDir: *binDir, startTimeout: *timeout, auditLog: *auditLog,
		controllerQPS: *controllerQPS, nodeMonitorGrace: *nodeMonitorGrace}
	if *gates != "" {
		opts.extraGates = strings.Split(*gates, ",")
	}
	switch verb {
	case "run":
		os.Exit(run(opts, *dieWithParent))
	case "up":
		os.Exit(up(opts, os.Args[2:]))
	case "down":
		os.Exit(down(absDir))
	case "kubeconfig", "env":
		env := filepath.Join(absDir, "cluster.env")
		if _, err := os.Stat(env); err != nil {
			fmt.Fprintf(os.Stderr, "cluster-launcher: no running cluster in %s (start one with: up --dir %s)\n", absDir, absDir)
			os.Exit(1)
		}
		if verb == "kubeconfig" {
			fmt.Println(filepath.Join(absDir, "kubeconfig"))
		} else {
			data, _ := os.ReadFile(env)
			fmt.Print(string(data))
		}
	default:
		usage()
		os.Exit(2)
	}
}

// envAuditLog is --audit-log's environment twin.
const envAuditLog = "CLUSTER_AUDIT_LOG"

// envControllerQPS is --controller-qps's environment twin.
const envControllerQPS = "CLUSTER_CONTROLLER_QPS"

// envNodeMonitorGrace is --node-monitor-grace-period's environment twin.
const envNodeMonitorGrace = "CLUSTER_NODE_MONITOR_GRACE_PERIOD"

// envDuration reads a non-negative duration from the environment (0 when unset).
func envDuration(name string) time.Duration {
	return envValue(name, "a duration, e.g. 5m", func(v string) (time.Duration, bool) {
		d, err := time.ParseDuration(v)
		return d, err == nil && d >= 0
	})
}

// envInt reads a non-negative integer from the environment (0 when unset).
func envInt(name string) int {
	return envValue(name, "a non-negative integer", func(v string) (int, bool) {
		n, err := strconv.Atoi(v)
		return n, err == nil && n >= 0
	})
}

// envValue parses the environment variable name (the zero value when unset)
// and exits naming it and what it wants when parse refuses it.
func envValue[T any](name, want string, parse func(string) (T, bool)) T {
	var zero T
	v := os.Getenv(name)
	if v == "" {
		return zero
	}
	parsed, ok := parse(v)
	if !ok {
		fmt.Fprintf(os.Stderr, "cluster-launcher: %s=%q: want %s\n", name, v, want)
		os.Exit(2)
	}
	return parsed
}

func fatal(err error) {
	fmt.Fprintf(os.Stderr, "cluster-launcher: %v\n", err)
	os.Exit(1)
}

func pidFile(dir string) string { return filepath.Join(dir, "launcher.pid") }

// runningPid returns the pid of a live launcher of dir, or 0.
func runningPid(dir string) int {
	data, err := os.ReadFile(pidFile(dir))
	if err != nil {
		return 0
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil || pid <= 0 {
		return 0
	}
	if err := syscall.Kill(pid, 0); err != nil {
		return 0
	}
	return pid
}

func run(opts clusterOptions, dieWithParent bool) int {
	if dieWithParent {
		parent := os.Getppid()
		if _, _, errno := syscall.RawSyscall(syscall.SYS_PRCTL, syscall.PR_SET_PDEATHSIG, uintptr(syscall.SIGTERM), 0); errno != 0 {
			fatal(fmt.Errorf("prctl(PR_SET_PDEATHSIG): %v", errno))
		}
		if os.Getppid() != parent { // the parent died before prctl took effect
			return 1
		}
	}
	if err := os.MkdirAll(opts.dir, 0o755); err != nil {
		fatal(err)
	}
	if pid := runningPid(opts.dir); pid != 0 && pid != os.Getpid() {
		fatal(fmt.Errorf("a cluster is already running in %s (pid %d); stop it with: down --dir %s", opts.dir, pid, opts.dir))
	}
	if err := os.WriteFile(pidFile(opts.dir), []byte(strconv.Itoa(os.Getpid())+"\n"), 0o644); err != nil {
		fatal(err)
	}
	defer os.Remove(pidFile(opts.dir))

	signals := make(chan os.Signal, 2)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM)

	c := &cluster{opts: opts}
	started := time.Now()
	// up() starts children, so it must run on this (locked) thread; a signal
	// that arrives meanwhile is handled once it returns.
	if err := c.up(); err != nil {
		c.down()
		fmt.Fprintf(os.Stderr, "cluster-launcher: start failed: %v\n", err)
		return 1
	}
	select {
	case sig := <-signals:
		fmt.Fprintf(os.Stderr, "cluster-launcher: %v during start-up, stopping\n", sig)
		c.down()
		return 0
	default:
	}
	fmt.Printf("ready %s\n", c.kubeconfig)
	fmt.Fprintf(os.Stderr, "cluster-launcher: control plane ready in %.1fs: API server https://127.0.0.1:%d, logs in %s\n",
		time.Since(started).Seconds(), c.ports["apiserver"], c.path("logs"))

	// SIGUSR1 restarts kube-apiserver alone (see restartAPIServer). Its
	// answer goes to stdout, whose reader may be gone (after "up"): a broken
	// pipe must not kill the launcher, so SIGPIPE is received and dropped
	// rather than ignored (an ignored signal would stay ignored in children).
	restarts := make(chan os.Signal, 1)
	signal.Notify(restarts, syscall.SIGUSR1)
	signal.Notify(make(chan os.Signal, 1), syscall.SIGPIPE)

	exits := c.firstExit()
	for {
		select {
		case sig := <-signals:
			fmt.Fprintf(os.Stderr, "cluster-launcher: %v, stopping\n", sig)
			c.down()
			return 0
		case <-restarts:
			// On this (locked) thread: the new server's death signal is tied
			// to the thread that forks it.
			n, err := c.restartAPIServer()
			if err != nil {
				fmt.Fprintf(os.Stderr, "cluster-launcher: restart of kube-apiserver failed: %v\n", err)
				fmt.Printf("apiserver-restart-failed %s\n", strings.ReplaceAll(err.Error(), "\n", " "))
			} else {
				fmt.Fprintf(os.Stderr, "cluster-launcher: kube-apiserver restarted (%d) and ready\n", n)
				fmt.Printf("apiserver-restarted %d\n", n)
			}
			// The old server's exit was intended; watch the current set.
			exits = c.firstExit()
		case comp := <-exits:
			fmt.Fprintf(os.Stderr, "cluster-launcher: %v: %s (%v); see %s\n", errComponentExited, comp.name, comp.err, comp.logPath())
			c.down()
			return 1
		}
	}
}

// up starts "run" detached from this terminal and waits for its ready line.
func up(opts clusterOptions, args []string) int {
	if err := os.MkdirAll(opts.dir, 0o755); err != nil {
		fatal(err)
	}
	if pid := runningPid(opts.dir); pid != 0 {
		fmt.Fprintf(os.Stderr, "cluster-launcher: a cluster is already running in %s (pid %d)\n", opts.dir, pid)
		fmt.Println(filepath.Join(opts.dir, "kubeconfig"))
		return 0
	}
	self, err := os.Executable()
	if err != nil {
		fatal(err)
	}
	logPath := filepath.Join(opts.dir, "launcher.log")
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		fatal(err)
	}
	defer logFile.Close()
	cmd := exec.Command(self, append([]string{"run"}, args...)...)
	cmd.Stderr = logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		fatal(err)
	}
	if err := cmd.Start(); err != nil {
		fatal(err)
	}
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "ready ") {
		_ = cmd.Wait()
		log, _ := os.ReadFile(logPath)
		fmt.Fprintf(os.Stderr, "cluster-launcher: the control plane did not start:\n%s", log)
		return 1
	}
	// The launcher keeps running in its own session; its later stdout goes
	// nowhere, which is fine: it only ever prints the ready line.
	_ = cmd.Process.Release()
	fmt.Println(strings.TrimSpace(strings.TrimPrefix(line, "ready ")))
	return 0
}

func down(dir string) int {
	pid := runningPid(dir)
	if pid == 0 {
		fmt.Fprintf(os.Stderr, "cluster-launcher: no cluster running in %s\n", dir)
		return 0
	}
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil && !errors.Is(err, syscall.ESRCH) {
		fatal(err)
	}
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		if syscall.Kill(pid, 0) != nil {
			return 0
		}
		time.Sleep(50 * time.Millisecond)
	}
	_ = syscall.Kill(pid, syscall.SIGKILL)
	fmt.Fprintf(os.Stderr, "cluster-launcher: pid %d did not stop within 60s; killed it (its servers die with it)\n", pid)
	return 1
}
