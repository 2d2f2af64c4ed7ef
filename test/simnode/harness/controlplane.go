package harness

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// ControlPlane is a control plane run by test/cluster's cluster-launcher for
// one test; it ends with the test process (--die-with-parent). Not
// thread-safe: one goroutine calls RestartAPIServer and Stop.
type ControlPlane struct {
	Kubeconfig string
	dir        string
	cmd        *exec.Cmd
	// out is the launcher's stdout after its ready line: it answers each
	// SIGUSR1 with one line (see RestartAPIServer).
	out    *bufio.Reader
	exited chan struct{}
}

// StartControlPlane runs `cluster-launcher run --dir dir` and returns once it
// has printed its ready line.
func StartControlPlane(dir string) (*ControlPlane, error) {
	launcher, err := DefaultBinary("cluster-launcher")
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(launcher, "run", "--dir", dir, "--die-with-parent")
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", launcher, err)
	}
	cp := &ControlPlane{dir: dir, cmd: cmd, out: bufio.NewReader(out), exited: make(chan struct{})}
	line, err := cp.out.ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "ready ") {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		// The caller's cleanup usually removes dir: keep what the servers said.
		return nil, fmt.Errorf("control plane in %s did not start: %q %v%s", dir, line, err, logTails(filepath.Join(dir, "logs"), 15))
	}
	cp.Kubeconfig = strings.TrimSpace(strings.TrimPrefix(line, "ready "))
	go func() { _ = cmd.Wait(); close(cp.exited) }()
	return cp, nil
}

// RestartAPIServer stops kube-apiserver and starts it again with the same
// flags and port, etcd and the other servers running on (the launcher does
// it on SIGUSR1), and returns once the new server answers /readyz. Clients
// see broken connections and watches, refused connections while it is down,
// then a server with a new watch cache. The nodes' API proxies dial the
// server anew for each connection, so they need nothing. Returns how long
// the server was away (from the signal to its answer).
func (cp *ControlPlane) RestartAPIServer() (time.Duration, error) {
	start := time.Now()
	if err := cp.cmd.Process.Signal(syscall.SIGUSR1); err != nil {
		return 0, fmt.Errorf("signal the cluster-launcher: %w", err)
	}
	type answer struct {
		line string
		err  error
	}
	got := make(chan answer, 1)
	go func() {
		line, err := cp.out.ReadString('\n')
		got <- answer{line, err}
	}()
	var a answer
	select {
	case a = <-got:
	case <-cp.exited:
		return 0, fmt.Errorf("the cluster-launcher exited during the API server restart (logs in %s/logs)", cp.dir)
	}
	if a.err != nil {
		return 0, fmt.Errorf("no answer from the cluster-launcher to the API server restart (logs in %s/logs): %w", cp.dir, a.err)
	}
	line := strings.TrimSpace(a.line)
	if !strings.HasPrefix(line, "apiserver-restarted ") {
		return 0, fmt.Errorf("kube-apiserver restart: %q (logs in %s/logs)", line, cp.dir)
	}
	return time.Since(start), nil
}

// Stop stops the control plane and waits for it (the launcher stops its
// servers on SIGTERM).
func (cp *ControlPlane) Stop() {
	_ = cp.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-cp.exited:
	case <-time.After(30 * time.Second):
		_ = cp.cmd.Process.Kill()
		<-cp.exited
	}
}

// logTails is the last n lines of each log in dir, for an error message.
func logTails(dir string, n int) string {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Sprintf("\n(no logs in %s: %v)", dir, err)
	}
	var b strings.Builder
	for _, e := range entries {
		data, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if e.IsDir() || err != nil || len(data) == 0 {
			continue
		}
		lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
		if len(lines) > n {
			lines = lines[len(lines)-n:]
		}
		fmt.Fprintf(&b, "\n--- last lines of %s:\n%s", filepath.Join(dir, e.Name()), strings.Join(lines, "\n"))
	}
	return b.String()
}
