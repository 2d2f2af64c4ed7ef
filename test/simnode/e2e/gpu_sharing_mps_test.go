package e2e

// MPS at e2e tier: the chart installed with MPSSupport on a simulated H100
// node, upstream's MPS specs (testdata/upstream, unchanged) applied with
// kubectl. The plugin starts a control daemon Deployment per claim; it runs
// the simulated nvidia-cuda-mps-control (test/simmps) from the node's driver
// root. The specs' CUDA sample image is a folder here (cudaSampleImage):
// its /tmp/sample reports what a CUDA program sees of the sharing it got
// (the GPU, the MPS pipe directory, the daemon's settings) and runs on.

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"nvdra.local/test/simnode/harness"
)

const (
	// The image upstream's sharing specs run (any tag).
	cudaSampleImage = "nvcr.io/nvidia/k8s/cuda-sample"
	// Set by ctest: the folder of the simulated nvidia-cuda-mps-control,
	// which make-driver-root copies into every driver root.
	envSimMPSDir    = "NVDRA_SIMMPS_DIR"
	mpsDaemonPrefix = "mps-control-daemon-"
	// nvidia-smi -c's EXCLUSIVE_PROCESS and DEFAULT in the mock's state file.
	computeModeExclusiveProcess = 3
	computeModeDefault          = 0
)

// The simulated CUDA sample: a CUDA program's view of its sharing, printed
// once, then it runs until stopped. nvidia-cuda-mps-control is the image's
// copy of the simulated one (usr/bin/), talking to the claim's daemon through
// the pipe directory the CDI spec mounted.
const cudaSampleScript = `#!/bin/sh
uuid=$(nvidia-smi -L | sed -n 's/.*(UUID: \(GPU-[0-9a-f-]*\)).*/\1/p' | head -n 1)
echo "sample: GPU $uuid"
echo "sample: CUDA_MPS_PIPE_DIRECTORY=$CUDA_MPS_PIPE_DIRECTORY"
if [ -n "$CUDA_MPS_PIPE_DIRECTORY" ]; then
  echo "sample: MPS active thread percentage $(echo get_default_active_thread_percentage | nvidia-cuda-mps-control)"
  echo "sample: MPS pinned memory limit $(echo get_default_device_pinned_mem_limit $uuid | nvidia-cuda-mps-control)"
fi
echo "sample: ready"
exec sleep 2147483647
`

