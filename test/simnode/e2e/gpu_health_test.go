package e2e

// Device health at e2e tier (gate NVMLDeviceHealthCheck): one simulated DGX
// H100 whose mock NVML plays GPU faults (harness/nvml.go), with the real
// scheduler and kubelet. What an operator sees: the ResourceSlice's device
// taints and the scheduler honouring them, Node Events, the pods' status
// (allocatedResourcesStatus, from the plugin's health stream), and what
// restarts, reboots, the reset annotation, event floods and lost GPUs do to
// them. The steps share one node and run in order; each says what the
// previous ones left.

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fsnotify/fsnotify"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"

	"nvdra.local/test/simnode/harness"
)

const (
	taintKeyXid           = "gpu.nvidia.com/xid"
	taintKeyGPULost       = "gpu.nvidia.com/gpu-lost"
	healthResetAnnotation = "gpu.nvidia.com/device-health-reset"
	// healthEventsNamespace: the plugin records its Node Events there.
	healthEventsNamespace = "default"
	// floodEvents XIDs in a burst, floodFirstXid, floodFirstXid+1, ...:
	// distinct, none an application XID, so the last one wins the taint.
	floodEvents   = 1000
	floodFirstXid = 1000
	// floodPodBound: how long the pod created during the flood may take to
	// run (measured and logged: under a second on a 2-core machine).
	floodPodBound = 60 * time.Second
	// gpusPerNode: the h100-sxm profile's GPUs (MIG off: one device each).
	gpusPerNode = 8
)

