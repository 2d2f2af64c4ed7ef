package e2e

// Seed 002's fabricTopologyConfig at e2e tier (gate FabricTopologySupport,
// docs/fabric-manager.md), on a simulated HGX H100 8-GPU node with the mock
// Fabric Manager, the real scheduler and the real kubelet:
//
//   - the gate is on only for labelled nodes (FABRIC_TOPOLOGY_NODE_LABEL),
//     and set through FABRIC_TOPOLOGY_SUPPORT, not --feature-gates;
//   - the seed's example, translated in docs/fabric-manager.md, is applied
//     from the docs: Auto activates the 4-GPU partition the scheduler's GPUs
//     form, a second pod gets the other one, both active;
//   - Manual activates the named partition, SharedNVSwitch (VFIO GPUs) the
//     partition its GPUs form; Disabled, VGPU and
//     FullPassthrough (VFIO GPUs) activate nothing and say so in an Event;
//   - an unmeetable minBandwidth fails Prepare with the figures.

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
)

const (
	fabricTopologyLabel = "example.com/fabric-topology"
	fabricDocsNamespace = "fabric-demo"
	fabricNamespace     = "fabric-e2e"
)

func TestGPUFabricTopology(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	env := startGPUEnvironmentWithEnv(ctx, t, []corev1.EnvVar{
		{Name: "FEATURE_GATES", Value: "TimeSlicingSettings=true,PassthroughSupport=true"},
		{Name: "FABRIC_TOPOLOGY_SUPPORT", Value: "true"},
		{Name: "FABRIC_TOPOLOGY_NODE_LABEL", Value: fabricTopologyLabel},
		{Name: "HOST_ROOT", Value: containerDriverRoot},
		{Name: "NVIDIA_FABRICMANAGER_ADDRESS", Value: "127.0.0.1"},
	}, hgxH100Profile)
	node := env.nodes.Nodes[0].Config.Name
	profile := readFabricProfile(t, env, node)

	// 1. Not labelled: the gate is off on this node, no partition attributes.
	pod := env.waitForPluginPods(ctx, t)[node]
	logCtx, logCancel := context.WithTimeout(ctx, time.Minute)
	if line := env.followLogFor(logCtx, pod, "FabricTopologySupport: off for this node"); line == "" {
		t.Fatalf("plugin %s: no \"FabricTopologySupport: off for this node\" in its log", pod)
	}
	logCancel()
	for _, d := range gpuAndVfioDevices(ctx, t, env, node) {
		if _, ok := intAttr(d, "partition4"); ok {
			t.Errorf("%s has partition4 on a node without the label", d.Name)
		}
	}
	// Labelled, and the plugin restarted: on, attributes published.
	patch := fmt.Sprintf(`{"metadata":{"labels":{%q:"true"}}}`, fabricTopologyLabel)
	_, err := env.client.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
	must(t, "label the node", err)
	must(t, "restart the plugin", env.client.CoreV1().Pods(gpuPluginNamespace).Delete(ctx, pod, metav1.DeleteOptions{}))
	waitForObject(ctx, t, "partition4 on every full GPU", func(ctx context.Context) (bool, error) {
		devices := gpuAndVfioDevices(ctx, t, env, node)
		for _, d := range devices {
			if _, ok := intAttr(d, "partition4"); !ok {
				return false, nil
			}
		}
		return len(devices) == 2*len(profile.Devices), nil
	}, func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
		o.FieldSelector = "spec.nodeName=" + node + ",spec.driver=" + gpuDriverName
		return env.client.ResourceV1().ResourceSlices().Watch(ctx, o)
	})
	restarted := ""
	waitForObject(ctx, t, "a new plugin pod Running", func(ctx context.Context) (bool, error) {
		list, err := env.client.CoreV1().Pods(gpuPluginNamespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		for _, p := range list.Items {
			if p.Name != pod && p.Spec.NodeName == node && p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil {
				restarted = p.Name
				return true, nil
			}
		}
		return false, nil
	}, func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
		return env.client.CoreV1().Pods(gpuPluginNamespace).Watch(ctx, o)
	})
	logCtx, logCancel = context.WithTimeout(ctx, time.Minute)
	if line := env.followLogFor(logCtx, restarted, "registered with the kubelet"); line == "" {
		t.Fatalf("plugin %s: not registered with the kubelet", restarted)
	}
	logCancel()

	// 2. The seed's example from the docs: 4 GPUs of one 4-GPU partition,
	// that partition (and only it) active.
	example := docsExample(t, docsPath("fabric-manager.md"), "fabric-topology-example")
	t.Cleanup(func() { _, _ = env.kubectl(context.Background(), "delete", "--wait=false", "-f", example) })
	env.Kubectl(ctx, t, "apply", "-f", example)
	first := checkFabricClaim(ctx, t, env, profile, waitForPodNamed(ctx, t, env, fabricDocsNamespace, "fabric-pod"), 4)
	if got := activePartitions(t, env, node); !slices.Equal(got, []int{first}) {
		t.Errorf("active partitions with the docs' pod running: %v, want [%d]", got, first)
	}
	// A second pod from the same template: the other 4 GPUs, both active.
	fabricPod(ctx, t, env, fabricDocsNamespace, "fabric-pod-2", "", "gpu-claim-with-fabric")
	second := checkFabricClaim(ctx, t, env, profile, waitForPodNamed(ctx, t, env, fabricDocsNamespace, "fabric-pod-2"), 4)
	want := []int{first, second}
	slices.Sort(want)
	if first == second || !slices.Equal(activePartitions(t, env, node), want) {
		t.Errorf("two 4-GPU claims: partitions %d and %d, active %v; want disjoint, both active", first, second, activePartitions(t, env, node))
	}
	env.Kubectl(ctx, t, "delete", "-f", example, "--wait=true", "--timeout=2m")
	must(t, "delete fabric-pod-2", ignoreNotFound(env.client.CoreV1().Pods(fabricDocsNamespace).Delete(ctx, "fabric-pod-2", metav1.DeleteOptions{})))
	waitForActivePartitions(ctx, t, env, node, nil)

	// 3. Manual: the partition of size 2 that GPU module 5 is in, named by id
	// and picked by a CEL selector on its attribute.
	manual := profile.partitionsOf(5)[2]
	applyFabricClaim(ctx, t, env, "manual", "gpu.nvidia.com", 2,
		fmt.Sprintf(`device.attributes["gpu.nvidia.com"].partition2 == %d`, manual), "GpuConfig",
		fmt.Sprintf(`{strategy: Manual, partitionIDs: ["partition-%d"]}`, manual))
	if got := checkFabricClaim(ctx, t, env, profile, waitForPodNamed(ctx, t, env, fabricNamespace, "manual"), 2); got != manual {
		t.Errorf("Manual claim got partition %d, want %d", got, manual)
	}
	waitForActivePartitions(ctx, t, env, node, []int{manual})
	deletePodAndClaim(ctx, t, env, "manual")
	waitForActivePartitions(ctx, t, env, node, nil)

	// SharedNVSwitch with VFIO GPUs: the driver activates for the VM, as the
	// service VM would, and deactivates when the claim goes.
	applyFabricClaim(ctx, t, env, "shared", "vfio.gpu.nvidia.com", 2, "", "VfioDeviceConfig",
		`{virtualizationModel: SharedNVSwitch}`)
	shared := checkFabricClaim(ctx, t, env, profile, waitForPodNamed(ctx, t, env, fabricNamespace, "shared"), 2)
	waitForActivePartitions(ctx, t, env, node, []int{shared})
	deletePodAndClaim(ctx, t, env, "shared")
	waitForActivePartitions(ctx, t, env, node, nil)

	// 4. Disabled, VGPU (full GPUs) and FullPassthrough (VFIO GPUs): running,
	// nothing active, an Event on each claim.
	// One after another: a GPU's full and VFIO devices are withdrawn from
	// the slice only once its twin is prepared.
	applyFabricClaim(ctx, t, env, "passthrough", "vfio.gpu.nvidia.com", 2, "", "VfioDeviceConfig",
		`{virtualizationModel: FullPassthrough, partitionSize: 2}`)
	waitForPodNamed(ctx, t, env, fabricNamespace, "passthrough")
	applyFabricClaim(ctx, t, env, "disabled", "gpu.nvidia.com", 2, "", "GpuConfig", `{strategy: Disabled}`)
	waitForPodNamed(ctx, t, env, fabricNamespace, "disabled")
	applyFabricClaim(ctx, t, env, "vgpu", "gpu.nvidia.com", 2, "", "GpuConfig", `{virtualizationModel: VGPU}`)
	waitForPodNamed(ctx, t, env, fabricNamespace, "vgpu")
	waitClaimEvent(ctx, t, env, "disabled", "strategy Disabled, no Fabric Manager action")
	waitClaimEvent(ctx, t, env, "vgpu", "virtualizationModel VGPU, no fabric constraint applied")
	waitClaimEvent(ctx, t, env, "passthrough", "virtualizationModel FullPassthrough, the guest manages partition(s)")
	if got := activePartitions(t, env, node); len(got) != 0 {
		t.Errorf("active partitions with Disabled, VGPU and FullPassthrough claims: %v, want none", got)
	}
	for _, name := range []string{"disabled", "vgpu", "passthrough"} {
		deletePodAndClaim(ctx, t, env, name)
	}

	// 5. More bandwidth than NVLink gives: Prepare fails with the figures.
	pod = restarted
	applyFabricClaim(ctx, t, env, "greedy", "gpu.nvidia.com", 2, "", "GpuConfig", `{minBandwidth: 2000}`)
	logCtx, logCancel = context.WithTimeout(ctx, time.Minute)
	line := env.followLogFor(logCtx, pod, "minBandwidth: 2000 GB/s cannot be met")
	logCancel()
	if line == "" || !strings.Contains(line, "956.2 GB/s (18 NVLinks x 26562 MB/s x 2 directions") {
		t.Errorf("plugin %s: want a prepare failure with the partition's figures, got %q", pod, line)
	}
	if got := activePartitions(t, env, node); len(got) != 0 {
		t.Errorf("active partitions after a refused claim: %v", got)
	}
	// The kubelet's Event carries the same message to `kubectl describe pod`.
	waitForEventAbout(ctx, t, env.client, fabricNamespace, "Pod", "greedy", "FailedPrepareDynamicResources",
		"minBandwidth: 2000 GB/s cannot be met")
	if described := env.Kubectl(ctx, t, "describe", "pod", "-n", fabricNamespace, "greedy"); !strings.Contains(described, "FailedPrepareDynamicResources") ||
		!strings.Contains(described, "2000 GB/s cannot be met") {
		t.Errorf("kubectl describe pod greedy shows no prepare error:\n%s", described)
	}
}

