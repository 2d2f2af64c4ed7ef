package cri

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// TestMain lets this test binary play the simnode binary: the runtime
// re-executes itself (os.Executable) as container-init.
func TestMain(m *testing.M) {
	if len(os.Args) == 3 && os.Args[1] == InitCommand {
		err := RunInit(os.Args[2])
		fmt.Fprintln(os.Stderr, err)
		os.Exit(127)
	}
	os.Exit(m.Run())
}

// execFixture is a runtime with one running container: `sleep` with a
// hostPath volume at /data (holding the file "f"), FOO=bar in its
// environment and /data as its working folder.
type execFixture struct {
	r   *Runtime
	id  string
	vol string // the volume's folder on this machine
}

func startExecFixture(t *testing.T) *execFixture {
	t.Helper()
	if os.Getuid() != 0 {
		t.Skip("containers need mount namespaces: run as root")
	}
	if !hostHas("sleep") {
		t.Skip("no sleep on this machine")
	}
	node := t.TempDir()
	vol := filepath.Join(node, "vol")
	if err := os.MkdirAll(vol, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(vol, "f"), []byte("in-volume\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	r, sandbox, sb := runTestSandbox(t, Options{NodeName: "n", NodeDir: node, NodeIP: "127.0.0.1", PodIPPrefix: "10.0.0",
		ContainersDir: filepath.Join(node, "containers")})
	ctx := context.Background()
	config := &runtimeapi.ContainerConfig{
		Metadata:   &runtimeapi.ContainerMetadata{Name: "c"},
		Image:      &runtimeapi.ImageSpec{Image: "busybox"},
		Command:    []string{"sleep", "600"},
		WorkingDir: "/data",
		Envs:       []*runtimeapi.KeyValue{{Key: "FOO", Value: []byte("bar")}},
		Mounts:     []*runtimeapi.Mount{{ContainerPath: "/data", HostPath: vol}},
		LogPath:    "c/0.log",
	}
	cc, err := r.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: sb.PodSandboxId, Config: config, SandboxConfig: sandbox})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: cc.ContainerId}); err != nil {
		t.Fatal(err)
	}
	f := &execFixture{r: r, id: cc.ContainerId, vol: vol}
	// The runtime holds an exec until container-init has built the root.
	if resp, err := f.exec(t, 30, "cat", "/data/f"); err != nil || resp.ExitCode != 0 {
		t.Fatalf("first exec: %v %+v", err, resp)
	}
	return f
}

func (f *execFixture) exec(t *testing.T, timeout int64, cmd ...string) (*runtimeapi.ExecSyncResponse, error) {
	t.Helper()
	return f.r.ExecSync(context.Background(), &runtimeapi.ExecSyncRequest{ContainerId: f.id, Cmd: cmd, Timeout: timeout})
}

// An exec sees what the container sees: its volumes, environment and
// working folder; its exit code and both streams come back.
func TestExecSyncSeesContainer(t *testing.T) {
	f := startExecFixture(t)
	resp, err := f.exec(t, 10, "sh", "-c", `cat f; echo "FOO=$FOO"; pwd; echo oops >&2; exit 3`)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(resp.Stdout), "in-volume\nFOO=bar\n/data\n"; got != want {
		t.Errorf("stdout %q, want %q", got, want)
	}
	if got := string(resp.Stderr); got != "oops\n" {
		t.Errorf("stderr %q, want %q", got, "oops\n")
	}
	if resp.ExitCode != 3 {
		t.Errorf("exit code %d, want 3", resp.ExitCode)
	}
	resp, err = f.exec(t, 10, "no-such-program")
	if err == nil && resp.ExitCode == 0 {
		t.Errorf("exec of a missing program succeeded: %+v", resp)
	}
}

