package harness

import (
	"bufio"
	"fmt"
	"os/exec"
	"strings"
	"syscall"
	"time"
)

// ControlPlane is a control plane run by test/cluster's cluster-launcher for
// one test; it ends with the test process (--die-with-parent).
type ControlPlane struct {
	Kubeconfig string
	cmd        *exec.Cmd
	exited     chan struct{}
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
	cp := &ControlPlane{cmd: cmd, exited: make(chan struct{})}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "ready ") {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return nil, fmt.Errorf("control plane in %s did not start (logs in %s/logs): %q %v", dir, dir, line, err)
	}
	cp.Kubeconfig = strings.TrimSpace(strings.TrimPrefix(line, "ready "))
	go func() { _ = cmd.Wait(); close(cp.exited) }()
	return cp, nil
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