func TestGPUDeviceHealth(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	h := startHealthEnvironment(ctx, t)
	s := h.scenario(ctx, t, "gpu-health")
	s.claimTemplate("one-gpu", deviceRequest("gpu", gpuClass))

	// The GPU that fails (x, its device name and UUID), the one whose
	// application XID serves as a barrier after the restart (z).
	var x, xUUID, z string
	// How long a one-GPU pod took from creation to Running, undisturbed.
	var podStart time.Duration

	// 1. A pod runs on GPU x; XID 79 on x taints its device NoSchedule in
	// the slice, records a DeviceUnhealthy Event on the Node and turns the
	// pod's status for that device Unhealthy.
	if !t.Run("XidTaintsTheDeviceAndThePodSeesIt", func(t *testing.T) {
		created := time.Now()
		pod := s.runPod("holder", []string{"ctr"}, templateClaim("gpu", "one-gpu"))
		x = s.checkContainers(pod, 1, 0, "ctr")[0].device
		xUUID = h.uuidOf(t, x)
		t.Logf("holder runs on %s (%s) after %v", x, xUUID, time.Since(created).Round(time.Millisecond))
		h.inject(ctx, t, xUUID, harness.NVMLEventXid, 79)
		injected := time.Now()
		taint := h.waitTaint(ctx, t, x, "XID 79 on "+x, hasTaint(taintKeyXid, "79", resourceapi.DeviceTaintEffectNoSchedule))
		t.Logf("%s: taint %s=%s:%s added %v, seen %v after the XID", x, taint.Key, taint.Value, taint.Effect, taint.TimeAdded,
			time.Since(injected).Round(time.Millisecond))
		h.waitNodeEvent(ctx, t, "DeviceUnhealthy", x+": ", "XID 79")
		h.waitPodHealth(ctx, t, s.ns, pod.Name, x, corev1.ResourceHealthStatusUnhealthy)
		t.Logf("the pod's status says Unhealthy %v after the XID", time.Since(injected).Round(time.Millisecond))
		s.deletePods(pod)
		t.Logf("holder gone %v after the XID", time.Since(injected).Round(time.Millisecond))
	}) {
		t.FailNow()
	}

	// 2. x is free but tainted: seven one-GPU pods take the seven other
	// GPUs, and an eighth without a toleration stays Pending, unschedulable.
	var fillers []*corev1.Pod
	if !t.Run("SchedulerAvoidsTheTaintedGPU", func(t *testing.T) {
		for i := range gpusPerNode - 1 {
			s.createPod(fmt.Sprintf("fill-%d", i), []string{"ctr"}, templateClaim("gpu", "one-gpu"))
		}
		seen := map[string]string{}
		for i := range gpusPerNode - 1 {
			pod := waitForPodIn(ctx, t, s.client, s.ns, fmt.Sprintf("fill-%d", i), func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodRunning })
			fillers = append(fillers, pod)
			device := s.allocations(pod)[0].device
			if device == x {
				t.Errorf("%s got the tainted %s", pod.Name, x)
			}
			if other, ok := seen[device]; ok {
				t.Errorf("%s and %s both got %s", pod.Name, other, device)
			}
			seen[device] = pod.Name
		}
		t.Logf("the fillers hold %v", sortedKeys(seen))
		h.waitUnschedulable(ctx, t, s.createPod("fill-7", []string{"ctr"}, templateClaim("gpu", "one-gpu")))
	}) {
		t.FailNow()
	}

	// 3. A claim that tolerates the XID taint gets x, the only free GPU,
	// while the pod without the toleration still waits. Its pod runs on an
	// unhealthy device and says so.
	var tolerant *corev1.Pod
	if !t.Run("ATolerationGetsTheTaintedGPU", func(t *testing.T) {
		// docs/device-health.md's claim, as the docs show it.
		h.Kubectl(ctx, t, "apply", "-n", s.ns, "-f", docsExample(t, docsPath("device-health.md"), "device-health-diagnostics-claim"))
		created := time.Now()
		tolerant = s.runPod("tolerant", []string{"ctr"}, corev1.PodResourceClaim{Name: "gpu", ResourceClaimName: ptr("diagnostics")})
		podStart = time.Since(created)
		if got := s.allocations(tolerant)[0].device; got != x {
			t.Fatalf("the tolerating claim got %s, want %s (the only free GPU)", got, x)
		}
		h.waitPodHealth(ctx, t, s.ns, tolerant.Name, x, corev1.ResourceHealthStatusUnhealthy)
		p, err := s.client.CoreV1().Pods(s.ns).Get(ctx, "fill-7", metav1.GetOptions{})
		must(t, "fill-7", err)
		if p.Spec.NodeName != "" {
			t.Errorf("fill-7 (no toleration) was bound to %s", p.Spec.NodeName)
		}
		must(t, "delete fill-7", s.client.CoreV1().Pods(s.ns).Delete(ctx, p.Name, metav1.DeleteOptions{}))
		s.deletePods(fillers...)
		waitForPodGone(ctx, t, s.client, s.ns, p.Name)
	}) {
		t.FailNow()
	}

	// 4. The plugin crashes (SIGKILL) and comes back: the taint is still
	// there with its timeAdded, and the pod still Unhealthy. That the new
	// plugin has published is shown by an application XID (13, effect None)
	// on another GPU z, injected after it registered: the slice with z's
	// taint is the new plugin's whole view.
	if !t.Run("ARestartKeepsTheTaint", func(t *testing.T) {
		before := h.taintOf(ctx, t, x, taintKeyXid)
		z = h.pickDevices(t, 1, x)[0]
		zUUID := h.uuidOf(t, z)
		oldPids := h.registeredPids(t)
		plugin := h.waitForPluginPods(ctx, t)[h.node]
		pid, err := h.nodes.KillContainer(h.node, gpuPluginNamespace, plugin, gpuPluginContainer)
		must(t, "kill the plugin", err)
		t.Logf("killed the plugin (pid %d)", pid)
		h.waitNewRegistration(ctx, t, zUUID, oldPids)
		h.inject(ctx, t, zUUID, harness.NVMLEventXid, 13)
		h.waitTaint(ctx, t, z, "XID 13 on "+z+" from the restarted plugin", hasTaint(taintKeyXid, "13", resourceapi.DeviceTaintEffectNone))
		after := h.taintOf(ctx, t, x, taintKeyXid)
		if after == nil || after.Value != "79" || after.Effect != resourceapi.DeviceTaintEffectNoSchedule {
			t.Fatalf("after the restart %s has taint %+v, want %s=79:NoSchedule", x, after, taintKeyXid)
		}
		if before == nil || after.TimeAdded == nil || !after.TimeAdded.Equal(before.TimeAdded) {
			t.Errorf("timeAdded of %s's taint changed across the restart: %v -> %v", x, before.TimeAdded, after.TimeAdded)
		}
		h.waitPodHealth(ctx, t, s.ns, tolerant.Name, x, corev1.ResourceHealthStatusUnhealthy)
	}) {
		t.FailNow()
	}

	// 5. The operator resets x through the Node annotation: its taint goes,
	// the annotation goes, a DeviceHealthy Event says so, the pod is
	// Healthy again (so the restarted plugin's health stream reaches the
	// kubelet); z's taint (not named) stays.
	if !t.Run("TheResetAnnotationClearsTheTaint", func(t *testing.T) {
		h.annotateReset(ctx, t, x)
		h.waitTaint(ctx, t, x, x+" without taints", noTaints)
		h.waitResetAnnotationGone(ctx, t)
		h.waitNodeEvent(ctx, t, "DeviceHealthy", x)
		h.waitPodHealth(ctx, t, s.ns, tolerant.Name, x, corev1.ResourceHealthStatusHealthy)
		if got := h.taintOf(ctx, t, z, taintKeyXid); got == nil || got.Value != "13" {
			t.Errorf("%s's taint went with the reset of %s only: %+v", z, x, got)
		}
		s.deletePods(tolerant)
	}) {
		t.FailNow()
	}

	// 6. A GPU falls off the bus: gpu-lost NoSchedule; once it answers NVML
	// again the taint goes by itself, with a DeviceHealthy Event. Before
	// the flood, whose Events use up the plugin's Event budget for the Node
	// (25, then one every 5 s; an Event without a token is dropped).
	var lost string
	t.Run("ALostGpuIsTaintedUntilItAnswers", func(t *testing.T) {
		lost = h.pickDevices(t, 1, x, z)[0]
		lostUUID := h.uuidOf(t, lost)
		h.inject(ctx, t, lostUUID, harness.NVMLEventGPULost, 0)
		h.waitTaint(ctx, t, lost, "gpu-lost on "+lost, hasTaint(taintKeyGPULost, "", resourceapi.DeviceTaintEffectNoSchedule))
		h.inject(ctx, t, lostUUID, harness.NVMLEventGPURecovered, 0)
		h.waitTaint(ctx, t, lost, lost+" without gpu-lost", func(taints []resourceapi.DeviceTaint) bool {
			return !slices.ContainsFunc(taints, func(t resourceapi.DeviceTaint) bool { return t.Key == taintKeyGPULost })
		})
		h.waitNodeEvent(ctx, t, "DeviceHealthy", lost, "answers NVML again")
	})

	// 7. A flood of floodEvents XIDs on one GPU within a second while a pod
	// for another GPU starts: the pod runs in time, and the slice ends with
	// the last XID (the latest event wins).
	t.Run("AnXidFloodDoesNotStallThePlugin", func(t *testing.T) {
		picked := h.pickDevices(t, 2, x, z, lost)
		flooded, target := picked[0], picked[1]
		floodedUUID := h.uuidOf(t, flooded)
		s.claimTemplate("one-gpu-by-uuid", deviceRequest("gpu", gpuClass,
			fmt.Sprintf("device.attributes['%s'].uuid == '%s'", gpuDriverName, h.uuidOf(t, target))))
		h.waitRegistration(ctx, t, floodedUUID)
		last := strconv.Itoa(floodFirstXid + floodEvents - 1)
		// Seen on a watch of its own, so that the two times are apart.
		lastSeen := h.whenTaint(ctx, flooded, hasTaint(taintKeyXid, last, resourceapi.DeviceTaintEffectNoSchedule))
		start := time.Now()
		flood := make(chan error, 1)
		var floodTook time.Duration
		go func() {
			var err error
			for i := range floodEvents {
				if err = h.nodes.InjectNVMLEvent(h.node, floodedUUID, harness.NVMLEventXid, uint64(floodFirstXid+i)); err != nil {
					break
				}
			}
			floodTook = time.Since(start)
			flood <- err
		}()
		s.createPod("during-flood", []string{"ctr"}, templateClaim("gpu", "one-gpu-by-uuid"))
		podCtx, cancel := context.WithTimeout(ctx, floodPodBound)
		pod := waitForPodIn(podCtx, t, s.client, s.ns, "during-flood", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodRunning })
		cancel()
		running := time.Since(start)
		must(t, "flood", <-flood)
		seen := <-lastSeen
		must(t, "the last XID of the flood on "+flooded, seen.err)
		t.Logf("%d XIDs on %s written in %v; the slice showed XID %s %v after the first; pod during-flood Running on %s after %v (bound %v; undisturbed: %v)",
			floodEvents, flooded, floodTook.Round(time.Millisecond), last, seen.at.Sub(start).Round(time.Millisecond),
			target, running.Round(time.Millisecond), floodPodBound, podStart.Round(time.Millisecond))
		if floodTook > time.Second {
			t.Errorf("the flood took %v, not within a second", floodTook)
		}
		if got := s.allocations(pod)[0].device; got != target {
			t.Errorf("during-flood got %s, want %s", got, target)
		}
		events, err := h.client.EventsV1().Events(healthEventsNamespace).List(ctx, metav1.ListOptions{
			FieldSelector: fields.Set{"regarding.name": h.node, "reason": "DeviceUnhealthy"}.String()})
		must(t, "events", err)
		n, series := 0, 0
		for _, e := range events.Items {
			if strings.HasPrefix(e.Note, flooded+": ") {
				n++
				if e.Series != nil {
					series += int(e.Series.Count)
				}
			}
		}
		t.Logf("DeviceUnhealthy Events about %s: %d objects, series counts adding to %d", flooded, n, series)
		s.deletePods(pod)
	})

	// 8. x tainted again, then the node reboots: the plugin's record is of
	// the earlier boot, so the plugin that comes back publishes every GPU
	// without taints (x's, z's and the flood's).
	t.Run("ARebootClearsTheTaints", func(t *testing.T) {
		h.inject(ctx, t, xUUID, harness.NVMLEventXid, 79)
		h.waitTaint(ctx, t, x, "XID 79 on "+x+" again", hasTaint(taintKeyXid, "79", resourceapi.DeviceTaintEffectNoSchedule))
		t.Logf("tainted before the reboot: %v", sortedKeys(tainted(taintsByDevice(h.sliceList(ctx, t)))))
		oldPids := h.registeredPids(t)
		must(t, "reboot", h.nodes.Reboot(h.node))
		h.waitNewRegistration(ctx, t, xUUID, oldPids)
		h.waitTaints(ctx, t, "every GPU published without taints after the reboot", func(byDevice map[string][]resourceapi.DeviceTaint) bool {
			return len(tainted(byDevice)) == 0 && len(byDevice) == gpusPerNode
		})
	})
}

