package e2e

// Fabric Manager partitions at e2e tier (gate FabricManagerPartitioning): a
// simulated HGX H100 8-GPU node (profile hgx-h100: four NVSwitches, FM in
// shared NVSwitch multi-tenancy mode, the mock libnvfm in its driver root)
// whose plugin also has PassthroughSupport. Upstream's
// demo/specs/fabric-manager-partitioning (testdata/upstream, unchanged) asks
// for two VFIO GPUs of one size-2 partition: the real scheduler picks them
// by `matchAttribute: gpu.nvidia.com/partition2`, Prepare activates exactly
// that partition in the mock FM and binds the GPUs to vfio-pci, and deleting
// the spec deactivates it and gives the GPUs back to nvidia.

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

const (
	hgxH100Profile = "hgx-h100"
	// Upstream's spec: no namespace (default), its pod and template names.
	fmNamespace = "default"
	fmPod       = "fm-partition-pod"
	fmTemplate  = "fm-partition-2gpu"
)

func TestGPUFabricManagerPartitioning(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	env := startGPUEnvironmentWithEnv(ctx, t, []corev1.EnvVar{
		{Name: "FEATURE_GATES", Value: "FabricManagerPartitioning=true,PassthroughSupport=true"},
		// The NVSwitch folder, the mock sysfs and /dev/vfio are in the driver root.
		{Name: "HOST_ROOT", Value: containerDriverRoot},
		// The mock FM listens on 127.0.0.1:6666 by default.
		{Name: "NVIDIA_FABRICMANAGER_ADDRESS", Value: "127.0.0.1"},
	}, hgxH100Profile)
	node := env.nodes.Nodes[0].Config.Name
	profile := readFabricProfile(t, env, node)

	// 1. gpuModuleID and partition1/2/4/8 on every full GPU and VFIO device,
	// as the profile's partition table gives them for the GPU at that address.
	checked := map[string]bool{}
	for _, d := range gpuAndVfioDevices(ctx, t, env, node) {
		bus := stringAttr(d, "resource.kubernetes.io/pciBusID")
		gpu, ok := profile.byBusID()[bus]
		if !ok {
			t.Errorf("%s: pciBusID %q is no GPU of the profile", d.Name, bus)
			continue
		}
		want := map[string]int64{"gpuModuleID": int64(gpu.ModuleID)}
		for size, id := range profile.partitionsOf(gpu.ModuleID) {
			want[fmt.Sprintf("partition%d", size)] = int64(id)
		}
		if len(want) != 5 {
			t.Fatalf("the profile's table gives module %d partitions of sizes %v, want 1, 2, 4 and 8", gpu.ModuleID, want)
		}
		for name, value := range want {
			if got, ok := intAttr(d, name); !ok || got != value {
				t.Errorf("%s (module %d): %s = %d (published: %t), want %d", d.Name, gpu.ModuleID, name, got, ok, value)
			}
		}
		checked[d.Name] = true
	}
	for i := range profile.Devices {
		for _, name := range []string{fmt.Sprintf("gpu-%d", i), fmt.Sprintf("gpu-vfio-%d", i)} {
			if !checked[name] {
				t.Errorf("%s is not published; checked: %v", name, sortedKeys(checked))
			}
		}
	}
	// Two values by hand (the comment of hgx-h100.json): GPU 2 is module 3,
	// in partitions 9 (itself), 3 (modules 1,3), 1 (modules 1-4) and 0 (all).
	for _, d := range gpuAndVfioDevices(ctx, t, env, node) {
		if d.Name == "gpu-2" || d.Name == "gpu-vfio-2" {
			p1, _ := intAttr(d, "partition1")
			p2, _ := intAttr(d, "partition2")
			p4, _ := intAttr(d, "partition4")
			p8, _ := intAttr(d, "partition8")
			if p1 != 9 || p2 != 3 || p4 != 1 || p8 != 0 {
				t.Errorf("%s: partition1/2/4/8 = %d/%d/%d/%d, want 9/3/1/0", d.Name, p1, p2, p4, p8)
			}
		}
	}
	if got := activePartitions(t, env, node); len(got) != 0 {
		t.Fatalf("partitions active before any claim: %v", got)
	}
	if t.Failed() {
		t.FailNow()
	}

	// 2. Upstream's spec, unchanged (kubectl applies the folder's two files).
	spec := upstreamSpec(t, "fabric-manager-partitioning")
	t.Cleanup(func() { _, _ = env.kubectl(context.Background(), "delete", "--wait=false", "-f", spec) })
	env.Kubectl(ctx, t, "apply", "-f", spec)
	first := checkPartitionClaim(ctx, t, env, profile, waitForPodNamed(ctx, t, env, fmNamespace, fmPod))
	if got := activePartitions(t, env, node); !slices.Equal(got, []int{first.partition}) {
		t.Errorf("active partitions with %s running: %v, want exactly [%d]", fmPod, got, first.partition)
	}
	checkNvidiaSMIHides(t, env, node, profile, first.busIDs)

	// 4. A second pod on the same template at the same time: the other GPUs
	// of a disjoint size-2 partition, both partitions active.
	const second = "fm-partition-pod-2"
	fabricPod(ctx, t, env, fmNamespace, second, "", fmTemplate)
	other := checkPartitionClaim(ctx, t, env, profile, waitForPodNamed(ctx, t, env, fmNamespace, second))
	if other.partition == first.partition || slices.ContainsFunc(other.busIDs, func(b string) bool { return slices.Contains(first.busIDs, b) }) {
		t.Errorf("two claims share: partitions %d and %d, GPUs %v and %v", first.partition, other.partition, first.busIDs, other.busIDs)
	}
	want := []int{first.partition, other.partition}
	slices.Sort(want)
	if got := activePartitions(t, env, node); !slices.Equal(got, want) {
		t.Errorf("active partitions with both pods running: %v, want %v", got, want)
	}
	checkNvidiaSMIHides(t, env, node, profile, append(slices.Clone(first.busIDs), other.busIDs...))

	// The second pod goes: its partition only is deactivated, its GPUs are
	// back on nvidia, upstream's pod keeps its own.
	must(t, "delete "+second, env.client.CoreV1().Pods(fmNamespace).Delete(ctx, second, metav1.DeleteOptions{}))
	waitForActivePartitions(ctx, t, env, node, []int{first.partition})
	checkPCIDrivers(t, env, node, other.busIDs, "nvidia")
	checkPCIDrivers(t, env, node, first.busIDs, "vfio-pci")

	// 3. Deleting upstream's spec: no partition active, every GPU back on
	// nvidia and published as a full GPU again.
	env.Kubectl(ctx, t, "delete", "-f", spec, "--wait=true", "--timeout=2m")
	waitForActivePartitions(ctx, t, env, node, nil)
	checkPCIDrivers(t, env, node, first.busIDs, "nvidia")
	waitForPublished(ctx, t, env, node, "every full GPU back once the pods are gone", func(devices map[string]bool) bool {
		for i := range profile.Devices {
			if !devices[fmt.Sprintf("gpu-%d", i)] {
				return false
			}
		}
		return true
	})
	checkNvidiaSMIHides(t, env, node, profile, nil)
}

