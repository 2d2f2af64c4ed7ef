package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"nvdra.local/test/simnode/harness"
	"nvdra.local/test/simnode/internal/cri"
)

// TestSimulatedNvidiaSMI runs upstream's quickstart command (`nvidia-smi -L`)
// in a pod given two GPUs by our gpu-kubelet-plugin on an h100-sxm node:
// the simulated nvidia-smi that make-driver-root put in the node's driver
// root reaches the container through the plugin's CDI spec (a mount of
// /usr/bin/nvidia-smi, which the runtime places in its overlay folder on
// PATH) and lists exactly the two allocated GPUs, by the UUIDs the profile
// gives their minors. `nvidia-smi -q` in the plugin container (the whole
// driver root at /driver-root) reports all eight.
func TestSimulatedNvidiaSMI(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	env := startGPUEnvironment(ctx, t, h100Profile)
	s := env.scenario(ctx, t, "nvidia-smi")
	two := deviceRequest("gpus", gpuClass)
	two.Exactly.AllocationMode = resourceapi.DeviceAllocationModeExactCount
	two.Exactly.Count = 2
	s.claimTemplate("two-gpus", two)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "smi"},
		Spec: corev1.PodSpec{
			TerminationGracePeriodSeconds: ptr(int64(5)),
			ResourceClaims:                []corev1.PodResourceClaim{templateClaim("gpus", "two-gpus")},
			Tolerations:                   []corev1.Toleration{{Key: "nvidia.com/gpu", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}},
			Containers: []corev1.Container{{
				Name:      "ctr",
				Image:     workImage,
				Command:   []string{"sh", "-c", "nvidia-smi -L; echo smi-exit=$?; trap 'exit 0' TERM; sleep 9999 & wait"},
				Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "gpus"}}},
			}},
		},
	}
	_, err := s.client.CoreV1().Pods(s.ns).Create(ctx, pod, metav1.CreateOptions{})
	must(t, "pod", err)
	pod = waitForPodIn(ctx, t, s.client, s.ns, "smi", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodRunning })
	allocs := s.allocations(pod)
	if len(allocs) != 2 {
		t.Fatalf("pod got %d devices, want 2", len(allocs))
	}
	uuids := profileUUIDs(t, h100Profile)
	var want []string
	for _, a := range allocs {
		want = append(want, uuids[a.minor])
	}
	sort.Strings(want)

	log := podLog(ctx, t, s, "smi", "smi-exit=")
	if !strings.Contains(log, "smi-exit=0") {
		t.Fatalf("nvidia-smi -L failed in the container:\n%s", log)
	}
	t.Logf("nvidia-smi -L in the container of %s:\n%s", pod.Spec.NodeName, log)
	line := regexp.MustCompile(`(?m)^GPU (\d+): NVIDIA H100 80GB HBM3 \(UUID: (GPU-[0-9a-f-]+)\)$`)
	var got []string
	for _, m := range line.FindAllStringSubmatch(log, -1) {
		got = append(got, m[2])
	}
	sort.Strings(got)
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("nvidia-smi -L in the container listed %v, want the allocated GPUs %v; log:\n%s", got, want, log)
	}

	// The plugin's container sees the whole driver root: all 8 GPUs.
	node := env.node(t, pod.Spec.NodeName)
	checkWorkloadDeviceNodes(ctx, t, s, node, "smi", "ctr", allocs)
	pluginPod := env.waitForPluginPods(ctx, t)[node.Config.Name]
	if pluginPod == "" {
		t.Fatalf("no plugin pod on %s", node.Config.Name)
	}
	out := execIn(ctx, t, env, pluginPod, containerDriverRoot+"/usr/bin/nvidia-smi", "-q")
	if !strings.Contains(out, "Attached GPUs                                          : 8") || !strings.Contains(out, "Product Architecture                               : Hopper") {
		t.Errorf("nvidia-smi -q in the plugin container:\n%s", out)
	}
	// The plugin reads the driver root's nodes as character devices too.
	out = execIn(ctx, t, env, pluginPod, "stat", "-c", "%F %t:%T", containerDriverRoot+"/dev/nvidiactl")
	if strings.TrimSpace(out) != "character special file c3:ff" {
		t.Errorf("%s/dev/nvidiactl in the plugin container: %q, want c 195:255", containerDriverRoot, out)
	}
}

