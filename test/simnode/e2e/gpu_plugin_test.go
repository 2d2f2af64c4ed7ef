package e2e

// The end-to-end scenarios for our gpu-kubelet-plugin, modelled on
// upstream's demo/specs/quickstart/v1/gpu-test{1,2,3,4}.yaml: a node with
// 8 x H100 80GB (profile h100-sxm), one with 8 x A100 in MIG mode (a100-mig:
// GPU 0 holds 3g.20gb, 2g.10gb and two 1g.5gb devices, GPU 1 one 7g.40gb; the
// profile's default MIG mode is on, so no A100 is offered whole) and one with
// 4 x L40S 48GB (l40s). Each scenario has its own namespace and deletes its
// pods, checking that the plugin removed the claims' CDI specs.

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"nvdra.local/test/simnode/harness"
	"nvdra.local/test/simnode/internal/cri"
)

const (
	h100Profile = "h100-sxm"
	a100Profile = "a100-mig"
	h100Product = "NVIDIA H100 80GB HBM3"
	l40sProfile = "l40s"
	l40sProduct = "NVIDIA L40S"
	workImage   = "simnode.test/shell:v1"
)

func TestGPUPluginScenarios(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	env := startGPUEnvironment(ctx, t, h100Profile, a100Profile, l40sProfile)

	// (a) gpu-test1 with one pod: one claim from a template, one GPU.
	t.Run("OnePodOneGPU", func(t *testing.T) {
		s := env.scenario(ctx, t, "gpu-test-a")
		s.claimTemplate("single-gpu", deviceRequest("gpu", gpuClass))
		pod := s.runPod("pod1", []string{"ctr"}, templateClaim("gpu", "single-gpu"))
		got := s.checkContainers(pod, 1, 0, "ctr")
		t.Logf("pod1 on %s got %s", pod.Spec.NodeName, got[0].device)
		s.deletePods(pod)
	})

	// (b) gpu-test2: two containers share one claim and see the same GPU.
	t.Run("TwoContainersShareClaim", func(t *testing.T) {
		s := env.scenario(ctx, t, "gpu-test-b")
		s.claimTemplate("single-gpu", deviceRequest("gpu", gpuClass))
		pod := s.runPod("pod", []string{"ctr0", "ctr1"}, templateClaim("shared-gpu", "single-gpu"))
		s.checkContainers(pod, 1, 0, "ctr0", "ctr1")
		s.deletePods(pod)
	})

	// (c) gpu-test1: a template per pod gives two pods two distinct GPUs.
	t.Run("TemplatePerPodDistinctGPUs", func(t *testing.T) {
		s := env.scenario(ctx, t, "gpu-test-c")
		s.claimTemplate("single-gpu", deviceRequest("gpu", gpuClass))
		pod1 := s.runPod("pod1", []string{"ctr"}, templateClaim("gpu", "single-gpu"))
		pod2 := s.runPod("pod2", []string{"ctr"}, templateClaim("gpu", "single-gpu"))
		got1 := s.checkContainers(pod1, 1, 0, "ctr")
		got2 := s.checkContainers(pod2, 1, 0, "ctr")
		if pod1.Spec.NodeName == pod2.Spec.NodeName && got1[0].device == got2[0].device {
			t.Errorf("both pods got %s on %s", got1[0].device, pod1.Spec.NodeName)
		}
		s.deletePods(pod1, pod2)
	})

	// (d) CEL selectors on an attribute and on a capacity.
	t.Run("CELSelectors", func(t *testing.T) {
		s := env.scenario(ctx, t, "gpu-test-d")
		s.claimTemplate("h100-by-name", deviceRequest("gpu", gpuClass,
			fmt.Sprintf("device.attributes['%s'].productName == '%s'", gpuDriverName, h100Product)))
		s.claimTemplate("l40s-by-name", deviceRequest("gpu", gpuClass,
			fmt.Sprintf("device.attributes['%s'].productName == '%s'", gpuDriverName, l40sProduct)))
		s.claimTemplate("over-60gi", deviceRequest("gpu", gpuClass,
			fmt.Sprintf("device.capacity['%s'].memory.compareTo(quantity('60Gi')) > 0", gpuDriverName)))
		h100 := s.runPod("h100", []string{"ctr"}, templateClaim("gpu", "h100-by-name"))
		l40s := s.runPod("l40s", []string{"ctr"}, templateClaim("gpu", "l40s-by-name"))
		big := s.runPod("big", []string{"ctr"}, templateClaim("gpu", "over-60gi"))
		for pod, want := range map[*corev1.Pod]string{h100: h100Profile, l40s: l40sProfile, big: h100Profile} {
			if got := env.nodeProfile(t, pod.Spec.NodeName); got != want {
				t.Errorf("pod %s ran on %s (%s), want a %s node", pod.Name, pod.Spec.NodeName, got, want)
			}
			s.checkContainers(pod, 1, 0, "ctr")
		}
		s.deletePods(h100, l40s, big)
	})

	// (e) gpu-test4's shape: a static MIG device through mig.nvidia.com.
	t.Run("StaticMIGDevice", func(t *testing.T) {
		s := env.scenario(ctx, t, "gpu-test-e")
		s.claimTemplate("mig-1g", deviceRequest("mig", migClass,
			fmt.Sprintf("device.attributes['%s'].profile == '1g.5gb'", gpuDriverName)))
		pod := s.runPod("pod", []string{"ctr"}, templateClaim("mig", "mig-1g"))
		if got := env.nodeProfile(t, pod.Spec.NodeName); got != a100Profile {
			t.Errorf("MIG pod ran on %s (%s), want the %s node", pod.Name, got, a100Profile)
		}
		got := s.checkContainers(pod, 1, 2, "ctr")
		if !strings.Contains(got[0].device, "-mig-") {
			t.Errorf("MIG claim allocated %q, not a MIG device", got[0].device)
		}
		s.deletePods(pod)
	})

	// (f) more GPUs than any node has: the pod stays Pending, and the
	// scheduler says why in PodScheduled.
	t.Run("TooManyGPUsUnschedulable", func(t *testing.T) {
		s := env.scenario(ctx, t, "gpu-test-f")
		req := deviceRequest("gpus", gpuClass)
		req.Exactly.AllocationMode = resourceapi.DeviceAllocationModeExactCount
		req.Exactly.Count = 9
		s.claimTemplate("nine-gpus", req)
		pod := s.createPod("pod", []string{"ctr"}, templateClaim("gpus", "nine-gpus"))
		pod = waitForPodIn(ctx, t, s.client, s.ns, pod.Name, func(p *corev1.Pod) bool {
			c := podCondition(p, corev1.PodScheduled)
			return c != nil && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable
		})
		c := podCondition(pod, corev1.PodScheduled)
		t.Logf("PodScheduled: %s: %s", c.Reason, c.Message)
		if !strings.Contains(c.Message, "cannot allocate all claims") {
			t.Errorf("PodScheduled message %q does not give the DRA reason", c.Message)
		}
		if pod.Status.Phase != corev1.PodPending || pod.Spec.NodeName != "" {
			t.Errorf("pod is %s on %q, want Pending and unbound", pod.Status.Phase, pod.Spec.NodeName)
		}
	})

	// (g) docs/gpus.md's examples, applied from the Markdown, including the
	// nvidia.com/gpu extended resource (gpu_guide_test.go).
	t.Run("GuideExamples", func(t *testing.T) { env.checkGPUGuide(ctx, t) })
}