// tainted: the devices of byDevice that have taints.
func tainted(byDevice map[string][]resourceapi.DeviceTaint) map[string]bool {
	out := map[string]bool{}
	for device, taints := range byDevice {
		if len(taints) > 0 {
			out[device] = true
		}
	}
	return out
}

// healthEnvironment is one h100-sxm node whose plugin runs with
// NVMLDeviceHealthCheck.
type healthEnvironment struct {
	*gpuEnvironment
	node     string
	stateDir string // the node's mock NVML state folder
}

func startHealthEnvironment(ctx context.Context, t *testing.T) *healthEnvironment {
	t.Helper()
	env := startGPUEnvironmentWithEnv(ctx, t, []corev1.EnvVar{{Name: "FEATURE_GATES", Value: "NVMLDeviceHealthCheck=true"}}, h100SXMProfile)
	n := env.nodes.Nodes[0]
	dir, err := n.MockNVMLStateDir()
	must(t, "mock NVML state", err)
	h := &healthEnvironment{gpuEnvironment: env, node: n.Config.Name, stateDir: dir}
	h.waitKubeletRegistration(ctx, t)
	return h
}

// waitKubeletRegistration follows the plugin's log until the kubelet has
// confirmed its registration. The slices come first; a pod the kubelet
// starts before that fails its prepare ("driver is not registered") and is
// tried again only after a back-off of about 10 s.
func (h *healthEnvironment) waitKubeletRegistration(ctx context.Context, t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	pod := h.waitForPluginPods(ctx, t)[h.node]
	if h.followLogFor(ctx, pod, "registered with the kubelet") == "" {
		t.Fatalf("plugin %s: no \"registered with the kubelet\" in its log: %v", pod, ctx.Err())
	}
}

