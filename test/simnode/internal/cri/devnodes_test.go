package cri

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// The majors of make-driver-root's proc/devices (test/mocknvml): what a
// driver root's real character devices carry.
const (
	testFrontendMajor = 195 // nvidia-frontend
	testCapsMajor     = 235 // nvidia-caps
	testUVMMajor      = 508 // nvidia-uvm
)

// A driver root's device nodes are real character devices (issue #28 point
// 2): a CDI spec that names them without numbers gets the node file's type,
// major and minor in the view (no -1), a fully specified node that the node
// lacks (a MIG capability) keeps its numbers, and inside the container each
// is a character device with those numbers: the node's own file bound in,
// or one the runtime made with mknod.
func TestDeviceNodesAreCharacterDevicesInViewAndContainer(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("mknod and containers need root")
	}
	if !hostHas("sleep") || !hostHas("stat") {
		t.Skip("no sleep or stat on this machine")
	}
	taken, err := hostCharMajors()
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []int64{testFrontendMajor, testCapsMajor, testUVMMajor} {
		if name, ok := taken[m]; ok {
			t.Skipf("major %d is registered on this machine (%s): no mock node may carry it", m, name)
		}
	}
	node := t.TempDir()
	nodes := map[string][2]int64{
		"run/nvidia/driver/dev/nvidia3":    {testFrontendMajor, 3},
		"run/nvidia/driver/dev/nvidiactl":  {testFrontendMajor, 255},
		"run/nvidia/driver/dev/nvidia-uvm": {testUVMMajor, 0},
	}
	for p, n := range nodes {
		full := filepath.Join(node, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := MakeCharDevice(full, n[0], n[1], 0o666); err != nil {
			t.Fatal(err)
		}
	}
	cdiDir := filepath.Join(node, "var/run/cdi")
	spec := fmt.Sprintf(`cdiVersion: 0.6.0
kind: k8s.gpu.nvidia.com/claim
containerEdits:
  deviceNodes:
  - path: /dev/nvidiactl
    hostPath: /run/nvidia/driver/dev/nvidiactl
  - path: /dev/nvidia-uvm
    hostPath: /run/nvidia/driver/dev/nvidia-uvm
devices:
- name: uid-gpu-3
  containerEdits:
    deviceNodes:
    - path: /dev/nvidia3
      hostPath: /run/nvidia/driver/dev/nvidia3
    - path: /dev/nvidia-caps/nvidia-cap408
      type: c
      major: %d
      minor: 408
      fileMode: 292
`, testCapsMajor)
	if err := os.MkdirAll(cdiDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(cdiDir, "k8s.gpu.nvidia.com-claim_uid.yaml"), []byte(spec), 0o644); err != nil {
		t.Fatal(err)
	}
	r, sandbox, sb := runTestSandbox(t, Options{NodeName: "n", NodeDir: node, NodeIP: "127.0.0.1", CDIDirs: []string{cdiDir},
		ContainersDir: filepath.Join(node, "containers")})
	ctx := context.Background()
	config := &runtimeapi.ContainerConfig{
		Metadata:   &runtimeapi.ContainerMetadata{Name: "c"},
		Image:      &runtimeapi.ImageSpec{Image: "busybox"},
		Command:    []string{"sleep", "600"},
		CDIDevices: []*runtimeapi.CDIDevice{{Name: "k8s.gpu.nvidia.com/claim=uid-gpu-3"}},
		LogPath:    "c/0.log",
	}
	cc, err := r.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: sb.PodSandboxId, Config: config, SandboxConfig: sandbox})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		fmt.Sprintf("/dev/nvidia-caps/nvidia-cap408 c %d:408", testCapsMajor),
		fmt.Sprintf("/dev/nvidia-uvm c %d:0", testUVMMajor),
		fmt.Sprintf("/dev/nvidia3 c %d:3", testFrontendMajor),
		fmt.Sprintf("/dev/nvidiactl c %d:255", testFrontendMajor),
	}
	view, err := ReadView(ViewPath(filepath.Join(node, "views"), "ns", "p", "c"))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, d := range view.Devices {
		got = append(got, fmt.Sprintf("%s %s %d:%d", d.Path, d.Type, d.Major, d.Minor))
	}
	sort.Strings(got)
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("view's device nodes:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}

	if _, err := r.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: cc.ContainerId}); err != nil {
		t.Fatal(err)
	}
	paths := []string{"/dev/nvidia-caps/nvidia-cap408", "/dev/nvidia-uvm", "/dev/nvidia3", "/dev/nvidiactl"}
	var resp *runtimeapi.ExecSyncResponse
	deadline := time.Now().Add(30 * time.Second)
	for {
		// %t:%T: major and minor in hex.
		resp, err = r.ExecSync(ctx, &runtimeapi.ExecSyncRequest{ContainerId: cc.ContainerId,
			Cmd: append([]string{"stat", "-c", "%n %F %t:%T"}, paths...), Timeout: 10})
		if err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil || resp.ExitCode != 0 {
		t.Fatalf("stat in the container: %v %+v", err, resp)
	}
	var wantStat []string
	for _, w := range want {
		var path string
		var major, minor int
		if _, err := fmt.Sscanf(strings.Replace(w, ":", " ", 1), "%s c %d %d", &path, &major, &minor); err != nil {
			t.Fatal(err)
		}
		wantStat = append(wantStat, fmt.Sprintf("%s character special file %x:%x", path, major, minor))
	}
	if got := strings.TrimSpace(string(resp.Stdout)); got != strings.Join(wantStat, "\n") {
		t.Errorf("in the container:\n%s\nwant:\n%s", got, strings.Join(wantStat, "\n"))
	}
	// Opening one reaches no driver of this machine.
	resp, err = r.ExecSync(ctx, &runtimeapi.ExecSyncRequest{ContainerId: cc.ContainerId,
		Cmd: []string{"sh", "-c", "cat /dev/nvidia3 2>&1; true"}, Timeout: 10})
	if err != nil || !strings.Contains(string(resp.Stdout), "No such device") {
		t.Errorf("opening /dev/nvidia3 in the container: %v %+v, want ENXIO (no such device or address)", err, resp)
	}
}

// A major this machine registers is refused: the node would open a real
// driver. (Major 1 is mem on every Linux.)
func TestMakeCharDeviceRefusesAHostMajor(t *testing.T) {
	taken, err := hostCharMajors()
	if err != nil {
		t.Fatal(err)
	}
	if taken[1] == "" {
		t.Skipf("major 1 is not registered here: %v", taken)
	}
	p := filepath.Join(t.TempDir(), "null")
	err = MakeCharDevice(p, 1, 3, 0o666)
	if err == nil || !strings.Contains(err.Error(), "registered on this machine") {
		t.Fatalf("MakeCharDevice c 1:3: %v, want a refusal", err)
	}
	var st unix.Stat_t
	if unix.Lstat(p, &st) == nil {
		t.Fatalf("%s was made", p)
	}
}
