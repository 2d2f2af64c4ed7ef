package e2e

// VFIO passthrough at e2e tier: a simulated DGX H100 whose driver root has a
// mock sysfs, served by the simulated PCI driver core (test/simsysfs), with
// the plugin's PassthroughSupport and DeviceMetadata gates and its host root
// at the driver root. Upstream's gpu-test-vfiopci and gpu-test-vfio-config
// (testdata/upstream, unchanged) run through the real scheduler and kubelet:
// each pod's GPU is bound to vfio-pci on the node, its full GPU leaves the
// ResourceSlice while the claim is prepared, and both come back when the
// pods go. A pod of our own shows what a container of such a claim sees.

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
)

const (
	vfioClass     = "vfio.gpu.nvidia.com"
	vfioNamespace = "gpu-test-vfio"
	// Not the specs' namespace, which their deletion takes along.
	waiterNamespace = "vfio-waiter"
	h100SXMProfile  = "h100-sxm"
)

func TestGPUVfio(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	env := startGPUEnvironmentWithEnv(ctx, t, []corev1.EnvVar{
		{Name: "FEATURE_GATES", Value: "PassthroughSupport=true,DeviceMetadata=true"},
		// The node's mock sysfs and /dev/vfio live in its driver root.
		{Name: "HOST_ROOT", Value: containerDriverRoot},
	}, h100SXMProfile)
	node := env.nodes.Nodes[0].Config.Name
	published := publishedGPUDevices(ctx, t, env, node)
	for _, want := range []string{"gpu-0", "gpu-vfio-0", "gpu-7", "gpu-vfio-7"} {
		if !published[want] {
			t.Fatalf("%s is not published; the node's devices: %v", want, sortedKeys(published))
		}
	}

	// gpu-test-vfiopci, unchanged.
	spec := upstreamSpec(t, "gpu-test-vfiopci.yaml")
	t.Cleanup(func() { _, _ = env.kubectl(context.Background(), "delete", "--wait=false", "-f", spec) })
	env.Kubectl(ctx, t, "apply", "-f", spec)
	pod := waitForPodNamed(ctx, t, env, vfioNamespace, "pod1")
	device, busID := vfioDeviceOf(ctx, t, env, pod)
	if got := pciDriverOf(t, env, node, busID); got != "vfio-pci" {
		t.Errorf("%s (%s) of pod1 is on driver %q, want vfio-pci", device, busID, got)
	}
	sibling := fullGPUOn(ctx, t, env, node, busID)
	waitForPublished(ctx, t, env, node, fmt.Sprintf("%s withdrawn while %s is prepared", sibling, device),
		func(devices map[string]bool) bool { return !devices[sibling] && devices[device] })

	// The scheduler sees the withdrawal: a pod that wants exactly that GPU
	// through gpu.nvidia.com stays unschedulable while it is passed through.
	sameGPU := sameGPUPod(ctx, t, env, busID)
	waitForObject(ctx, t, "pod same-gpu unschedulable", func(ctx context.Context) (bool, error) {
		p, err := env.client.CoreV1().Pods(waiterNamespace).Get(ctx, sameGPU, metav1.GetOptions{})
		if err != nil {
			return false, ignoreNotFound(err)
		}
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
				return true, nil
			}
		}
		return false, nil
	}, func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
		o.FieldSelector = "metadata.name=" + sameGPU
		return env.client.CoreV1().Pods(waiterNamespace).Watch(ctx, o)
	})

	// gpu-test-vfio-config, unchanged: its Pod names a namespace the file
	// does not create (upstream's slip), so kubectl refuses that one object.
	configSpec := upstreamSpec(t, "gpu-test-vfio-config.yaml")
	t.Cleanup(func() { _, _ = env.kubectl(context.Background(), "delete", "--wait=false", "-f", configSpec) })
	if out, err := env.kubectl(ctx, "apply", "-f", configSpec); err == nil || !strings.Contains(out, `namespaces "gpu-test-vfiopci" not found`) {
		t.Fatalf("kubectl apply of gpu-test-vfio-config: want the pod refused for its namespace, got %v:\n%s", err, out)
	}
	// The same pod where the file's template is, plus a container that
	// shows what such a claim gives it.
	configPod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: vfioNamespace, Name: "pod1-full-vfioconfig", Labels: map[string]string{"app": "pod"}},
		Spec: corev1.PodSpec{
			TerminationGracePeriodSeconds: ptr(int64(5)),
			Containers: []corev1.Container{{
				Name:  "ctr",
				Image: workImage,
				Command: []string{"sh", "-c", "echo NVIDIA_VISIBLE_DEVICES=$NVIDIA_VISIBLE_DEVICES; ls /dev/vfio /dev | tr '\\n' ' '; echo; " +
					"cat /var/run/kubernetes.io/dra-device-attributes/resourceclaims/*/gpu/gpu.nvidia.com-metadata.json " +
					"/var/run/kubernetes.io/dra-device-attributes/resourceclaimtemplates/gpu/gpu/gpu.nvidia.com-metadata.json 2>&1; " +
					"echo END; trap 'exit 0' TERM; sleep 9999 & wait"},
				Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "gpu"}}},
			}},
			ResourceClaims: []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimTemplateName: ptr("single-gpu-full-vfioconfig")}},
		},
	}
	_, err := env.client.CoreV1().Pods(vfioNamespace).Create(ctx, configPod, metav1.CreateOptions{})
	must(t, "pod1-full-vfioconfig", err)
	running := waitForPodNamed(ctx, t, env, vfioNamespace, configPod.Name)
	device2, busID2 := vfioDeviceOf(ctx, t, env, running)
	if busID2 == busID {
		t.Fatalf("both pods got GPU %s", busID)
	}
	group := iommuGroupOf(t, env, node, busID2)
	log := containerLog(ctx, t, env, vfioNamespace, configPod.Name, "ctr", "END")
	for _, want := range []string{
		"NVIDIA_VISIBLE_DEVICES=void",
		" " + group + " ", // /dev/vfio/<group>
		" vfio ",          // enableAPIDevice: /dev/vfio/vfio
		`"apiVersion": "metadata.resource.k8s.io/v1alpha1"`,
		`"name": "` + device2 + `"`,
		`"string": "vfio"`,
		`"string": "` + busID2 + `"`,
	} {
		if !strings.Contains(log, want) {
			t.Errorf("the container of a VFIO claim: no %q in its output:\n%s", want, log)
		}
	}
	for _, unwanted := range []string{"nvidia0", "nvidiactl"} {
		if strings.Contains(log, unwanted) {
			t.Errorf("the container of a VFIO claim sees %s:\n%s", unwanted, log)
		}
	}

	// Both pods go: the GPUs go back to nvidia and the full GPUs come back.
	sibling2 := fullGPUOn(ctx, t, env, node, busID2)
	must(t, "delete pod", env.client.CoreV1().Pods(vfioNamespace).Delete(ctx, configPod.Name, metav1.DeleteOptions{}))
	env.Kubectl(ctx, t, "delete", "-f", spec, "--wait=true", "--timeout=2m")
	waitForPublished(ctx, t, env, node, "the full GPUs back once their twins' pods are gone",
		func(devices map[string]bool) bool { return devices[sibling] && devices[sibling2] })
	for _, bus := range []string{busID, busID2} {
		if got := pciDriverOf(t, env, node, bus); got != "nvidia" {
			t.Errorf("GPU %s is on %q after its pod went, want nvidia", bus, got)
		}
	}
	// ... and the pod that waited for that GPU gets it.
	waiting := waitForPodNamed(ctx, t, env, waiterNamespace, sameGPU)
	if len(waiting.Status.ResourceClaimStatuses) == 1 {
		claim, err := env.client.ResourceV1().ResourceClaims(waiterNamespace).Get(ctx, *waiting.Status.ResourceClaimStatuses[0].ResourceClaimName, metav1.GetOptions{})
		must(t, "claim of same-gpu", err)
		if got := claim.Status.Allocation.Devices.Results[0].Device; got != sibling {
			t.Errorf("same-gpu got %s, want %s", got, sibling)
		}
	}
}