// inject waits until the plugin listens for the GPU's events, then appends
// one.
func (h *healthEnvironment) inject(ctx context.Context, t *testing.T, uuid, kind string, data uint64) {
	t.Helper()
	h.waitRegistration(ctx, t, uuid)
	must(t, fmt.Sprintf("inject %s %d on %s", kind, data, uuid), h.nodes.InjectNVMLEvent(h.node, uuid, kind, data))
}

func (h *healthEnvironment) waitRegistration(ctx context.Context, t *testing.T, uuid string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	must(t, "NVML event registration", h.nodes.WaitEventRegistration(ctx, h.node, uuid))
}

// registeredPids: the processes that have registered NVML events so far.
func (h *healthEnvironment) registeredPids(t *testing.T) map[int]bool {
	t.Helper()
	regs, err := harness.ReadNVMLEventRegistrations(h.stateDir)
	must(t, "event registrations", err)
	out := map[int]bool{}
	for _, r := range regs {
		out[r.Pid] = true
	}
	return out
}

// waitNewRegistration waits, on inotify events of the state folder, until a
// process not in `old` has registered events for the GPU: the plugin that
// came back (WaitEventRegistration would take the killed one as long as it
// is not reaped).
func (h *healthEnvironment) waitNewRegistration(ctx context.Context, t *testing.T, uuid string, old map[int]bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	w, err := fsnotify.NewWatcher()
	must(t, "inotify", err)
	defer w.Close()
	must(t, "watch "+h.stateDir, w.Add(h.stateDir))
	for {
		regs, err := harness.ReadNVMLEventRegistrations(h.stateDir)
		must(t, "event registrations", err)
		for _, r := range regs {
			if r.UUID == uuid && !old[r.Pid] {
				t.Logf("the plugin is back: pid %d registered NVML events for %s", r.Pid, uuid)
				return
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("no new process registered NVML events for %s (earlier pids %v): %v", uuid, sortedKeys(intKeys(old)), ctx.Err())
		case err := <-w.Errors:
			t.Fatalf("watch %s: %v", h.stateDir, err)
		case <-w.Events:
		}
	}
}

func intKeys(m map[int]bool) map[string]bool {
	out := map[string]bool{}
	for k := range m {
		out[strconv.Itoa(k)] = true
	}
	return out
}

// slices lists the node's gpu.nvidia.com ResourceSlices.
func (h *healthEnvironment) sliceList(ctx context.Context, t *testing.T) []resourceapi.ResourceSlice {
	t.Helper()
	list, err := h.client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{FieldSelector: h.sliceSelector()})
	must(t, "slices", err)
	return list.Items
}