func TestGPUSharingMPS(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	setup := prepareChart(t)
	simmps, why := findBuilt(envSimMPSDir, "test/simmps/bin", "simmps_nvidia_cuda_mps_control")
	if simmps == "" {
		t.Skip(why)
	}
	t.Setenv(envSimMPSDir, simmps)
	opts := harness.Options{
		Nodes:       1,
		Verbosity:   3, // the kubelet's "Registered DRA plugin" line
		Images:      map[string]string{chartImage: setup.image, cudaSampleImage: layOutCudaSampleImage(t, simmps)},
		GPUProfiles: map[string]string{"sim-node-0": h100Profile},
	}
	base := startEnvironmentWith(t, opts)
	env := &gpuEnvironment{environment: base, client: base.nodes.Client(), profiles: map[string]string{"sim-node-0": h100Profile}}
	runHelm := setup.runner(ctx, t, base.cp.Kubeconfig)
	runHelm("install", chartRelease, setup.chart, "--namespace", chartNamespace, "--create-namespace",
		"-f", chartValuesFile(t, base), "-f", writeValues(t, mpsChartValues))
	waitForChartPlugins(ctx, t, env.client, 1, podReady)
	waitForDriverSlices(ctx, t, env.client, gpuDriverName, 1)
	// The kubelet takes pods for the driver once the plugin registered with
	// it; a pod that comes sooner waits out the kubelet's retry backoff
	// (~10 s), which the timings below are not about.
	node := base.nodes.Nodes[0]
	must(t, "plugin registered with the kubelet", waitForFile(ctx, node.LogPath(), func(log []byte) bool {
		return countLines(log, `"Registered DRA plugin"`, `driverName="`+gpuDriverName+`"`) > 0
	}))

	// gpu-test-mps: one pod, two containers sharing one GPU through one MPS
	// daemon with 50% of the threads and 10Gi of pinned memory.
	t.Run("gpu-test-mps", func(t *testing.T) {
		const ns = "gpu-test-mps"
		spec := upstreamSpec(t, "gpu-test-mps.yaml")
		t.Cleanup(func() { _, _ = env.kubectl(context.Background(), "delete", "--wait=false", "-f", spec) })
		daemons := watchMpsDaemons(ctx, t, env)
		submitted := time.Now()
		env.Kubectl(ctx, t, "apply", "-f", spec)
		pod := waitForPodNamed(ctx, t, env, ns, "test-pod")
		running := time.Now()
		uuid := checkMpsContainers(ctx, t, env, ns, pod.Name, []string{"mps-ctr0", "mps-ctr1"}, "50.0", "10240M")
		daemon := checkMpsDaemon(ctx, t, env, ns, pod, uuid)
		created, ready := daemons.seen(daemon)
		t.Logf("mps pod: submission to Running %.0f ms; daemon Deployment seen %.0f ms after submission, Ready %.0f ms after that",
			ms(running.Sub(submitted)), ms(created.Sub(submitted)), ms(ready.Sub(created)))
		writeBenchFigures(t, os.Getenv("SIMNODE_MPS_BENCH_OUT"), map[string]float64{
			"gpu_sharing.mps_pod_submission_to_running_ms":    ms(running.Sub(submitted)),
			"gpu_sharing.mps_submission_to_daemon_created_ms": ms(created.Sub(submitted)),
			"gpu_sharing.mps_daemon_created_to_ready_ms":      ms(ready.Sub(created)),
		})
		env.Kubectl(ctx, t, "delete", "-f", spec, "--wait=true", "--timeout=2m")
		checkMpsDaemonGone(ctx, t, env, pod.Spec.NodeName, daemon, uuid)
	})

	// gpu-test5: one claim, two GPUs: one time-sliced (Long) for two
	// containers, one shared through MPS by the two others.
	t.Run("gpu-test5", func(t *testing.T) {
		const ns = "gpu-test5"
		spec := upstreamSpec(t, "gpu-test5.yaml")
		t.Cleanup(func() { _, _ = env.kubectl(context.Background(), "delete", "--wait=false", "-f", spec) })
		env.Kubectl(ctx, t, "apply", "-f", spec)
		pod := waitForPodNamed(ctx, t, env, ns, "pod0")
		mpsGPU := checkMpsContainers(ctx, t, env, ns, pod.Name, []string{"mps-ctr0", "mps-ctr1"}, "50.0", "10240M")
		var tsGPU string
		for _, c := range []string{"ts-ctr0", "ts-ctr1"} {
			log := containerLog(ctx, t, env, ns, pod.Name, c, "sample: ready")
			if !strings.Contains(log, "sample: CUDA_MPS_PIPE_DIRECTORY=\n") {
				t.Errorf("%s: a time-sliced container got an MPS pipe directory:\n%s", c, log)
			}
			got := sampleGPU(t, c, log)
			if tsGPU != "" && got != tsGPU {
				t.Errorf("%s lists GPU %s, its sibling %s: the time-sliced request has one GPU", c, got, tsGPU)
			}
			tsGPU = got
		}
		if tsGPU == mpsGPU {
			t.Fatalf("the time-sliced and the MPS request got the same GPU %s", tsGPU)
		}
		if p := computePolicyOf(t, env, pod.Spec.NodeName, tsGPU); p.ComputeMode != computeModeDefault || p.TimeSlice != 3 {
			t.Errorf("time-sliced GPU %s: compute mode %d, time slice %d; want Default and 3 (Long)", tsGPU, p.ComputeMode, p.TimeSlice)
		}
		daemon := checkMpsDaemon(ctx, t, env, ns, pod, mpsGPU)
		env.Kubectl(ctx, t, "delete", "-f", spec, "--wait=true", "--timeout=2m")
		checkMpsDaemonGone(ctx, t, env, pod.Spec.NodeName, daemon, mpsGPU)
		if p := computePolicyOf(t, env, pod.Spec.NodeName, tsGPU); p.TimeSlice != 0 {
			t.Errorf("GPU %s kept time slice %d after its pod was deleted", tsGPU, p.TimeSlice)
		}
	})
}