// sameGPUPod creates a pod whose claim wants the full GPU at `busID`
// (class gpu.nvidia.com, a CEL selector on its PCI address); its name.
func sameGPUPod(ctx context.Context, t *testing.T, env *gpuEnvironment, busID string) string {
	t.Helper()
	const name = "same-gpu"
	_, err := env.client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: waiterNamespace}}, metav1.CreateOptions{})
	must(t, "namespace "+waiterNamespace, err)
	podWithDeviceAt(ctx, t, env, waiterNamespace, name, gpuClass, busID)
	return name
}

// podWithDeviceAt creates a claim template and a pod in `ns`, both `name`,
// whose one request wants a device of `class` at PCI address `busID`.
func podWithDeviceAt(ctx context.Context, t *testing.T, env *gpuEnvironment, ns, name, class, busID string) {
	t.Helper()
	template := &resourceapi.ResourceClaimTemplate{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: resourceapi.ResourceClaimTemplateSpec{Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{
			Requests: []resourceapi.DeviceRequest{{Name: "gpu", Exactly: &resourceapi.ExactDeviceRequest{
				DeviceClassName: class,
				Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{
					Expression: fmt.Sprintf(`device.attributes["resource.kubernetes.io"].pciBusID == %q`, busID)}}},
			}}},
		}}},
	}
	_, err := env.client.ResourceV1().ResourceClaimTemplates(ns).Create(ctx, template, metav1.CreateOptions{})
	must(t, "template "+name, err)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.PodSpec{
			TerminationGracePeriodSeconds: ptr(int64(5)),
			Tolerations:                   []corev1.Toleration{{Key: "nvidia.com/gpu", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}},
			Containers: []corev1.Container{{Name: "ctr", Image: workImage,
				Command:   []string{"sh", "-c", "trap 'exit 0' TERM; sleep 9999 & wait"},
				Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "gpu"}}}}},
			ResourceClaims: []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimTemplateName: ptr(name)}},
		},
	}
	_, err = env.client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
	must(t, "pod "+name, err)
	t.Cleanup(func() {
		_ = env.client.CoreV1().Pods(ns).Delete(context.Background(), name, metav1.DeleteOptions{})
	})
}