func (h *healthEnvironment) sliceSelector() string {
	return "spec.nodeName=" + h.node + ",spec.driver=" + gpuDriverName
}

// deviceUUIDs: published device name -> its uuid attribute.
func (h *healthEnvironment) deviceUUIDs(ctx context.Context, t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, slice := range h.sliceList(ctx, t) {
		for _, d := range slice.Spec.Devices {
			if a, ok := d.Attributes["uuid"]; ok && a.StringValue != nil {
				out[d.Name] = *a.StringValue
			}
		}
	}
	return out
}

func (h *healthEnvironment) uuidOf(t *testing.T, device string) string {
	t.Helper()
	uuid, ok := h.deviceUUIDs(context.Background(), t)[device]
	if !ok {
		t.Fatalf("%s has no uuid attribute in the node's slices", device)
	}
	return uuid
}

// pickDevices: n published GPUs other than `exclude`, in name order.
func (h *healthEnvironment) pickDevices(t *testing.T, n int, exclude ...string) []string {
	t.Helper()
	var out []string
	for _, name := range sortedKeys(h.deviceUUIDs(context.Background(), t)) {
		if len(out) < n && !slices.Contains(exclude, name) {
			out = append(out, name)
		}
	}
	if len(out) < n {
		t.Fatalf("the node publishes fewer than %d devices besides %v", n, exclude)
	}
	return out
}

