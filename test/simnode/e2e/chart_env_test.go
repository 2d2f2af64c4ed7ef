package e2e

// The Helm chart on simulated nodes: the image folder with our binaries, the
// values that adapt the chart to simulated nodes, `helm` itself, and waits
// for what the chart installs. Used by TestHelmChartOnSimulatedNodes
// (chart_test.go) and the ComputeDomain cluster (cd_cluster_env_test.go).

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"

	"nvdra.local/test/simnode/harness"
)

const (
	chartImage     = "nvdra.local/dra-driver-nvidia-gpu"
	chartNamespace = "nvidia-dra-driver-gpu"
	chartRelease   = "nvdra"
	chartName      = "dra-driver-nvidia-gpu"
	// The chart's per-component selector label.
	chartComponentLabel = chartName + "-component"
	chartInstanceLabel  = "app.kubernetes.io/instance=" + chartRelease
	// Set by ctest; else looked for in the build folder as the others.
	envCDController = "NVDRA_CD_CONTROLLER"
	envWebhook      = "NVDRA_WEBHOOK"
)

// chartValues adapts the chart to simulated nodes, and only that: the mock
// driver root at the GPU Operator's path, the harness's GPU label for the
// plugins' affinity, make-driver-root's /proc/devices, and no fixed ports a
// second pod would also bind: all pods share the test's network namespace
// (run-go-tests), so the webhook listens on its pod's address only and the
// metrics endpoints are off. The webhook is otherwise the chart's default
// (two replicas, failurePolicy Fail), on the API server's real admission
// path: through its Service's EndpointSlice to a pod address.
const chartValues = `
gpuResourcesEnabledOverride: true
nvidiaDriverRoot: /run/nvidia/driver
image:
  repository: ` + chartImage + `
  tag: v0.0.0-e2e
controller:
  metrics:
    enabled: false
webhook:
  containers:
    webhook:
      env:
      - name: BIND_ADDRESS
        valueFrom:
          fieldRef:
            fieldPath: status.podIP
kubeletPlugin:
  metrics:
    enabled: false
  affinity:
    nodeAffinity:
      requiredDuringSchedulingIgnoredDuringExecution:
        nodeSelectorTerms:
        - matchExpressions:
          - key: nvdra.test/gpu-profile
            operator: Exists
  containers:
    gpus:
      healthcheckPort: -1
      env:
      - name: ALT_PROC_DEVICES_PATH
        value: /driver-root/proc/devices
    computeDomains:
      healthcheckPort: -1
      env:
      - name: ALT_PROC_DEVICES_PATH
        value: /driver-root/proc/devices
`

// chartValuesFile writes chartValues for env's cluster, whose pods must have
// addresses that Services reach: the chart's webhook is on the admission path
// with failurePolicy Fail.
func chartValuesFile(t *testing.T, env *environment) string {
	t.Helper()
	if !env.nodes.Private() {
		t.Fatalf("the chart's webhook (failurePolicy Fail) must be reachable through its Service, which needs the pod "+
			"network of run-go-tests' network namespace: run through test/simnode/run-go-tests without NVDRA_SIMNODE_NETNS=0 (%s is unset)",
			harness.PodNetworkEnv)
	}
	return writeValues(t, chartValues)
}

// layOutImage makes the driver's image as a folder laid out as the real
// image (scripts/build-image): usr/bin/ with a copy of each program
// (copies: the container sees only this folder, not the build tree),
// templates/ as the image ships it at /templates. The runtime lays it over
// the machine's root, so a program is at /usr/bin/<name> in the container.
func layOutImage(t *testing.T, programs map[string]string, templates string) string {
	t.Helper()
	dir := t.TempDir()
	copyFile := func(src, dst string, mode os.FileMode) {
		in, err := os.Open(src)
		must(t, "open "+src, err)
		defer in.Close()
		out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, mode)
		must(t, "create "+dst, err)
		_, err = io.Copy(out, in)
		must(t, "copy "+src, err)
		must(t, "close "+dst, out.Close())
	}
	for _, sub := range []string{"usr/bin", "templates"} {
		must(t, sub, os.MkdirAll(filepath.Join(dir, sub), 0o755))
	}
	for name, path := range programs {
		copyFile(path, filepath.Join(dir, "usr", "bin", name), 0o755)
	}
	entries, err := os.ReadDir(templates)
	must(t, "templates", err)
	for _, e := range entries {
		if !e.IsDir() {
			copyFile(filepath.Join(templates, e.Name()), filepath.Join(dir, "templates", e.Name()), 0o644)
		}
	}
	return dir
}

func podListWatch(client kubernetes.Interface, namespace, selector string) cache.ListerWatcher {
	return &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.LabelSelector = selector
			return client.CoreV1().Pods(namespace).List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.LabelSelector = selector
			return client.CoreV1().Pods(namespace).Watch(ctx, o)
		},
	}
}

