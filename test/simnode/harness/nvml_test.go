package harness

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"nvdra.local/test/simnode/nodeconfig"
)

// gpuTestCluster is a Cluster of nodes that run nothing: a GPU node per
// profile (its driver root holding only mock-nvml/profile.json, as
// make-driver-root copies it) and one node without GPUs.
func gpuTestCluster(t *testing.T, profiles map[string]string) *Cluster {
	t.Helper()
	c := &Cluster{}
	for name, profile := range profiles {
		cfg := nodeconfig.Config{Name: name, Dir: filepath.Join(t.TempDir(), name), GPUProfile: profile}
		src, err := ProfilePath(profile)
		if err != nil {
			t.Fatal(err)
		}
		data, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		dir := filepath.Join(cfg.DriverRoot(), "mock-nvml")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "profile.json"), data, 0o644); err != nil {
			t.Fatal(err)
		}
		c.Nodes = append(c.Nodes, &Node{Config: cfg})
	}
	c.Nodes = append(c.Nodes, &Node{Config: nodeconfig.Config{Name: "cpu", Dir: t.TempDir()}})
	return c
}

func stateDir(t *testing.T, c *Cluster, node string) string {
	t.Helper()
	n, err := c.Node(node)
	if err != nil {
		t.Fatal(err)
	}
	dir, err := n.MockNVMLStateDir()
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

func readJSONLines(t *testing.T, path string) []map[string]any {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSuffix(string(data), "\n"), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("%s: line %q: %v", path, line, err)
		}
		out = append(out, m)
	}
	return out
}

// The GPU fault kinds: GPU by index or UUID, each appended to the node's
// events file as the mock reads it; wrong arguments are refused with the
// usage.
func TestGPUFaultEvents(t *testing.T) {
	c := gpuTestCluster(t, map[string]string{"gb": "gb200-tray"})
	n, _ := c.Node("gb")
	gpus, err := n.ProfileGPUs()
	if err != nil {
		t.Fatal(err)
	}
	if len(gpus) != 4 || !gpus[0].HasFabric || gpus[1].UUID == gpus[0].UUID {
		t.Fatalf("ProfileGPUs = %+v", gpus)
	}
	ctx := context.Background()
	for _, f := range []struct {
		kind string
		args []string
	}{
		{FaultXid, []string{"1", "79"}},
		{FaultGPULost, []string{gpus[2].UUID}},
		{FaultGPURecovered, []string{"2"}},
	} {
		if what, err := c.Fault(ctx, f.kind, "gb", f.args); err != nil {
			t.Fatalf("Fault(%s, %v): %v", f.kind, f.args, err)
		} else if what == "" {
			t.Errorf("Fault(%s) says nothing", f.kind)
		}
	}
	if err := c.InjectNVMLEvent("gb", gpus[3].UUID, "double_bit_ecc", 0); err != nil {
		t.Fatal(err)
	}
	got := readJSONLines(t, filepath.Join(stateDir(t, c, "gb"), "events.jsonl"))
	want := []map[string]any{
		{"uuid": gpus[1].UUID, "type": "xid", "data": 79.0},
		{"uuid": gpus[2].UUID, "type": "gpu_lost", "data": 0.0},
		{"uuid": gpus[2].UUID, "type": "gpu_recovered", "data": 0.0},
		{"uuid": gpus[3].UUID, "type": "double_bit_ecc", "data": 0.0},
	}
	if len(got) != len(want) {
		t.Fatalf("events.jsonl = %v, want %v", got, want)
	}
	for i := range want {
		for k, v := range want[i] {
			if got[i][k] != v {
				t.Errorf("line %d: %s = %v, want %v", i, k, got[i][k], v)
			}
		}
	}

	for _, bad := range []struct {
		kind, node string
		args       []string
		want       string
	}{
		{FaultXid, "gb", []string{"1"}, "xid wants GPU XID"},
		{FaultXid, "gb", []string{"1", "x"}, "want a number"},
		{FaultGPULost, "gb", nil, "gpu-lost wants GPU"},
		{FaultGPULost, "gb", []string{"4"}, "GPUs 0-3, not 4"},
		{FaultGPULost, "gb", []string{"GPU-nope"}, "no GPU \"GPU-nope\""},
		{FaultGPULost, "cpu", []string{"0"}, "no GPUs"},
		{FaultGPULost, "missing", []string{"0"}, "no such node"},
		{"melt", "gb", nil, "gpu-lost, gpu-recovered"},
	} {
		_, err := c.Fault(ctx, bad.kind, bad.node, bad.args)
		if err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("Fault(%s, %s, %v) = %v, want an error with %q", bad.kind, bad.node, bad.args, err, bad.want)
		}
	}
	if err := c.InjectNVMLEvent("cpu", gpus[0].UUID, NVMLEventXid, 13); !errors.Is(err, ErrNoGPUs) {
		t.Errorf("InjectNVMLEvent on a node without GPUs = %v, want ErrNoGPUs", err)
	}
}