// fabricProfile is what the test reads of the node's mock NVML profile.
type fabricProfile struct {
	Devices []struct {
		Minor    int    `json:"minor"`
		UUID     string `json:"uuid"`
		ModuleID int    `json:"moduleId"`
		PCI      struct {
			BusID string `json:"busId"`
		} `json:"pci"`
	} `json:"devices"`
	FabricManager struct {
		Partitions []struct {
			ID   int   `json:"id"`
			GPUs []int `json:"gpus"`
		} `json:"partitions"`
	} `json:"fabricManager"`
}

func readFabricProfile(t *testing.T, env *gpuEnvironment, node string) fabricProfile {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(env.node(t, node).Config.DriverRoot(), "mock-nvml", "profile.json"))
	must(t, "profile", err)
	var p fabricProfile
	must(t, "profile", json.Unmarshal(data, &p))
	if len(p.Devices) != 8 || len(p.FabricManager.Partitions) == 0 {
		t.Fatalf("profile %s: %d GPUs, %d FM partitions; want an HGX H100 8-GPU with partitions", hgxH100Profile, len(p.Devices), len(p.FabricManager.Partitions))
	}
	return p
}

// gpuOf is one GPU of the profile.
type gpuOf struct {
	Minor    int
	UUID     string
	ModuleID int
}

