// Package proc starts child processes that die with this process.
package proc

import (
	"os/exec"
	"runtime"
	"syscall"
)

// Spawner starts child processes from one goroutine locked to its OS thread.
// PR_SET_PDEATHSIG fires when the *thread* that forked a child exits; this
// thread is never released, so children die with the process, never earlier.
// Thread-safe.
type Spawner struct {
	requests chan request
}

type request struct {
	cmd  *exec.Cmd
	done chan error
}

// NewSpawner starts the spawning goroutine; it lives as long as the process.
func NewSpawner() *Spawner {
	s := &Spawner{requests: make(chan request)}
	go func() {
		runtime.LockOSThread() // never unlocked: the thread must not be reused or exit
		for r := range s.requests {
			r.done <- r.cmd.Start()
		}
	}()
	return s
}

// Start starts cmd with SIGKILL as its death signal and in its own process
// group, optionally in a new mount namespace (Go then makes "/" recursively
// private in the child before exec).
func (s *Spawner) Start(cmd *exec.Cmd, newMountNamespace bool) error {
	attr := &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	if newMountNamespace {
		attr.Unshareflags = syscall.CLONE_NEWNS
	}
	cmd.SysProcAttr = attr
	done := make(chan error, 1)
	s.requests <- request{cmd: cmd, done: done}
	return <-done
}