// A command that outlives its timeout is killed and the call fails.
func TestExecSyncTimeout(t *testing.T) {
	f := startExecFixture(t)
	start := time.Now()
	_, err := f.exec(t, 1, "sleep", "60")
	if err == nil || !strings.Contains(err.Error(), "timed out") {
		t.Fatalf("exec of sleep 60 with timeout 1 s: %v, want a timeout error", err)
	}
	t.Logf("timed out after %v", time.Since(start))
}

// Exec into a container whose process has ended fails, as with runc.
func TestExecSyncStoppedContainer(t *testing.T) {
	f := startExecFixture(t)
	if _, err := f.r.StopContainer(context.Background(), &runtimeapi.StopContainerRequest{ContainerId: f.id, Timeout: 5}); err != nil {
		t.Fatal(err)
	}
	resp, err := f.exec(t, 5, "true")
	if err == nil {
		t.Fatalf("exec into a stopped container succeeded: %+v", resp)
	}
	t.Logf("error: %v", err)
}

// TestExecSyncCost prints the wall time and CPU time (this process plus
// its reaped children) of one exec of `true`; figures only, no assertion.
func TestExecSyncCost(t *testing.T) {
	f := startExecFixture(t)
	const n = 50
	var self0, kids0 syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &self0)
	_ = syscall.Getrusage(syscall.RUSAGE_CHILDREN, &kids0)
	start := time.Now()
	for i := 0; i < n; i++ {
		resp, err := f.exec(t, 10, "true")
		if err != nil || resp.ExitCode != 0 {
			t.Fatalf("exec %d: %v %+v", i, err, resp)
		}
	}
	wall := time.Since(start)
	var self1, kids1 syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &self1)
	_ = syscall.Getrusage(syscall.RUSAGE_CHILDREN, &kids1)
	cpu := func(a, b syscall.Rusage) time.Duration {
		return time.Duration(b.Utime.Nano()-a.Utime.Nano()) + time.Duration(b.Stime.Nano()-a.Stime.Nano())
	}
	t.Logf("one exec of `true`, mean of %d: wall %v, CPU %v (runtime %v + exec'd processes %v)", n,
		wall/n, (cpu(self0, self1)+cpu(kids0, kids1))/n, cpu(self0, self1)/n, cpu(kids0, kids1)/n)
}

// An exec still running when its container's process ends is killed with
// it, and the call fails.
func TestExecSyncEndsWithContainer(t *testing.T) {
	f := startExecFixture(t)
	// The exec'd shell writes into a FIFO in the volume once it runs; the
	// test's read returns then.
	fifo := filepath.Join(f.vol, "started")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	result := make(chan error, 1)
	go func() {
		_, err := f.exec(t, 120, "sh", "-c", "echo up > /data/started; exec sleep 601")
		result <- err
	}()
	if _, err := os.ReadFile(fifo); err != nil {
		t.Fatal(err)
	}
	if _, err := f.r.StopContainer(context.Background(), &runtimeapi.StopContainerRequest{ContainerId: f.id, Timeout: 5}); err != nil {
		t.Fatal(err)
	}
	err := <-result
	if err == nil || !strings.Contains(err.Error(), "exited") {
		t.Fatalf("exec of sleep 601 when its container stopped: %v, want a container-exited error", err)
	}
}

// runTestSandbox starts a runtime with opts, stopped with the test, and runs
// pod sandbox ns/p in it, logging below opts.NodeDir/logs.
func runTestSandbox(t *testing.T, opts Options) (*Runtime, *runtimeapi.PodSandboxConfig, *runtimeapi.RunPodSandboxResponse) {
	t.Helper()
	r, err := NewRuntime(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Stop)
	sandbox := &runtimeapi.PodSandboxConfig{
		Metadata:     &runtimeapi.PodSandboxMetadata{Name: "p", Namespace: "ns", Uid: "u"},
		LogDirectory: filepath.Join(opts.NodeDir, "logs"),
	}
	sb, err := r.RunPodSandbox(context.Background(), &runtimeapi.RunPodSandboxRequest{Config: sandbox})
	if err != nil {
		t.Fatal(err)
	}
	return r, sandbox, sb
}
