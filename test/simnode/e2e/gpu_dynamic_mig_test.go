package e2e

// DynamicMIG at e2e tier: upstream's gpu-test4 (testdata/upstream,
// unchanged) on a simulated DGX A100 whose GPUs run MIG mode on, with the
// plugin's DynamicMIG gate. The plugin publishes every profile x placement
// with counter sets; the real scheduler packs each pod's four MIG devices
// (2 x 1g.5gb, 2g.10gb, 3g.20gb: all eight memory slices) onto one A100 of
// its own; the plugin makes them at Prepare (the mock NVML's state file
// shows them at the allocated placements) and destroys them when the pods
// go.

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

const a100MigProfile = "a100-mig"

var (
	migDeviceName = regexp.MustCompile(`^gpu-(\d+)-mig-(.+)-(\d+)-(\d+)$`)
	migListLine   = regexp.MustCompile(`(?m)^  MIG (\S+)\s+Device\s+\d+: \(UUID: MIG-[0-9a-f-]+\)$`)
)

func TestGPUDynamicMIG(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	env := startGPUEnvironmentWithEnv(ctx, t, []corev1.EnvVar{{Name: "FEATURE_GATES", Value: "DynamicMIG=true"}},
		a100MigProfile)
	node := env.nodes.Nodes[0].Config.Name
	uuids := gpuUUIDsByMinor(t, env, node)

	// The plugin's start-up clean-up removed the profile's static instances.
	for minor, uuid := range uuids {
		if got := gpuInstancesOf(t, env, node, uuid); len(got) != 0 {
			t.Errorf("GPU %d (%s) still has instances %v after the plugin started", minor, uuid, got)
		}
	}

	spec := upstreamSpec(t, "gpu-test4.yaml")
	const ns = "gpu-test4"
	t.Cleanup(func() { _, _ = env.kubectl(context.Background(), "delete", "--wait=false", "-f", spec) })
	env.Kubectl(ctx, t, "apply", "-f", spec)
	pods := waitForPodsRunning(ctx, t, env, ns, "app=pod", 4)

	used := map[int]string{} // GPU minor -> pod
	for _, pod := range pods {
		if len(pod.Status.ResourceClaimStatuses) != 1 {
			t.Fatalf("pod %s: claim statuses %v", pod.Name, pod.Status.ResourceClaimStatuses)
		}
		claim, err := env.client.ResourceV1().ResourceClaims(ns).Get(ctx, *pod.Status.ResourceClaimStatuses[0].ResourceClaimName, metav1.GetOptions{})
		must(t, "claim", err)
		minors := map[int]bool{}
		var want []string
		for _, r := range claim.Status.Allocation.Devices.Results {
			m := migDeviceName.FindStringSubmatch(r.Device)
			if m == nil {
				t.Fatalf("pod %s: allocated %s, not a MIG device", pod.Name, r.Device)
			}
			minor, _ := strconv.Atoi(m[1])
			minors[minor] = true
			want = append(want, m[3]+"@"+m[4]) // GI profile id @ placement start
		}
		if len(minors) != 1 {
			t.Fatalf("pod %s: MIG devices on GPUs %v; its claim asks for one parent", pod.Name, minors)
		}
		for minor := range minors {
			if other, taken := used[minor]; taken {
				t.Errorf("pods %s and %s both got GPU %d, whose eight memory slices one pod fills", other, pod.Name, minor)
			}
			used[minor] = pod.Name
			sort.Strings(want)
			if got := gpuInstancesOf(t, env, node, uuids[minor]); fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("pod %s: GPU %d has instances %v, want the allocated %v", pod.Name, minor, got, want)
			}
		}
	}
	t.Logf("GPUs per pod: %v", used)

	// Each container's nvidia-smi -L lists its GPU and, under it, exactly
	// the MIG device of its request.
	for _, c := range []struct{ name, profile string }{
		{"ctr0", "1g.5gb"}, {"ctr1", "1g.5gb"}, {"ctr2", "2g.10gb"}, {"ctr3", "3g.20gb"},
	} {
		log := containerLog(ctx, t, env, ns, pods[0].Name, c.name, "(UUID: MIG-")
		lines := migListLine.FindAllStringSubmatch(log, -1)
		if len(lines) != 1 || lines[0][1] != c.profile {
			t.Errorf("pod %s container %s: nvidia-smi -L shows MIG devices %v, want one %s:\n%s",
				pods[0].Name, c.name, lines, c.profile, log)
		}
	}

	env.Kubectl(ctx, t, "delete", "-f", spec, "--wait=true", "--timeout=2m")
	for minor := range used {
		if got := gpuInstancesOf(t, env, node, uuids[minor]); len(got) != 0 {
			t.Errorf("GPU %d kept instances %v after its pod was deleted", minor, got)
		}
	}
}

// profileDevice is one GPU of a node's mock NVML profile.
type profileDevice struct {
	Minor int    `json:"minor"`
	UUID  string `json:"uuid"`
	PCI   struct {
		BusID string `json:"busId"` // NVML's form, "00000000:18:00.0"
	} `json:"pci"`
}

// profileDevices reads the node's mock NVML profile.
func profileDevices(t *testing.T, env *gpuEnvironment, node string) []profileDevice {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(env.node(t, node).Config.DriverRoot(), "mock-nvml", "profile.json"))
	must(t, "profile", err)
	var profile struct {
		Devices []profileDevice `json:"devices"`
	}
	must(t, "profile", json.Unmarshal(data, &profile))
	return profile.Devices
}

// gpuUUIDsByMinor reads the node's mock NVML profile: GPU minor -> UUID.
func gpuUUIDsByMinor(t *testing.T, env *gpuEnvironment, node string) map[int]string {
	t.Helper()
	out := map[int]string{}
	for _, d := range profileDevices(t, env, node) {
		out[d.Minor] = d.UUID
	}
	return out
}

// gpuInstancesOf lists a GPU's GPU instances in the node's mock NVML state
// file as "<profile id>@<start>", sorted.
func gpuInstancesOf(t *testing.T, env *gpuEnvironment, node, uuid string) []string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(env.node(t, node).Config.DriverRoot(), "mock-nvml", "state.json"))
	must(t, "state file", err)
	var state struct {
		GPUs map[string]struct {
			GpuInstances []struct {
				ProfileID int `json:"profileId"`
				Start     int `json:"start"`
			} `json:"gpuInstances"`
		} `json:"gpus"`
	}
	must(t, "state file", json.Unmarshal(data, &state))
	var out []string
	for _, gi := range state.GPUs[uuid].GpuInstances {
		out = append(out, fmt.Sprintf("%d@%d", gi.ProfileID, gi.Start))
	}
	sort.Strings(out)
	return out
}