// byBusID: the profile's GPUs by PCI address as sysfs and the slice's
// pciBusID name it ("00000000:2A:00.0" -> "0000:2a:00.0").
func (p fabricProfile) byBusID() map[string]gpuOf {
	out := map[string]gpuOf{}
	for _, d := range p.Devices {
		bus := strings.ToLower(d.PCI.BusID)
		if len(bus) == len("00000000:18:00.0") {
			bus = bus[4:]
		}
		out[bus] = gpuOf{Minor: d.Minor, UUID: d.UUID, ModuleID: d.ModuleID}
	}
	return out
}

// partitionsOf: partition size -> id, for the partitions holding `module`.
func (p fabricProfile) partitionsOf(module int) map[int]int {
	out := map[int]int{}
	for _, part := range p.FabricManager.Partitions {
		if slices.Contains(part.GPUs, module) {
			out[len(part.GPUs)] = part.ID
		}
	}
	return out
}

// exactly: the id of the partition made of exactly `modules`, or -1.
func (p fabricProfile) exactly(modules []int) int {
	want := slices.Sorted(slices.Values(modules))
	for _, part := range p.FabricManager.Partitions {
		if slices.Equal(slices.Sorted(slices.Values(part.GPUs)), want) {
			return part.ID
		}
	}
	return -1
}

// gpuAndVfioDevices lists the node's published gpu-<n> and gpu-vfio-<n>.
func gpuAndVfioDevices(ctx context.Context, t *testing.T, env *gpuEnvironment, node string) []resourceapi.Device {
	t.Helper()
	var out []resourceapi.Device
	for _, s := range gpuSlices(ctx, t, env, node) {
		for _, d := range s.Spec.Devices {
			if strings.HasPrefix(d.Name, "gpu-") && !strings.Contains(d.Name, "-mig-") {
				out = append(out, d)
			}
		}
	}
	return out
}

// intAttr reads an int attribute, unqualified or under gpu.nvidia.com/.
func intAttr(d resourceapi.Device, name string) (int64, bool) {
	for _, key := range []string{name, gpuDriverName + "/" + name} {
		if a, ok := d.Attributes[resourceapi.QualifiedName(key)]; ok && a.IntValue != nil {
			return *a.IntValue, true
		}
	}
	return 0, false
}

func stringAttr(d resourceapi.Device, name string) string {
	if a, ok := d.Attributes[resourceapi.QualifiedName(name)]; ok && a.StringValue != nil {
		return *a.StringValue
	}
	return ""
}

// partitionClaim is what a running pod's 2-GPU claim got.
type partitionClaim struct {
	partition int      // the size-2 partition of its GPUs
	busIDs    []string // its GPUs, sorted
}

// checkPartitionClaim checks that the pod's one claim got two VFIO devices
// with equal partition2 values, that the value is the partition of exactly
// those GPUs' modules, and that both GPUs are on vfio-pci.
func checkPartitionClaim(ctx context.Context, t *testing.T, env *gpuEnvironment, profile fabricProfile, pod corev1.Pod) partitionClaim {
	t.Helper()
	if len(pod.Status.ResourceClaimStatuses) != 1 || pod.Status.ResourceClaimStatuses[0].ResourceClaimName == nil {
		t.Fatalf("pod %s: claim statuses %v", pod.Name, pod.Status.ResourceClaimStatuses)
	}
	claim, err := env.client.ResourceV1().ResourceClaims(pod.Namespace).Get(ctx, *pod.Status.ResourceClaimStatuses[0].ResourceClaimName, metav1.GetOptions{})
	must(t, "claim of "+pod.Name, err)
	results := claim.Status.Allocation.Devices.Results
	published := map[string]resourceapi.Device{}
	for _, d := range gpuAndVfioDevices(ctx, t, env, pod.Spec.NodeName) {
		published[d.Name] = d
	}
	var out partitionClaim
	var modules []int
	partition2 := map[int64]bool{}
	for _, r := range results {
		d, ok := published[r.Device]
		if !strings.HasPrefix(r.Device, "gpu-vfio-") || !ok {
			t.Fatalf("pod %s: allocated %s (published: %t), want gpu-vfio-<n>", pod.Name, r.Device, ok)
		}
		p2, _ := intAttr(d, "partition2")
		partition2[p2] = true
		bus := stringAttr(d, "resource.kubernetes.io/pciBusID")
		out.busIDs = append(out.busIDs, bus)
		modules = append(modules, profile.byBusID()[bus].ModuleID)
	}
	slices.Sort(out.busIDs)
	if len(results) != 2 || len(partition2) != 1 {
		t.Fatalf("pod %s: allocated %v with partition2 values %v; want 2 VFIO devices of one partition", pod.Name, results, sortedIntKeys(partition2))
	}
	for p := range partition2 {
		out.partition = int(p)
	}
	if got := profile.exactly(modules); got != out.partition {
		t.Errorf("pod %s: GPUs of modules %v are partition %d in the profile, partition2 says %d", pod.Name, modules, got, out.partition)
	}
	checkPCIDrivers(t, env, pod.Spec.NodeName, out.busIDs, "vfio-pci")
	t.Logf("pod %s: %v, GPUs %v (modules %v), partition %d", pod.Name, resultDevices(results), out.busIDs, modules, out.partition)
	return out
}