// taintsByDevice: every device of the node's slices -> its taints (nil
// when none).
func taintsByDevice(items []resourceapi.ResourceSlice) map[string][]resourceapi.DeviceTaint {
	out := map[string][]resourceapi.DeviceTaint{}
	for _, slice := range items {
		for _, d := range slice.Spec.Devices {
			out[d.Name] = d.Taints
		}
	}
	return out
}

// taintOf: the device's taint with `key` now, nil when none.
func (h *healthEnvironment) taintOf(ctx context.Context, t *testing.T, device, key string) *resourceapi.DeviceTaint {
	t.Helper()
	for _, taint := range taintsByDevice(h.sliceList(ctx, t))[device] {
		if taint.Key == key {
			return &taint
		}
	}
	return nil
}

// hasTaint: a condition on a device's taints, that one of them is
// key=value:effect with timeAdded set.
func hasTaint(key, value string, effect resourceapi.DeviceTaintEffect) func([]resourceapi.DeviceTaint) bool {
	return func(taints []resourceapi.DeviceTaint) bool {
		return slices.ContainsFunc(taints, func(t resourceapi.DeviceTaint) bool {
			return t.Key == key && t.Value == value && t.Effect == effect && t.TimeAdded != nil
		})
	}
}

func noTaints(taints []resourceapi.DeviceTaint) bool { return len(taints) == 0 }

// waitTaints waits, on a watch of the node's slices, until `done` holds for
// the taints of all its devices.
func (h *healthEnvironment) waitTaints(ctx context.Context, t *testing.T, what string, done func(map[string][]resourceapi.DeviceTaint) bool) map[string][]resourceapi.DeviceTaint {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	var last map[string][]resourceapi.DeviceTaint
	waitForObject(ctx, t, what, func(ctx context.Context) (bool, error) {
		list, err := h.client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{FieldSelector: h.sliceSelector()})
		if err != nil {
			return false, err
		}
		last = taintsByDevice(list.Items)
		return done(last), nil
	}, func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
		o.FieldSelector = h.sliceSelector()
		return h.client.ResourceV1().ResourceSlices().Watch(ctx, o)
	})
	return last
}

// waitTaint waits until `done` holds for the device's taints and returns
// the first of them (zero when none).
func (h *healthEnvironment) waitTaint(ctx context.Context, t *testing.T, device, what string, done func([]resourceapi.DeviceTaint) bool) resourceapi.DeviceTaint {
	t.Helper()
	taints := h.waitTaints(ctx, t, what, func(byDevice map[string][]resourceapi.DeviceTaint) bool { return done(byDevice[device]) })[device]
	if len(taints) == 0 {
		return resourceapi.DeviceTaint{}
	}
	return taints[0]
}

// seenAt is when a watch saw its condition hold, or why it did not.
type seenAt struct {
	at  time.Time
	err error
}

// whenTaint watches the node's slices, from now on, in the background and
// reports when `done` first holds for the device's taints.
func (h *healthEnvironment) whenTaint(ctx context.Context, device string, done func([]resourceapi.DeviceTaint) bool) <-chan seenAt {
	out := make(chan seenAt, 1)
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	ready := make(chan struct{})
	go func() {
		defer cancel()
		w, err := h.client.ResourceV1().ResourceSlices().Watch(ctx, metav1.ListOptions{FieldSelector: h.sliceSelector()})
		close(ready)
		if err != nil {
			out <- seenAt{err: err}
			return
		}
		defer w.Stop()
		for ev := range w.ResultChan() {
			if slice, ok := ev.Object.(*resourceapi.ResourceSlice); ok && ev.Type != watch.Deleted {
				if taints, ok := taintsByDevice([]resourceapi.ResourceSlice{*slice})[device]; ok && done(taints) {
					out <- seenAt{at: time.Now()}
					return
				}
			}
		}
		out <- seenAt{err: fmt.Errorf("the watch ended before %s had the taint: %w", device, ctx.Err())}
	}()
	<-ready
	return out
}

// waitNodeEvent waits for an Event of `reason` about the node whose note
// holds every one of `texts`.
func (h *healthEnvironment) waitNodeEvent(ctx context.Context, t *testing.T, reason string, texts ...string) {
	t.Helper()
	waitForEventAbout(ctx, t, h.client, healthEventsNamespace, "Node", h.node, reason, texts...)
}