// scenario is one self-contained scenario: its namespace and objects.
type scenario struct {
	t      *testing.T
	ctx    context.Context
	env    *gpuEnvironment
	client kubernetes.Interface
	ns     string
}

func (e *gpuEnvironment) scenario(ctx context.Context, t *testing.T, ns string) *scenario {
	t.Helper()
	must(t, "namespace", create(ctx, e.client.CoreV1().Namespaces(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))
	t.Cleanup(func() {
		// Pods still there (a failed scenario) go with the namespace.
		_ = e.client.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{})
	})
	return &scenario{t: t, ctx: ctx, env: e, client: e.client, ns: ns}
}

func deviceRequest(name, class string, selectors ...string) resourceapi.DeviceRequest {
	r := resourceapi.DeviceRequest{Name: name, Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: class}}
	for _, expr := range selectors {
		r.Exactly.Selectors = append(r.Exactly.Selectors, resourceapi.DeviceSelector{CEL: &resourceapi.CELDeviceSelector{Expression: expr}})
	}
	return r
}

func templateClaim(name, template string) corev1.PodResourceClaim {
	return corev1.PodResourceClaim{Name: name, ResourceClaimTemplateName: &template}
}

func (s *scenario) claimTemplate(name string, requests ...resourceapi.DeviceRequest) {
	s.t.Helper()
	must(s.t, "claim template "+name, create(s.ctx, s.client.ResourceV1().ResourceClaimTemplates(s.ns), &resourceapi.ResourceClaimTemplate{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: resourceapi.ResourceClaimTemplateSpec{Spec: resourceapi.ResourceClaimSpec{
			Devices: resourceapi.DeviceClaim{Requests: requests},
		}},
	}))
}