// mpsChartValues turns on the sharing gates and leaves out what these tests
// do not use.
const mpsChartValues = `
featureGates:
  MPSSupport: true
  TimeSlicingSettings: true
resources:
  computeDomains:
    enabled: false
webhook:
  enabled: false
`

// layOutCudaSampleImage makes the CUDA sample image as a folder: tmp/sample
// (at /tmp/sample in the container, where upstream's image has its nbody),
// tmp/nvidia-mps (the mount point of the claim's MPS pipes) and usr/bin/
// with the simulated nvidia-cuda-mps-control.
func layOutCudaSampleImage(t *testing.T, simmps string) string {
	t.Helper()
	dir := t.TempDir()
	for _, sub := range []string{"usr/bin", "tmp/nvidia-mps"} {
		must(t, "image folder", os.MkdirAll(filepath.Join(dir, sub), 0o755))
	}
	must(t, "sample", os.WriteFile(filepath.Join(dir, "tmp", "sample"), []byte(cudaSampleScript), 0o755))
	tool, err := os.ReadFile(filepath.Join(simmps, "nvidia-cuda-mps-control"))
	must(t, "simulated nvidia-cuda-mps-control", err)
	must(t, "image tool", os.WriteFile(filepath.Join(dir, "usr", "bin", "nvidia-cuda-mps-control"), tool, 0o755))
	return dir
}

// checkMpsContainers checks that every container of `pod` in `containers`
// sees the same one GPU, the MPS pipe directory, and the daemon's settings;
// returns the GPU's UUID.
func checkMpsContainers(ctx context.Context, t *testing.T, env *gpuEnvironment, ns, pod string, containers []string,
	percentage, pinned string) string {
	t.Helper()
	var uuid string
	for _, c := range containers {
		log := containerLog(ctx, t, env, ns, pod, c, "sample: ready")
		for _, want := range []string{
			"sample: CUDA_MPS_PIPE_DIRECTORY=/tmp/nvidia-mps\n",
			"sample: MPS active thread percentage " + percentage + "\n",
			"sample: MPS pinned memory limit " + pinned + "\n",
		} {
			if !strings.Contains(log, want) {
				t.Errorf("%s/%s: no %q in its output:\n%s", pod, c, strings.TrimSpace(want), log)
			}
		}
		got := sampleGPU(t, c, log)
		if uuid != "" && got != uuid {
			t.Errorf("%s lists GPU %s, its sibling %s: one MPS request, one GPU", c, got, uuid)
		}
		uuid = got
	}
	return uuid
}

var sampleGPULine = regexp.MustCompile(`(?m)^sample: GPU (GPU-[0-9a-f-]+)$`)

func sampleGPU(t *testing.T, container, log string) string {
	t.Helper()
	m := sampleGPULine.FindStringSubmatch(log)
	if m == nil {
		t.Fatalf("%s: the sample saw no GPU:\n%s", container, log)
	}
	return m[1]
}