// waitForChartPlugins waits until each of `nodes` nodes runs a Ready
// kubelet-plugin pod of the chart that satisfies cond; returns node -> pod.
func waitForChartPlugins(ctx context.Context, t *testing.T, client kubernetes.Interface, nodes int, cond func(*corev1.Pod) bool) map[string]string {
	t.Helper()
	ready := map[string]string{}
	all := map[string]*corev1.Pod{}
	_, err := until(ctx, podListWatch(client, chartNamespace, chartComponentLabel+"=kubelet-plugin"), &corev1.Pod{},
		func(ev watch.Event) (bool, error) {
			p, ok := ev.Object.(*corev1.Pod)
			if !ok {
				return false, nil
			}
			all[p.Name] = p
			good := ev.Type != watch.Deleted && p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning &&
				podReady(p) && cond(p)
			if good && p.Spec.NodeName != "" {
				ready[p.Spec.NodeName] = p.Name
			} else if ready[p.Spec.NodeName] == p.Name {
				delete(ready, p.Spec.NodeName)
			}
			return len(ready) == nodes, nil
		})
	if err != nil {
		for _, p := range all {
			t.Logf("plugin pod %s on %q: %+v", p.Name, p.Spec.NodeName, statusOf(p))
		}
		t.Fatalf("chart plugins ready on %d of %d nodes: %v", len(ready), nodes, err)
	}
	return ready
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// waitForDriverSlices waits until `nodes` nodes have a ResourceSlice of driver.
func waitForDriverSlices(ctx context.Context, t *testing.T, client kubernetes.Interface, driver string, nodes int) {
	t.Helper()
	seen := map[string]bool{}
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			return client.ResourceV1().ResourceSlices().List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			return client.ResourceV1().ResourceSlices().Watch(ctx, o)
		},
	}
	_, err := until(ctx, lw, &resourceapi.ResourceSlice{}, func(e watch.Event) (bool, error) {
		if s, ok := e.Object.(*resourceapi.ResourceSlice); ok && s.Spec.Driver == driver && s.Spec.NodeName != nil {
			seen[*s.Spec.NodeName] = e.Type != watch.Deleted && len(s.Spec.Devices) > 0
		}
		count := 0
		for _, present := range seen {
			if present {
				count++
			}
		}
		return count == nodes, nil
	})
	if err != nil {
		t.Fatalf("slices of %s on %d nodes (seen %v): %v", driver, nodes, seen, err)
	}
}

func waitForDeploymentAvailable(ctx context.Context, t *testing.T, client kubernetes.Interface, name string) {
	t.Helper()
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.FieldSelector = "metadata.name=" + name
			return client.AppsV1().Deployments(chartNamespace).List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector = "metadata.name=" + name
			return client.AppsV1().Deployments(chartNamespace).Watch(ctx, o)
		},
	}
	var last *appsv1.Deployment
	_, err := until(ctx, lw, &appsv1.Deployment{}, func(e watch.Event) (bool, error) {
		d, ok := e.Object.(*appsv1.Deployment)
		if !ok {
			return false, nil
		}
		last = d
		return e.Type != watch.Deleted && d.Status.AvailableReplicas >= 1, nil
	})
	if err != nil {
		pods, _ := client.CoreV1().Pods(chartNamespace).List(ctx, metav1.ListOptions{})
		for i := range pods.Items {
			t.Logf("pod %s on %q: %+v", pods.Items[i].Name, pods.Items[i].Spec.NodeName, statusOf(&pods.Items[i]))
		}
		t.Fatalf("deployment %s not available (last status %s): %v", name, fmt.Sprintf("%+v", statusOfDeployment(last)), err)
	}
}

// waitForNoReleasePods waits until no pod of the release exists.
func waitForNoReleasePods(ctx context.Context, t *testing.T, client kubernetes.Interface) {
	t.Helper()
	waitForNoPods(ctx, t, client, chartNamespace, "app.kubernetes.io/instance="+chartRelease)
}

// waitForNoPods waits until no pod of namespace matches selector.
func waitForNoPods(ctx context.Context, t *testing.T, client kubernetes.Interface, namespace, selector string) {
	t.Helper()
	present := map[string]bool{}
	none := func(store cache.Store) (bool, error) { return len(store.List()) == 0, nil }
	_, err := watchtools.UntilWithSync(ctx, podListWatch(client, namespace, selector),
		&corev1.Pod{}, none, func(e watch.Event) (bool, error) {
			if p, ok := e.Object.(*corev1.Pod); ok {
				present[p.Name] = e.Type != watch.Deleted
			}
			for _, here := range present {
				if here {
					return false, nil
				}
			}
			return true, nil
		})
	if err != nil {
		t.Fatalf("pods %s in %s still there (%v): %v", selector, namespace, present, err)
	}
}