// fabric-unhealthy / fabric-healthy change only the GPU's health in the
// state file's fabric map; the rest of the file stays; a GPU without fabric
// is refused.
func TestGPUFaultFabricHealth(t *testing.T) {
	c := gpuTestCluster(t, map[string]string{"gb": "gb200-tray", "l40s": "l40s"})
	n, _ := c.Node("gb")
	gpus, _ := n.ProfileGPUs()
	dir := stateDir(t, c, "gb")
	statePath := filepath.Join(dir, "state.json")
	ctx := context.Background()

	// No state file yet: one is made that the mock accepts.
	if _, err := c.Fault(ctx, FaultFabricUnhealthy, "gb", []string{"0"}); err != nil {
		t.Fatal(err)
	}
	var fresh struct {
		Version int                                   `json:"version"`
		GPUs    map[string]any                        `json:"gpus"`
		Fabric  map[string]map[string]json.RawMessage `json:"fabric"`
	}
	data, _ := os.ReadFile(statePath)
	if err := json.Unmarshal(data, &fresh); err != nil || fresh.Version != 1 || fresh.GPUs == nil {
		t.Fatalf("state file %s (%v)", data, err)
	}

	before := `{"version": 1, "gpus": {}, "computePolicy": {"GPU-x": {"computeMode": 2, "timeSlice": 0}},
  "fabric": {"` + gpus[1].UUID + `": {"state": "in_progress", "status": 0}}}`
	if err := os.WriteFile(statePath, []byte(before), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Fault(ctx, FaultFabricUnhealthy, "gb", []string{gpus[1].UUID}); err != nil {
		t.Fatal(err)
	}
	var state struct {
		ComputePolicy map[string]map[string]int `json:"computePolicy"`
		Fabric        map[string]map[string]any `json:"fabric"`
	}
	read := func() {
		data, err := os.ReadFile(statePath)
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(data, &state); err != nil {
			t.Fatal(err)
		}
	}
	read()
	entry := state.Fabric[gpus[1].UUID]
	if entry["healthSummary"] != 2.0 || entry["healthMask"] != 16.0 || entry["state"] != "in_progress" {
		t.Errorf("after fabric-unhealthy: %v", entry)
	}
	if state.ComputePolicy["GPU-x"]["computeMode"] != 2 {
		t.Errorf("computePolicy lost: %v", state.ComputePolicy)
	}
	if _, err := c.Fault(ctx, FaultFabricHealthy, "gb", []string{"1"}); err != nil {
		t.Fatal(err)
	}
	read()
	if entry := state.Fabric[gpus[1].UUID]; entry["healthSummary"] != 1.0 || entry["healthMask"] != 0.0 {
		t.Errorf("after fabric-healthy: %v", entry)
	}
	if entries, _ := filepath.Glob(statePath + ".tmp.*"); len(entries) != 0 {
		t.Errorf("temporary files left: %v", entries)
	}

	if _, err := c.Fault(ctx, FaultFabricUnhealthy, "l40s", []string{"0"}); err == nil || !strings.Contains(err.Error(), "no fabric") {
		t.Errorf("fabric-unhealthy on an L40S = %v, want a no-fabric error", err)
	}
}

// WaitNVMLEventRegistration returns once a live process registered the
// GPU; lines of exited processes and of other GPUs do not count.
func TestWaitNVMLEventRegistration(t *testing.T) {
	dir := t.TempDir()
	exited := exec.Command("true")
	if err := exited.Run(); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "event-registrations.jsonl")
	appendLine := func(line string) {
		f, err := os.OpenFile(file, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.WriteString(line); err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
	line := func(pid int, uuid string) string {
		data, _ := json.Marshal(NVMLEventRegistration{Pid: pid, UUID: uuid, Types: 8})
		return string(data) + "\n"
	}
	appendLine(line(exited.Process.Pid, "GPU-a"))
	appendLine(line(os.Getpid(), "GPU-b"))
	appendLine(`{"pid": 1, "uuid": "GPU-c"`) // unfinished: being written

	short, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if err := WaitNVMLEventRegistration(short, dir, "GPU-a"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("with only an exited process's line: %v, want a deadline error", err)
	}
	regs, err := ReadNVMLEventRegistrations(dir)
	if err != nil || len(regs) != 2 {
		t.Fatalf("ReadNVMLEventRegistrations = %v, %v; want the 2 complete lines", regs, err)
	}

	ctx, cancel2 := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel2()
	done := make(chan error, 1)
	go func() { done <- WaitNVMLEventRegistration(ctx, dir, "GPU-a") }()
	// Completes the unfinished line, with a live process's line after it.
	appendLine(`, "types": 8}` + "\n" + line(os.Getpid(), "GPU-a"))
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if err := WaitNVMLEventRegistration(ctx, dir, "GPU-b"); err != nil {
		t.Fatal(err)
	}
}