// createPod creates a pod whose containers all use every claim; each prints
// what the demo's nvidia-smi -L would stand for, then waits for SIGTERM.
func (s *scenario) createPod(name string, containers []string, claims ...corev1.PodResourceClaim) *corev1.Pod {
	s.t.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app": "pod"}},
		Spec: corev1.PodSpec{
			TerminationGracePeriodSeconds: ptr(int64(5)),
			ResourceClaims:                claims,
			Tolerations:                   []corev1.Toleration{{Key: "nvidia.com/gpu", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}},
		},
	}
	for _, c := range containers {
		ctr := corev1.Container{
			Name:    c,
			Image:   workImage,
			Command: []string{"sh", "-c", "echo NVIDIA_VISIBLE_DEVICES=$NVIDIA_VISIBLE_DEVICES; ls /dev; trap 'exit 0' TERM; sleep 9999 & wait"},
		}
		for _, claim := range claims {
			ctr.Resources.Claims = append(ctr.Resources.Claims, corev1.ResourceClaim{Name: claim.Name})
		}
		pod.Spec.Containers = append(pod.Spec.Containers, ctr)
	}
	pod, err := s.client.CoreV1().Pods(s.ns).Create(s.ctx, pod, metav1.CreateOptions{})
	must(s.t, "pod "+name, err)
	return pod
}

// runPod creates a pod and waits until it runs.
func (s *scenario) runPod(name string, containers []string, claims ...corev1.PodResourceClaim) *corev1.Pod {
	s.t.Helper()
	s.createPod(name, containers, claims...)
	// Bounded per pod, so that one pod that never runs leaves time for the
	// other scenarios.
	ctx, cancel := context.WithTimeout(s.ctx, 2*time.Minute)
	defer cancel()
	return waitForPodIn(ctx, s.t, s.client, s.ns, name, func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodRunning })
}

// allocation is one allocated device of a running pod.
type allocation struct {
	claim  *resourceapi.ResourceClaim
	device string // e.g. gpu-3, gpu-0-mig-1g5gb-19-2
	minor  int    // the (parent) GPU's minor
}

var deviceName = regexp.MustCompile(`^gpu-(\d+)(-mig-.+-\d+-\d+)?$`)

// allocations returns the devices allocated to the pod's claims, checking
// that each is a gpu.nvidia.com device of the pod's node whose (parent)
// minor is in the node's profile.
func (s *scenario) allocations(pod *corev1.Pod) []allocation {
	s.t.Helper()
	var out []allocation
	var names []string
	for _, c := range pod.Spec.ResourceClaims {
		if c.ResourceClaimName != nil {
			names = append(names, *c.ResourceClaimName)
		}
	}
	for _, status := range pod.Status.ResourceClaimStatuses {
		if status.ResourceClaimName == nil {
			s.t.Fatalf("pod %s: claim %s has no ResourceClaim", pod.Name, status.Name)
		}
		names = append(names, *status.ResourceClaimName)
	}
	// The claim the scheduler made for an extended resource (nvidia.com/gpu).
	if ext := pod.Status.ExtendedResourceClaimStatus; ext != nil {
		names = append(names, ext.ResourceClaimName)
	}
	for _, name := range names {
		claim, err := s.client.ResourceV1().ResourceClaims(s.ns).Get(s.ctx, name, metav1.GetOptions{})
		must(s.t, "get claim", err)
		if claim.Status.Allocation == nil {
			s.t.Fatalf("claim %s of running pod %s is not allocated", claim.Name, pod.Name)
		}
		for _, r := range claim.Status.Allocation.Devices.Results {
			if r.Driver != gpuDriverName || r.Pool != pod.Spec.NodeName {
				s.t.Errorf("claim %s: device %s/%s/%s, want driver %s and pool %s", claim.Name, r.Driver, r.Pool, r.Device, gpuDriverName, pod.Spec.NodeName)
			}
			m := deviceName.FindStringSubmatch(r.Device)
			if m == nil {
				s.t.Fatalf("claim %s: device name %q is neither gpu-<minor> nor a MIG device name", claim.Name, r.Device)
			}
			minor, _ := strconv.Atoi(m[1])
			if !s.env.profileHasMinor(s.t, pod.Spec.NodeName, minor) {
				s.t.Errorf("claim %s: device %s: profile of %s has no GPU with minor %d", claim.Name, r.Device, pod.Spec.NodeName, minor)
			}
			out = append(out, allocation{claim: claim, device: r.Device, minor: minor})
		}
	}
	return out
}