func statusOfDeployment(d *appsv1.Deployment) any {
	if d == nil {
		return nil
	}
	return d.Status
}

func ignoreNotFound(err error) error {
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// waitForObject checks done, then again on every event of the watch, until
// it holds.
func waitForObject(ctx context.Context, t *testing.T, what string, done func(context.Context) (bool, error),
	watchFn func(context.Context, metav1.ListOptions) (watch.Interface, error)) {
	t.Helper()
	for {
		w, err := watchFn(ctx, metav1.ListOptions{})
		must(t, "watch for "+what, err)
		ok, err := done(ctx)
		if err != nil {
			w.Stop()
			t.Fatalf("%s: %v", what, err)
		}
		if ok {
			w.Stop()
			return
		}
		for ev := range w.ResultChan() {
			_ = ev
			if ok, err = done(ctx); ok || err != nil {
				break
			}
		}
		w.Stop()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if ok {
			return
		}
		if ctx.Err() != nil {
			t.Fatalf("waiting for %s: %v", what, ctx.Err())
		}
	}
}

// chartSetup is what a `helm install` of the chart on simulated nodes needs:
// the binaries laid out as the image folder, the chart, helm.
type chartSetup struct {
	helm, chart, templates string
	// image is the image folder (usr/bin/ with every program, templates/),
	// mapped to chartImage in harness.Options.Images.
	image string
}

// chartPrograms are the image's programs: the environment variable that
// names each (ctest sets all but envCDIHook; unset, the build folder's is
// taken), and its CMake target (also its name in usr/bin/). nvidia-cdi-hook
// is there as in the real image, where the plugins find it beside
// themselves and install it for the CDI specs' hooks.
var chartPrograms = []struct{ env, name string }{
	{envGPUPlugin, "gpu-kubelet-plugin"}, {envCDPlugin, "compute-domain-kubelet-plugin"},
	{envCDDaemon, "compute-domain-daemon"}, {envCDController, "compute-domain-controller"}, {envWebhook, "webhook"},
	{envCDIHook, "nvidia-cdi-hook"},
}

// envCDIHook names the nvidia-cdi-hook binary for the image folder.
const envCDIHook = "NVDRA_NVIDIA_CDI_HOOK"

// prepareChart finds the built programs and the mock NVML library (skips
// the test when one is missing, naming the target), lays out the image
// folder and points the harness at the library. Call before starting nodes.
func prepareChart(t *testing.T) *chartSetup {
	t.Helper()
	programs := map[string]string{}
	for _, b := range chartPrograms {
		p, why := findBuilt(b.env, filepath.Join("cmd", b.name, b.name), b.name)
		if p == "" {
			t.Skip(why)
		}
		programs[b.name] = p
	}
	library, why := findMockLibrary(programs["gpu-kubelet-plugin"])
	if library == "" {
		t.Skip(why)
	}
	s := &chartSetup{}
	var err error
	s.helm, err = harness.DefaultBinary("helm")
	must(t, "helm", err)
	s.chart, err = harness.FindCheckoutPath(filepath.Join("deployments", "helm", chartName))
	must(t, "chart", err)
	s.templates, err = harness.FindCheckoutPath("templates")
	must(t, "templates", err)
	s.image = layOutImage(t, programs, s.templates)
	t.Setenv(harness.EnvMockNVMLLibrary, library)
	return s
}

// nodeFiles lays out on each node what a GB200 host has beyond the mock
// driver root (layOutCDNodeFiles). Call once the nodes are started.
func (s *chartSetup) nodeFiles(t *testing.T, env *environment) {
	t.Helper()
	tmpl, err := os.ReadFile(filepath.Join(s.templates, cdTemplateFile))
	must(t, "read template", err)
	for _, n := range env.nodes.Nodes {
		layOutCDNodeFiles(t, n, tmpl)
	}
}

// runner returns a function that runs helm against kubeconfig with
// folders of its own (no user configuration), failing the test on error,
// and logs how long each command took.
func (s *chartSetup) runner(ctx context.Context, t *testing.T, kubeconfig string) func(args ...string) {
	home := t.TempDir()
	return func(args ...string) {
		t.Helper()
		start := time.Now()
		cmd := exec.CommandContext(ctx, s.helm, append([]string{"--kubeconfig", kubeconfig}, args...)...)
		cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+filepath.Join(home, "cache"),
			"HELM_CONFIG_HOME="+filepath.Join(home, "config"), "HELM_DATA_HOME="+filepath.Join(home, "data"))
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("helm %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		t.Logf("helm %s: %.1f s", args[0], time.Since(start).Seconds())
	}
}

// writeValues writes values (YAML) to a file for helm's -f.
func writeValues(t *testing.T, values string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "values.yaml")
	must(t, "values", os.WriteFile(path, []byte(values), 0o644))
	return path
}