// checkMpsDaemon checks the claim's control daemon: its Deployment (name,
// namespace, labels, node, image as upstream's), the GPU in EXCLUSIVE_PROCESS,
// and what the daemon was told (its state file in the pipe folder). Returns
// the Deployment's name.
func checkMpsDaemon(ctx context.Context, t *testing.T, env *gpuEnvironment, ns string, pod corev1.Pod, uuid string) string {
	t.Helper()
	if len(pod.Status.ResourceClaimStatuses) != 1 || pod.Status.ResourceClaimStatuses[0].ResourceClaimName == nil {
		t.Fatalf("pod %s: claim statuses %v, want one", pod.Name, pod.Status.ResourceClaimStatuses)
	}
	claim, err := env.client.ResourceV1().ResourceClaims(ns).Get(ctx, *pod.Status.ResourceClaimStatuses[0].ResourceClaimName, metav1.GetOptions{})
	must(t, "claim", err)
	list, err := env.client.AppsV1().Deployments(chartNamespace).List(ctx, metav1.ListOptions{})
	must(t, "deployments", err)
	var daemon *appsv1.Deployment
	for i := range list.Items {
		if strings.HasPrefix(list.Items[i].Name, mpsDaemonPrefix+string(claim.UID)+"-") {
			daemon = &list.Items[i]
		}
	}
	if daemon == nil {
		t.Fatalf("no Deployment %s%s-* in %s", mpsDaemonPrefix, claim.UID, chartNamespace)
	}
	podSpec := daemon.Spec.Template.Spec
	if daemon.Labels["app"] != daemon.Name || podSpec.NodeName != pod.Spec.NodeName ||
		!strings.HasPrefix(podSpec.Containers[0].Image, chartImage+":") {
		t.Errorf("Deployment %s: labels %v, nodeName %q, image %q; want app=<name>, the pod's node %q, the driver's image",
			daemon.Name, daemon.Labels, podSpec.NodeName, podSpec.Containers[0].Image, pod.Spec.NodeName)
	}
	if p := computePolicyOf(t, env, pod.Spec.NodeName, uuid); p.ComputeMode != computeModeExclusiveProcess {
		t.Errorf("MPS GPU %s: compute mode %d, want %d (EXCLUSIVE_PROCESS)", uuid, p.ComputeMode, computeModeExclusiveProcess)
	}
	id := strings.TrimPrefix(daemon.Name, mpsDaemonPrefix)
	stateFile := filepath.Join(mpsFolder(t, env, pod.Spec.NodeName, id), "pipe", "simulated-mps-state.json")
	data, err := os.ReadFile(stateFile)
	must(t, "daemon state", err)
	var state struct {
		ActiveThreadPercentage *float64          `json:"defaultActiveThreadPercentage"`
		PinnedLimits           map[string]string `json:"defaultDevicePinnedMemLimits"`
	}
	must(t, "daemon state", json.Unmarshal(data, &state))
	if state.ActiveThreadPercentage == nil || *state.ActiveThreadPercentage != 50 || state.PinnedLimits[uuid] != "10240M" {
		t.Errorf("the daemon was told %s; want thread percentage 50 and pinned limit 10240M for %s", data, uuid)
	}
	return daemon.Name
}

// checkMpsDaemonGone waits until the daemon's Deployment is gone, then
// checks that its folder is removed and the GPU is back in DEFAULT.
func checkMpsDaemonGone(ctx context.Context, t *testing.T, env *gpuEnvironment, node, daemon, uuid string) {
	t.Helper()
	waitForObject(ctx, t, "Deployment "+daemon+" deleted", func(ctx context.Context) (bool, error) {
		_, err := env.client.AppsV1().Deployments(chartNamespace).Get(ctx, daemon, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		return false, err
	}, func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
		o.FieldSelector = "metadata.name=" + daemon
		return env.client.AppsV1().Deployments(chartNamespace).Watch(ctx, o)
	})
	folder := mpsFolder(t, env, node, strings.TrimPrefix(daemon, mpsDaemonPrefix))
	if _, err := os.Stat(folder); !os.IsNotExist(err) {
		t.Errorf("%s is still there after the claim was unprepared (%v)", folder, err)
	}
	if p := computePolicyOf(t, env, node, uuid); p.ComputeMode != computeModeDefault {
		t.Errorf("GPU %s stayed in compute mode %d after its MPS claim was unprepared", uuid, p.ComputeMode)
	}
}