// checkFabricClaim checks that the pod's claim got `count` full GPUs of one
// partition of that size and returns that partition's id.
func checkFabricClaim(ctx context.Context, t *testing.T, env *gpuEnvironment, profile fabricProfile, pod corev1.Pod, count int) int {
	t.Helper()
	// A claim by name, or the one made from the pod's template.
	var name *string
	if len(pod.Spec.ResourceClaims) == 1 {
		name = pod.Spec.ResourceClaims[0].ResourceClaimName
	}
	if len(pod.Status.ResourceClaimStatuses) == 1 {
		name = pod.Status.ResourceClaimStatuses[0].ResourceClaimName
	}
	if name == nil {
		t.Fatalf("pod %s: claims %v, statuses %v", pod.Name, pod.Spec.ResourceClaims, pod.Status.ResourceClaimStatuses)
	}
	claim, err := env.client.ResourceV1().ResourceClaims(pod.Namespace).Get(ctx, *name, metav1.GetOptions{})
	must(t, "claim of "+pod.Name, err)
	var modules []int
	byName := map[string]string{}
	for _, d := range gpuAndVfioDevices(ctx, t, env, pod.Spec.NodeName) {
		byName[d.Name] = stringAttr(d, "resource.kubernetes.io/pciBusID")
	}
	for _, r := range claim.Status.Allocation.Devices.Results {
		modules = append(modules, profile.byBusID()[byName[r.Device]].ModuleID)
	}
	id := profile.exactly(modules)
	if len(modules) != count || id < 0 {
		t.Fatalf("pod %s: GPU modules %v; want %d GPUs of one partition", pod.Name, modules, count)
	}
	t.Logf("pod %s: GPU modules %v, partition %d", pod.Name, modules, id)
	return id
}