// On a DGX A100 with MIG on: passing a GPU through withdraws its MIG
// devices (not only a full GPU) until the pod goes.
func TestGPUVfioWithdrawsTheMIGDevicesOfTheGPU(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	env := startGPUEnvironmentWithEnv(ctx, t, []corev1.EnvVar{
		{Name: "FEATURE_GATES", Value: "PassthroughSupport=true"},
		{Name: "HOST_ROOT", Value: containerDriverRoot},
	}, a100MigProfile)
	node := env.nodes.Nodes[0].Config.Name
	busID := gpuBusIDsByMinor(t, env, node)[0]
	migOfGPU0 := func(devices map[string]bool) int {
		n := 0
		for name := range devices {
			if strings.HasPrefix(name, "gpu-0-mig-") {
				n++
			}
		}
		return n
	}
	before := publishedGPUDevices(ctx, t, env, node)
	if migOfGPU0(before) == 0 {
		t.Fatalf("GPU 0 of the a100-mig node publishes no MIG devices: %v", sortedKeys(before))
	}

	const ns = "vfio-on-mig"
	_, err := env.client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	must(t, "namespace "+ns, err)
	podWithDeviceAt(ctx, t, env, ns, "vm", vfioClass, busID)
	pod := waitForPodNamed(ctx, t, env, ns, "vm")
	device, bus := vfioDeviceOf(ctx, t, env, pod)
	if bus != busID || pciDriverOf(t, env, node, busID) != "vfio-pci" {
		t.Fatalf("pod vm got %s at %s (driver %q), want the GPU at %s on vfio-pci", device, bus, pciDriverOf(t, env, node, bus), busID)
	}
	waitForPublished(ctx, t, env, node, "GPU 0's MIG devices withdrawn while "+device+" is prepared",
		func(devices map[string]bool) bool { return migOfGPU0(devices) == 0 && devices[device] })
	if after := publishedGPUDevices(ctx, t, env, node); !after["gpu-1-mig-7g40gb-0-0"] && before["gpu-1-mig-7g40gb-0-0"] {
		t.Errorf("GPU 1's MIG device left too: %v", sortedKeys(after))
	}

	must(t, "delete pod", env.client.CoreV1().Pods(ns).Delete(ctx, "vm", metav1.DeleteOptions{}))
	waitForPublished(ctx, t, env, node, "GPU 0's MIG devices back",
		func(devices map[string]bool) bool { return migOfGPU0(devices) == migOfGPU0(before) })
	if got := pciDriverOf(t, env, node, busID); got != "nvidia" {
		t.Errorf("GPU %s is on %q after its pod went, want nvidia", busID, got)
	}
}