// mpsFolder is the daemon's folder on the node: <plugins>/gpu.nvidia.com/mps/<id>.
func mpsFolder(t *testing.T, env *gpuEnvironment, node, id string) string {
	return filepath.Join(env.node(t, node).Config.RootDir(), "plugins", gpuDriverName, "mps", id)
}

// containerLog follows one container's log until it holds `want`.
func containerLog(ctx context.Context, t *testing.T, env *gpuEnvironment, ns, pod, container, want string) string {
	t.Helper()
	var last string
	for ctx.Err() == nil {
		raw, err := env.client.CoreV1().Pods(ns).GetLogs(pod, &corev1.PodLogOptions{Container: container}).DoRaw(ctx)
		if err == nil && strings.Contains(string(raw), want) {
			return string(raw)
		}
		last = string(raw)
		if err != nil {
			last = err.Error()
		}
		select {
		case <-ctx.Done():
		case <-time.After(200 * time.Millisecond):
		}
	}
	t.Fatalf("%s/%s/%s: no %q in its log: %s", ns, pod, container, want, last)
	return ""
}

// waitForPodNamed waits until the pod runs.
func waitForPodNamed(ctx context.Context, t *testing.T, env *gpuEnvironment, ns, name string) corev1.Pod {
	t.Helper()
	var pod corev1.Pod
	waitForObject(ctx, t, "pod "+ns+"/"+name+" Running", func(ctx context.Context) (bool, error) {
		p, err := env.client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, ignoreNotFound(err)
		}
		pod = *p
		return p.Status.Phase == corev1.PodRunning, nil
	}, func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
		o.FieldSelector = "metadata.name=" + name
		return env.client.CoreV1().Pods(ns).Watch(ctx, o)
	})
	return pod
}

// mpsDaemonTimes records when the test first saw each daemon Deployment and
// when it first saw it with a Ready replica, from a watch started before
// the spec is applied.
type mpsDaemonTimes struct {
	mu      sync.Mutex
	created map[string]time.Time
	ready   map[string]time.Time
}

func watchMpsDaemons(ctx context.Context, t *testing.T, env *gpuEnvironment) *mpsDaemonTimes {
	t.Helper()
	times := &mpsDaemonTimes{created: map[string]time.Time{}, ready: map[string]time.Time{}}
	w, err := env.client.AppsV1().Deployments(chartNamespace).Watch(ctx, metav1.ListOptions{})
	must(t, "watch deployments", err)
	t.Cleanup(w.Stop)
	go func() {
		for ev := range w.ResultChan() {
			d, ok := ev.Object.(*appsv1.Deployment)
			if !ok || !strings.HasPrefix(d.Name, mpsDaemonPrefix) {
				continue
			}
			now := time.Now()
			times.mu.Lock()
			if _, seen := times.created[d.Name]; !seen {
				times.created[d.Name] = now
			}
			if _, seen := times.ready[d.Name]; !seen && d.Status.ReadyReplicas >= 1 {
				times.ready[d.Name] = now
			}
			times.mu.Unlock()
		}
	}()
	return times
}

func (m *mpsDaemonTimes) seen(name string) (created, ready time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.created[name], m.ready[name]
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// writeBenchFigures appends one JSON line per figure to path (scripts/bench
// sets it; empty: nothing written).
func writeBenchFigures(t *testing.T, path string, figures map[string]float64) {
	t.Helper()
	if path == "" {
		return
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	must(t, "bench output", err)
	defer f.Close()
	for name, value := range figures {
		line, err := json.Marshal(map[string]any{"name": name, "value": value, "unit": "ms"})
		must(t, "bench figure", err)
		_, err = f.Write(append(line, '\n'))
		must(t, "bench output", err)
	}
}