// checkContainers checks the allocation (wantDevices devices) and, for each
// named container, its recorded view: exactly the allocated GPUs' (or MIG
// parents') /dev/nvidia<minor> nodes, wantCaps /dev/nvidia-caps nodes per
// device, NVIDIA_VISIBLE_DEVICES=void; and that each claim's CDI spec is on
// the node.
func (s *scenario) checkContainers(pod *corev1.Pod, wantDevices, wantCaps int, containers ...string) []allocation {
	s.t.Helper()
	allocs := s.allocations(pod)
	if len(allocs) != wantDevices {
		s.t.Fatalf("pod %s: %d devices allocated (%v), want %d", pod.Name, len(allocs), allocs, wantDevices)
	}
	node := s.env.node(s.t, pod.Spec.NodeName)
	wantNodes := map[string]bool{}
	for _, a := range allocs {
		wantNodes[fmt.Sprintf("/dev/nvidia%d", a.minor)] = true
		spec := cdiSpecPath(node, a.claim)
		if _, err := os.Stat(spec); err != nil {
			s.t.Errorf("claim %s: no CDI spec on %s: %v", a.claim.Name, node.Config.Name, err)
		}
	}
	gpuNode := regexp.MustCompile(`^/dev/nvidia\d+$`)
	capNode := regexp.MustCompile(`^/dev/nvidia-caps/nvidia-cap\d+$`)
	for _, c := range containers {
		view, err := cri.ReadView(cri.ViewPath(node.Config.ViewsDir(), s.ns, pod.Name, c))
		if err != nil {
			s.t.Fatalf("view of %s/%s: %v", pod.Name, c, err)
		}
		got := map[string]bool{}
		caps := 0
		var all []string
		for _, d := range view.Devices {
			all = append(all, d.Path)
			switch {
			case gpuNode.MatchString(d.Path):
				got[d.Path] = true
			case capNode.MatchString(d.Path):
				caps++
			}
		}
		sort.Strings(all)
		s.t.Logf("%s/%s on %s: CDI devices %v, device nodes %v", pod.Name, c, node.Config.Name, view.CDIDevices, all)
		if !equalSets(got, wantNodes) {
			s.t.Errorf("%s/%s: GPU device nodes %v, want exactly %v", pod.Name, c, keys(got), keys(wantNodes))
		}
		if caps != wantCaps*len(allocs) {
			s.t.Errorf("%s/%s: %d /dev/nvidia-caps nodes, want %d", pod.Name, c, caps, wantCaps*len(allocs))
		}
		if v, _ := view.EnvValue("NVIDIA_VISIBLE_DEVICES"); v != "void" {
			s.t.Errorf("%s/%s: NVIDIA_VISIBLE_DEVICES=%q, want void", pod.Name, c, v)
		}
	}
	return allocs
}

// deletePods deletes the pods, waits until they are gone, and then until
// the plugin has removed their claims' CDI specs (NodeUnprepareResources).
func (s *scenario) deletePods(pods ...*corev1.Pod) {
	s.t.Helper()
	var specs []string
	for _, pod := range pods {
		node := s.env.node(s.t, pod.Spec.NodeName)
		for _, a := range s.allocations(pod) {
			specs = append(specs, cdiSpecPath(node, a.claim))
		}
		must(s.t, "delete pod", s.client.CoreV1().Pods(s.ns).Delete(s.ctx, pod.Name, metav1.DeleteOptions{}))
	}
	for _, pod := range pods {
		waitForPodGone(s.ctx, s.t, s.client, s.ns, pod.Name)
	}
	for _, spec := range specs {
		ctx, cancel := context.WithTimeout(s.ctx, time.Minute)
		err := waitForFileGone(ctx, spec)
		cancel()
		if err != nil {
			s.t.Errorf("CDI spec %s still there after the pod was deleted: %v", spec, err)
		}
	}
}

// cdiSpecPath is the plugin's transient spec of a claim on a node:
// <cdi-root>/k8s.gpu.nvidia.com-claim_<uid>.yaml.
func cdiSpecPath(node *harness.Node, claim *resourceapi.ResourceClaim) string {
	return filepath.Join(node.Config.Dir, pluginCDIRoot, fmt.Sprintf("k8s.%s-claim_%s.yaml", gpuDriverName, claim.UID))
}

// profileHasMinor reports whether the node's mock NVML profile has a GPU
// with that minor number.
func (e *gpuEnvironment) profileHasMinor(t *testing.T, node string, minor int) bool {
	t.Helper()
	path, err := harness.ProfilePath(e.nodeProfile(t, node))
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var profile struct {
		Devices []struct {
			Minor *int `json:"minor"`
		} `json:"devices"`
	}
	if err := json.Unmarshal(data, &profile); err != nil {
		t.Fatalf("profile %s: %v", path, err)
	}
	for _, d := range profile.Devices {
		if d.Minor != nil && *d.Minor == minor {
			return true
		}
	}
	return false
}

func podCondition(p *corev1.Pod, typ corev1.PodConditionType) *corev1.PodCondition {
	for i := range p.Status.Conditions {
		if p.Status.Conditions[i].Type == typ {
			return &p.Status.Conditions[i]
		}
	}
	return nil
}

func equalSets(a, b map[string]bool) bool {
	if len(a) != len(b) {
		return false
	}
	for k := range a {
		if !b[k] {
			return false
		}
	}
	return true
}

func keys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