// vfioDeviceOf returns the VFIO device allocated to the pod's one claim and
// its PCI address (from the slice's attribute).
func vfioDeviceOf(ctx context.Context, t *testing.T, env *gpuEnvironment, pod corev1.Pod) (string, string) {
	t.Helper()
	if len(pod.Status.ResourceClaimStatuses) != 1 {
		t.Fatalf("pod %s: claim statuses %v", pod.Name, pod.Status.ResourceClaimStatuses)
	}
	claim, err := env.client.ResourceV1().ResourceClaims(pod.Namespace).Get(ctx, *pod.Status.ResourceClaimStatuses[0].ResourceClaimName, metav1.GetOptions{})
	must(t, "claim", err)
	results := claim.Status.Allocation.Devices.Results
	if len(results) != 1 || !strings.HasPrefix(results[0].Device, "gpu-vfio-") {
		t.Fatalf("pod %s: allocated %v, want one gpu-vfio-<n>", pod.Name, results)
	}
	slices := gpuSlices(ctx, t, env, pod.Spec.NodeName)
	for _, slice := range slices {
		for _, d := range slice.Spec.Devices {
			if d.Name == results[0].Device {
				if a, ok := d.Attributes["resource.kubernetes.io/pciBusID"]; ok && a.StringValue != nil {
					return d.Name, *a.StringValue
				}
			}
		}
	}
	t.Fatalf("%s is not in the node's slices", results[0].Device)
	return "", ""
}

// fullGPUOn names the full GPU published (now or, from the slice's
// history, before) on `busID`: gpu-<minor> of the GPU NVML sees there.
func fullGPUOn(ctx context.Context, t *testing.T, env *gpuEnvironment, node, busID string) string {
	t.Helper()
	for minor, bus := range gpuBusIDsByMinor(t, env, node) {
		if bus == busID {
			return fmt.Sprintf("gpu-%d", minor)
		}
	}
	t.Fatalf("no GPU of the profile at %s", busID)
	return ""
}

// gpuBusIDsByMinor reads the node's mock NVML profile: GPU minor -> its PCI
// address as sysfs names it ("00000000:18:00.0" -> "0000:18:00.0").
func gpuBusIDsByMinor(t *testing.T, env *gpuEnvironment, node string) map[int]string {
	t.Helper()
	out := map[int]string{}
	for _, d := range profileDevices(t, env, node) {
		bus := strings.ToLower(d.PCI.BusID)
		if len(bus) == len("00000000:18:00.0") {
			bus = bus[4:]
		}
		out[d.Minor] = bus
	}
	return out
}

func pciDriverOf(t *testing.T, env *gpuEnvironment, node, busID string) string {
	t.Helper()
	target, err := os.Readlink(filepath.Join(env.node(t, node).Config.DriverRoot(), "sys", "bus", "pci", "devices", busID, "driver"))
	if err != nil {
		return ""
	}
	return filepath.Base(target)
}

func iommuGroupOf(t *testing.T, env *gpuEnvironment, node, busID string) string {
	t.Helper()
	target, err := os.Readlink(filepath.Join(env.node(t, node).Config.DriverRoot(), "sys", "bus", "pci", "devices", busID, "iommu_group"))
	must(t, "iommu group", err)
	return filepath.Base(target)
}

func gpuSlices(ctx context.Context, t *testing.T, env *gpuEnvironment, node string) []resourceapi.ResourceSlice {
	t.Helper()
	list, err := env.client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{
		FieldSelector: "spec.nodeName=" + node + ",spec.driver=" + gpuDriverName})
	must(t, "slices", err)
	return list.Items
}

func publishedGPUDevices(ctx context.Context, t *testing.T, env *gpuEnvironment, node string) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	for _, slice := range gpuSlices(ctx, t, env, node) {
		for _, d := range slice.Spec.Devices {
			out[d.Name] = true
		}
	}
	return out
}

// waitForPublished waits, woken by the slices' watch, until the node's
// published devices satisfy `done`.
func waitForPublished(ctx context.Context, t *testing.T, env *gpuEnvironment, node, what string, done func(map[string]bool) bool) {
	t.Helper()
	waitForObject(ctx, t, what, func(ctx context.Context) (bool, error) {
		return done(publishedGPUDevices(ctx, t, env, node)), nil
	}, func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
		o.FieldSelector = "spec.nodeName=" + node + ",spec.driver=" + gpuDriverName
		return env.client.ResourceV1().ResourceSlices().Watch(ctx, o)
	})
}
