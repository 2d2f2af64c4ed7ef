package main

// Child processes of the launcher. Each child gets PR_SET_PDEATHSIG=SIGKILL,
// so nothing outlives the launcher, even when the launcher itself is killed
// with SIGKILL. The kernel sends that signal when the *thread* that forked the
// child exits, so main() locks itself to its OS thread (see init in main.go)
// and every child is started from the main goroutine.

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"
)

type component struct {
	name    string
	cmd     *exec.Cmd
	logFile *os.File
	exited  chan struct{} // closed when the process has been reaped
	err     error         // valid after exited is closed
}

// startComponent starts binary with args, its stdout and stderr appended to
// <logDir>/<name>.log.
func startComponent(name, binary string, args []string, logDir string) (*component, error) {
	logPath := filepath.Join(logDir, name+".log")
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(binary, args...)
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("start %s (%s): %w", name, binary, err)
	}
	c := &component{name: name, cmd: cmd, logFile: logFile, exited: make(chan struct{})}
	go func() {
		c.err = cmd.Wait()
		logFile.Close()
		close(c.exited)
	}()
	return c, nil
}

func (c *component) logPath() string { return c.logFile.Name() }

// stop asks the process to end with SIGTERM and kills its process group if it
// has not ended within grace.
func (c *component) stop(grace time.Duration) {
	select {
	case <-c.exited:
		return
	default:
	}
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.exited:
	case <-time.After(grace):
		_ = syscall.Kill(-c.cmd.Process.Pid, syscall.SIGKILL)
		<-c.exited
	}
}