func resultDevices(results []resourceapi.DeviceRequestAllocationResult) []string {
	var out []string
	for _, r := range results {
		out = append(out, r.Device)
	}
	return out
}

func sortedIntKeys(m map[int64]bool) []int64 {
	return slices.Sorted(maps.Keys(m))
}

func checkPCIDrivers(t *testing.T, env *gpuEnvironment, node string, busIDs []string, want string) {
	t.Helper()
	for _, bus := range busIDs {
		if got := pciDriverOf(t, env, node, bus); got != want {
			t.Errorf("GPU %s is on driver %q, want %s", bus, got, want)
		}
	}
}

// fmStatePath is the mock Fabric Manager's state file in the node's driver root.
func fmStatePath(t *testing.T, env *gpuEnvironment, node string) string {
	return filepath.Join(env.node(t, node).Config.DriverRoot(), "mock-nvml", "fabric-manager.json")
}

// parseActivePartitions reads activePartitions (sorted) from the state
// file's content; an absent file is FM's defaults, none active.
func parseActivePartitions(data []byte) ([]int, error) {
	var state struct {
		ActivePartitions []int `json:"activePartitions"`
	}
	if err := json.Unmarshal(data, &state); err != nil {
		return nil, err
	}
	slices.Sort(state.ActivePartitions)
	return state.ActivePartitions, nil
}

func activePartitions(t *testing.T, env *gpuEnvironment, node string) []int {
	t.Helper()
	data, err := os.ReadFile(fmStatePath(t, env, node))
	if os.IsNotExist(err) {
		return nil
	}
	must(t, "FM state", err)
	active, err := parseActivePartitions(data)
	must(t, "FM state", err)
	return active
}

// waitForActivePartitions waits, on inotify events of the state file's
// folder (the library writes it by rename), until exactly `want` is active.
func waitForActivePartitions(ctx context.Context, t *testing.T, env *gpuEnvironment, node string, want []int) {
	t.Helper()
	waitCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	path := fmStatePath(t, env, node)
	err := waitForFile(waitCtx, path, func(data []byte) bool {
		active, err := parseActivePartitions(data)
		return err == nil && slices.Equal(active, want)
	})
	if err != nil {
		t.Fatalf("waiting for active partitions %v in %s (now %v): %v", want, path, activePartitions(t, env, node), err)
	}
}

// checkNvidiaSMIHides runs the node's simulated nvidia-smi -L (the driver
// root's, as on the host) and checks it lists every GPU of the profile but
// those at `passedThrough` (on vfio-pci, which the nvidia driver does not see).
func checkNvidiaSMIHides(t *testing.T, env *gpuEnvironment, node string, profile fabricProfile, passedThrough []string) {
	t.Helper()
	smi := filepath.Join(env.node(t, node).Config.DriverRoot(), "usr", "bin", "nvidia-smi")
	out, err := exec.Command(smi, "-L").CombinedOutput()
	if err != nil {
		t.Fatalf("%s -L: %v\n%s", smi, err, out)
	}
	lines := 0
	for bus, gpu := range profile.byBusID() {
		listed := strings.Contains(string(out), gpu.UUID)
		if hidden := slices.Contains(passedThrough, bus); listed == hidden {
			t.Errorf("nvidia-smi -L lists GPU %s (%s): %t, want %t:\n%s", bus, gpu.UUID, listed, !hidden, out)
		}
	}
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if strings.HasPrefix(l, "GPU ") {
			lines++
		}
	}
	if want := len(profile.Devices) - len(passedThrough); lines != want {
		t.Errorf("nvidia-smi -L lists %d GPUs, want %d:\n%s", lines, want, out)
	}
}