// applyFabricClaim creates, in fabricNamespace, a claim `name` for `count`
// devices of `class` (with an optional CEL selector) whose opaque config of
// `kind` carries `topology` as its fabricTopologyConfig, and a pod using it.
func applyFabricClaim(ctx context.Context, t *testing.T, env *gpuEnvironment, name, class string, count int, selector, kind, topology string) {
	t.Helper()
	selectors := ""
	if selector != "" {
		selectors = fmt.Sprintf("\n        selectors:\n        - cel:\n            expression: '%s'", selector)
	}
	constraint := ""
	if selector == "" && count > 1 && !strings.Contains(topology, "Disabled") && !strings.Contains(topology, "VGPU") {
		constraint = fmt.Sprintf("\n    constraints:\n    - requests: [\"gpus\"]\n      matchAttribute: gpu.nvidia.com/partition%d", count)
	}
	spec := fmt.Sprintf(`apiVersion: v1
kind: Namespace
metadata:
  name: %[1]s
---
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata:
  namespace: %[1]s
  name: %[2]s
spec:
  devices:
    requests:
    - name: gpus
      exactly:
        deviceClassName: %[3]s
        allocationMode: ExactCount
        count: %[4]d%[5]s%[6]s
    config:
    - requests: ["gpus"]
      opaque:
        driver: gpu.nvidia.com
        parameters:
          apiVersion: resource.nvidia.com/v1beta1
          kind: %[7]s
          fabricTopologyConfig: %[8]s
`, fabricNamespace, name, class, count, selectors, constraint, kind, topology)
	path := filepath.Join(t.TempDir(), name+".yaml")
	must(t, "claim", os.WriteFile(path, []byte(spec), 0o644))
	env.Kubectl(ctx, t, "apply", "-f", path)
	fabricPod(ctx, t, env, fabricNamespace, name, name, "")
}