// checkWorkloadDeviceNodes: the container of a pod given GPUs by the plugin
// has real character devices (issue #28 point 2): its view holds each
// allocated GPU's /dev/nvidia<minor> as c 195:<minor>, /dev/nvidiactl as
// c 195:255 and /dev/nvidia-uvm with the major the driver root's
// proc/devices declares for nvidia-uvm (no -1 anywhere), and stat in the
// container shows each as a character device with those numbers.
func checkWorkloadDeviceNodes(ctx context.Context, t *testing.T, s *scenario, node *harness.Node, pod, container string, allocs []allocation) {
	t.Helper()
	majors := procDevicesMajors(t, filepath.Join(node.Config.DriverRoot(), "proc", "devices"))
	frontend, uvm := majors["nvidia-frontend"], majors["nvidia-uvm"]
	if frontend != 195 || uvm == 0 {
		t.Fatalf("driver root's proc/devices: nvidia-frontend %d, nvidia-uvm %d", frontend, uvm)
	}
	want := map[string]string{
		"/dev/nvidiactl":  fmt.Sprintf("c %d:255", frontend),
		"/dev/nvidia-uvm": fmt.Sprintf("c %d:0", uvm),
	}
	for _, a := range allocs {
		want[fmt.Sprintf("/dev/nvidia%d", a.minor)] = fmt.Sprintf("c %d:%d", frontend, a.minor)
	}
	view, err := cri.ReadView(cri.ViewPath(node.Config.ViewsDir(), s.ns, pod, container))
	must(t, "view", err)
	got := map[string]string{}
	for _, d := range view.Devices {
		got[d.Path] = fmt.Sprintf("%s %d:%d", d.Type, d.Major, d.Minor)
		if d.Major < 0 || d.Minor < 0 {
			t.Errorf("view of %s/%s: device node %s is %s, want real numbers", s.ns, pod, d.Path, got[d.Path])
		}
	}
	var paths, wantStat []string
	for path, w := range want {
		if got[path] != w {
			t.Errorf("view of %s/%s: %s is %q, want %q (all: %v)", s.ns, pod, path, got[path], w, got)
		}
		var major, minor int
		if _, err := fmt.Sscanf(w, "c %d:%d", &major, &minor); err != nil {
			t.Fatal(err)
		}
		paths = append(paths, path)
		wantStat = append(wantStat, fmt.Sprintf("%s character special file %x:%x", path, major, minor))
	}
	sort.Strings(paths)
	sort.Strings(wantStat)
	out, err := harness.ExecSync(ctx, node, s.ns, pod, container, append([]string{"stat", "-c", "%n %F %t:%T"}, paths...)...)
	if err != nil {
		t.Fatalf("stat in %s/%s: %v\n%s", s.ns, pod, err, out)
	}
	if strings.TrimSpace(out) != strings.Join(wantStat, "\n") {
		t.Errorf("device nodes in %s/%s:\n%s\nwant:\n%s", s.ns, pod, out, strings.Join(wantStat, "\n"))
	}
}

// procDevicesMajors reads the character majors of a /proc/devices file by
// name.
func procDevicesMajors(t *testing.T, path string) map[string]int64 {
	t.Helper()
	data, err := os.ReadFile(path)
	must(t, "read "+path, err)
	out := map[string]int64{}
	chars := false
	for _, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		switch {
		case line == "Character devices:":
			chars = true
		case line == "Block devices:":
			chars = false
		case chars && line != "":
			var major int64
			var name string
			if _, err := fmt.Sscanf(line, "%d %s", &major, &name); err == nil {
				out[name] = major
			}
		}
	}
	return out
}

// profileUUIDs maps each GPU minor of a profile to its UUID.
func profileUUIDs(t *testing.T, profile string) map[int]string {
	t.Helper()
	path, err := harness.ProfilePath(profile)
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var p struct {
		Devices []struct {
			UUID  string `json:"uuid"`
			Minor int    `json:"minor"`
		} `json:"devices"`
	}
	if err := json.Unmarshal(data, &p); err != nil {
		t.Fatal(err)
	}
	out := map[int]string{}
	for _, d := range p.Devices {
		out[d.Minor] = d.UUID
	}
	return out
}

// podLog returns the pod's log once it holds want (read through the API
// server, following the stream).
func podLog(ctx context.Context, t *testing.T, s *scenario, pod, want string) string {
	t.Helper()
	var last string
	for ctx.Err() == nil {
		stream, err := s.client.CoreV1().Pods(s.ns).GetLogs(pod, &corev1.PodLogOptions{Follow: true}).Stream(ctx)
		if err != nil {
			last = err.Error()
			select {
			case <-ctx.Done():
			case <-time.After(200 * time.Millisecond):
			}
			continue
		}
		var b strings.Builder
		buf := make([]byte, 4096)
		for {
			n, err := stream.Read(buf)
			b.Write(buf[:n])
			if strings.Contains(b.String(), want) || err != nil {
				break
			}
		}
		stream.Close()
		last = b.String()
		if strings.Contains(last, want) {
			return last
		}
	}
	t.Fatalf("log of %s never held %q; last: %q", pod, want, last)
	return ""
}

// execIn runs a command in the plugin container through the runtime's
// ExecSync, as an exec probe would (kubectl exec needs a streaming server the
// simulated runtime does not have).
func execIn(ctx context.Context, t *testing.T, env *gpuEnvironment, pod string, cmd ...string) string {
	t.Helper()
	node, err := env.nodes.Node(podNode(ctx, t, env, pod))
	if err != nil {
		t.Fatal(err)
	}
	out, err := harness.ExecSync(ctx, node, gpuPluginNamespace, pod, gpuPluginContainer, cmd...)
	if err != nil {
		t.Fatalf("exec %v in %s: %v\n%s", cmd, pod, err, out)
	}
	return out
}

func podNode(ctx context.Context, t *testing.T, env *gpuEnvironment, pod string) string {
	t.Helper()
	p, err := env.client.CoreV1().Pods(gpuPluginNamespace).Get(ctx, pod, metav1.GetOptions{})
	must(t, "plugin pod", err)
	return p.Spec.NodeName
}