// annotateReset sets the Node's reset annotation to `value`.
func (h *healthEnvironment) annotateReset(ctx context.Context, t *testing.T, value string) {
	t.Helper()
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{healthResetAnnotation: value}}})
	must(t, "patch", err)
	_, err = h.client.CoreV1().Nodes().Patch(ctx, h.node, types.MergePatchType, patch, metav1.PatchOptions{})
	must(t, "annotate the Node", err)
}

// waitResetAnnotationGone waits, on a watch of the Node, until the plugin
// has removed the reset annotation.
func (h *healthEnvironment) waitResetAnnotationGone(ctx context.Context, t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	selector := fields.OneTermEqualSelector("metadata.name", h.node).String()
	waitForObject(ctx, t, "reset annotation removed", func(ctx context.Context) (bool, error) {
		n, err := h.client.CoreV1().Nodes().Get(ctx, h.node, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		_, there := n.Annotations[healthResetAnnotation]
		return !there, nil
	}, func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
		o.FieldSelector = selector
		return h.client.CoreV1().Nodes().Watch(ctx, o)
	})
}

// deviceHealthOf: the health the pod's status gives its one claim's device
// (every container with a claim), "" when none yet; and the resource IDs.
func deviceHealthOf(p *corev1.Pod) (corev1.ResourceHealthStatus, []string) {
	var health corev1.ResourceHealthStatus
	var ids []string
	for _, c := range p.Status.ContainerStatuses {
		for _, rs := range c.AllocatedResourcesStatus {
			if !strings.HasPrefix(string(rs.Name), "claim:") {
				continue
			}
			for _, r := range rs.Resources {
				if health != "" && health != r.Health {
					return "", nil // containers disagree: not settled
				}
				health = r.Health
				ids = append(ids, string(r.ResourceID))
			}
		}
	}
	return health, ids
}

// waitPodHealth waits, on a watch of the pod, until its status gives its
// device (`device`, the one of its claim) health `want`, and checks that
// the resource ID names that device.
func (h *healthEnvironment) waitPodHealth(ctx context.Context, t *testing.T, ns, pod, device string, want corev1.ResourceHealthStatus) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	p := waitForPodIn(ctx, t, h.client, ns, pod, func(p *corev1.Pod) bool {
		got, _ := deviceHealthOf(p)
		return got == want
	})
	_, ids := deviceHealthOf(p)
	for _, id := range ids {
		if !resourceIDNames(id, h.node, device) {
			t.Errorf("pod %s: allocatedResourcesStatus resource %q does not name %s/%s/%s", pod, id, gpuDriverName, h.node, device)
		}
	}
	t.Logf("pod %s: %s is %s (%v)", pod, device, want, ids)
}

// resourceIDNames: the kubelet's resource ID of a device is its first CDI
// device ID (ours: k8s.gpu.nvidia.com/claim=<claim uid>-<device>), or
// <driver>/<pool>/<device> when it has none.
func resourceIDNames(id, pool, device string) bool {
	if id == gpuDriverName+"/"+pool+"/"+device {
		return true
	}
	return strings.HasPrefix(id, "k8s."+gpuDriverName+"/claim=") && strings.HasSuffix(id, "-"+device)
}

// waitUnschedulable waits until the scheduler gave up on the pod for now
// (PodScheduled False, Unschedulable) and logs its message.
func (h *healthEnvironment) waitUnschedulable(ctx context.Context, t *testing.T, pod *corev1.Pod) *corev1.Pod {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	pod = waitForPodIn(ctx, t, h.client, pod.Namespace, pod.Name, func(p *corev1.Pod) bool {
		c := podCondition(p, corev1.PodScheduled)
		return c != nil && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable
	})
	c := podCondition(pod, corev1.PodScheduled)
	t.Logf("%s: PodScheduled %s: %s", pod.Name, c.Reason, c.Message)
	if pod.Spec.NodeName != "" || pod.Status.Phase != corev1.PodPending {
		t.Errorf("%s is %s on %q, want Pending and unbound", pod.Name, pod.Status.Phase, pod.Spec.NodeName)
	}
	return pod
}