// fabricPod creates a pod using the claim `claim` or, when empty, one from
// the template `template`.
func fabricPod(ctx context.Context, t *testing.T, env *gpuEnvironment, ns, name, claim, template string) {
	t.Helper()
	podClaim := corev1.PodResourceClaim{Name: "gpus"}
	if claim != "" {
		podClaim.ResourceClaimName = ptr(claim)
	} else {
		podClaim.ResourceClaimTemplateName = ptr(template)
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.PodSpec{
			TerminationGracePeriodSeconds: ptr(int64(5)),
			Containers: []corev1.Container{{Name: "ctr", Image: workImage,
				Command:   []string{"sh", "-c", "trap 'exit 0' TERM; sleep 9999 & wait"},
				Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "gpus"}}}}},
			ResourceClaims: []corev1.PodResourceClaim{podClaim},
		},
	}
	_, err := env.client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
	must(t, "pod "+name, err)
	t.Cleanup(func() {
		_ = env.client.CoreV1().Pods(ns).Delete(context.Background(), name, metav1.DeleteOptions{})
	})
}

// deletePodAndClaim deletes the pod and the claim `name` and waits until
// the claim is gone (unprepared and deallocated).
func deletePodAndClaim(ctx context.Context, t *testing.T, env *gpuEnvironment, name string) {
	t.Helper()
	env.Kubectl(ctx, t, "delete", "-n", fabricNamespace, "pod/"+name, "resourceclaim/"+name, "--wait=true", "--timeout=2m")
}

// waitClaimEvent waits for the plugin's FabricTopologyNotApplied Event on
// the claim `name` whose note holds `text`.
func waitClaimEvent(ctx context.Context, t *testing.T, env *gpuEnvironment, name, text string) {
	t.Helper()
	waitForEventAbout(ctx, t, env.client, fabricNamespace, "ResourceClaim", name, "FabricTopologyNotApplied", text)
}
