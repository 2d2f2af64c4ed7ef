package e2e

// TestHelmChartOnSimulatedNodes: `helm install` of the chart
// (deployments/helm/dra-driver-nvidia-gpu) on simulated GB200 nodes, where
// the chart's pods run our real binaries from one image folder (bin/ with
// every program, templates/), through the real kubelet path: the init
// container, both kubelet plugins publishing, the controller and the
// webhook Ready, the webhook serving the chart's generated certificate and
// rejecting a bad config; then
// `helm upgrade` with a changed value rolls the plugins, and `helm
// uninstall` leaves none of the chart's objects or pods.

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
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
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	watchtools "k8s.io/client-go/tools/watch"

	"nvdra.local/test/simnode/harness"
	"nvdra.local/test/simnode/internal/cri"
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
	// Away from 443 and 8080: every simulated container shares this
	// machine's network namespace.
	chartWebhookPort = 18443
)

// chartValues adapts the chart to simulated nodes, and only that: the mock
// driver root at the GPU Operator's path, the harness's GPU label for the
// plugins' affinity, make-driver-root's /proc/devices, no fixed ports a
// second node's plugin would also bind (all share one network namespace),
// and failurePolicy Ignore: the API server cannot reach the webhook through
// its Service, as EndpointSlices refuse the pods' loopback addresses.
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
  containerPort: ` + "18443" + `
  failurePolicy: Ignore
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

func TestHelmChartOnSimulatedNodes(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()

	programs := map[string]string{}
	for _, b := range []struct{ env, name string }{
		{envGPUPlugin, "gpu-kubelet-plugin"}, {envCDPlugin, "compute-domain-kubelet-plugin"},
		{envCDDaemon, "compute-domain-daemon"}, {envCDController, "compute-domain-controller"}, {envWebhook, "webhook"},
	} {
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
	helm, err := harness.DefaultBinary("helm")
	must(t, "helm", err)
	chart, err := harness.FindCheckoutPath(filepath.Join("deployments", "helm", chartName))
	must(t, "chart", err)
	templates, err := harness.FindCheckoutPath("templates")
	must(t, "templates", err)
	image := layOutImage(t, programs, templates)
	t.Setenv(harness.EnvMockNVMLLibrary, library)

	opts := harness.Options{
		Nodes:       2,
		Images:      map[string]string{chartImage: image},
		GPUProfiles: map[string]string{"sim-node-0": "gb200-tray", "sim-node-1": "gb200-tray"},
	}
	env := startEnvironmentWith(t, opts)
	client := env.nodes.Client()
	tmpl, err := os.ReadFile(filepath.Join(templates, cdTemplateFile))
	must(t, "read template", err)
	for _, n := range env.nodes.Nodes {
		layOutCDNodeFiles(t, n, tmpl)
	}
	valuesFile := filepath.Join(t.TempDir(), "values.yaml")
	must(t, "values", os.WriteFile(valuesFile, []byte(chartValues), 0o644))
	runHelm := func(args ...string) {
		t.Helper()
		start := time.Now()
		cmd := exec.CommandContext(ctx, helm, append([]string{"--kubeconfig", env.cp.Kubeconfig}, args...)...)
		cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+t.TempDir(), "HELM_CONFIG_HOME="+t.TempDir(),
			"HELM_DATA_HOME="+t.TempDir())
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("helm %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		t.Logf("helm %s: %.1f s", args[0], time.Since(start).Seconds())
	}

	// Install: every component up through the kubelet.
	start := time.Now()
	runHelm("install", chartRelease, chart, "--namespace", chartNamespace, "--create-namespace", "-f", valuesFile)
	pods := waitForChartPlugins(ctx, t, client, len(env.nodes.Nodes), func(*corev1.Pod) bool { return true })
	for _, driver := range []string{gpuDriverName, cdDriverName} {
		waitForDriverSlices(ctx, t, client, driver, len(env.nodes.Nodes))
	}
	for _, d := range []string{chartName + "-controller", chartName + "-webhook"} {
		waitForDeploymentAvailable(ctx, t, client, d)
	}
	t.Logf("install to plugins publishing, controller and webhook available: %.1f s", time.Since(start).Seconds())
	for _, n := range env.nodes.Nodes {
		for container, program := range map[string]string{"gpus": "gpu-kubelet-plugin", "compute-domains": "compute-domain-kubelet-plugin"} {
			view, err := cri.ReadView(cri.ViewPath(n.Config.ViewsDir(), chartNamespace, pods[n.Config.Name], container))
			must(t, "view of "+container+" on "+n.Config.Name, err)
			if len(view.Args) < 3 || view.Args[0] != program || view.Args[1] != "-v" || view.Args[2] != "4" {
				t.Errorf("%s on %s runs %q, want %s -v 4 (the chart's command)", container, n.Config.Name, view.Args, program)
			}
		}
	}

	// Figures for the chart's resource requests (printed, not asserted).
	all, err := client.CoreV1().Pods(chartNamespace).List(ctx, metav1.ListOptions{})
	must(t, "pods", err)
	for _, p := range all.Items {
		for _, c := range p.Spec.Containers {
			logContainerMemory(t, env, p.Spec.NodeName, p.Name, c.Name)
		}
	}

	// The webhook pod serves the chart's generated certificate and rejects a
	// claim whose GpuConfig does not validate, naming the field. Asked on its
	// pod address: the API server cannot reach it through the Service here,
	// since EndpointSlices refuse the simulated pods' loopback addresses
	// (test/cluster's webhook test covers the API server's call).
	checkWebhookRejects(ctx, t, client)

	// The controller, with the chart's RBAC, reconciles a ComputeDomain: the
	// daemon DaemonSet in the driver's namespace, the workload claim template
	// in the domain's; deleting the domain removes them and its finalizer.
	checkControllerReconciles(ctx, t, env, client)

	// Upgrade with a changed value: the plugins roll to the new setting.
	start = time.Now()
	runHelm("upgrade", chartRelease, chart, "--namespace", chartNamespace, "--reuse-values", "--set", "logVerbosity=6")
	waitForChartPlugins(ctx, t, client, len(env.nodes.Nodes), func(p *corev1.Pod) bool {
		for _, c := range p.Spec.Containers {
			for _, e := range c.Env {
				if e.Name == "LOG_VERBOSITY" && e.Value != "6" {
					return false
				}
			}
		}
		return true
	})
	for _, driver := range []string{gpuDriverName, cdDriverName} {
		waitForDriverSlices(ctx, t, client, driver, len(env.nodes.Nodes))
	}
	t.Logf("upgrade to new plugins publishing: %.1f s", time.Since(start).Seconds())

	// Uninstall: no object or pod of the release is left.
	start = time.Now()
	runHelm("uninstall", chartRelease, "--namespace", chartNamespace, "--wait", "--timeout", "3m")
	waitForNoReleasePods(ctx, t, client)
	t.Logf("uninstall to no pods: %.1f s", time.Since(start).Seconds())
	left := []string{}
	ds, err := client.AppsV1().DaemonSets("").List(ctx, metav1.ListOptions{LabelSelector: chartInstanceLabel})
	must(t, "daemonsets", err)
	for _, o := range ds.Items {
		left = append(left, "daemonset "+o.Name)
	}
	deps, err := client.AppsV1().Deployments("").List(ctx, metav1.ListOptions{LabelSelector: chartInstanceLabel})
	must(t, "deployments", err)
	for _, o := range deps.Items {
		left = append(left, "deployment "+o.Name)
	}
	classes, err := client.ResourceV1().DeviceClasses().List(ctx, metav1.ListOptions{LabelSelector: chartInstanceLabel})
	must(t, "device classes", err)
	for _, o := range classes.Items {
		left = append(left, "deviceclass "+o.Name)
	}
	hooks, err := client.AdmissionregistrationV1().ValidatingWebhookConfigurations().List(ctx, metav1.ListOptions{LabelSelector: chartInstanceLabel})
	must(t, "webhook configurations", err)
	for _, o := range hooks.Items {
		left = append(left, "validatingwebhookconfiguration "+o.Name)
	}
	if len(left) > 0 {
		t.Errorf("left after helm uninstall: %v", left)
	}
}

// layOutImage makes the driver's image as a folder: bin/ with a copy of each
// program (copies: the container sees only this folder, not the build
// tree), templates/ as the image ships it at /templates.
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
	for _, sub := range []string{"bin", "templates"} {
		must(t, sub, os.MkdirAll(filepath.Join(dir, sub), 0o755))
	}
	for name, path := range programs {
		copyFile(path, filepath.Join(dir, "bin", name), 0o755)
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
	present := map[string]bool{}
	none := func(store cache.Store) (bool, error) { return len(store.List()) == 0, nil }
	_, err := watchtools.UntilWithSync(ctx, podListWatch(client, chartNamespace, "app.kubernetes.io/instance="+chartRelease),
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
		t.Fatalf("pods of the release left after helm uninstall (%v): %v", present, err)
	}
}

func statusOfDeployment(d *appsv1.Deployment) any {
	if d == nil {
		return nil
	}
	return d.Status
}

// checkWebhookRejects posts an AdmissionReview of a ResourceClaim with an
// invalid GpuConfig to the webhook pod, trusting only the CA in the chart's
// Secret and naming the Service's DNS name, and expects a denial that names
// the field.
func checkWebhookRejects(ctx context.Context, t *testing.T, client kubernetes.Interface) {
	t.Helper()
	secret, err := client.CoreV1().Secrets(chartNamespace).Get(ctx, chartName+"-webhook-cert", metav1.GetOptions{})
	must(t, "webhook secret", err)
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(secret.Data["ca.crt"]) {
		t.Fatalf("secret %s has no PEM ca.crt", secret.Name)
	}
	pods, err := client.CoreV1().Pods(chartNamespace).List(ctx, metav1.ListOptions{LabelSelector: chartComponentLabel + "=webhook"})
	must(t, "webhook pods", err)
	if len(pods.Items) == 0 || pods.Items[0].Status.PodIP == "" {
		t.Fatalf("no webhook pod with an address: %+v", pods.Items)
	}
	review := map[string]any{
		"apiVersion": "admission.k8s.io/v1",
		"kind":       "AdmissionReview",
		"request": map[string]any{
			"uid":       "e2e-1",
			"kind":      map[string]string{"group": "resource.k8s.io", "version": "v1", "kind": "ResourceClaim"},
			"resource":  map[string]string{"group": "resource.k8s.io", "version": "v1", "resource": "resourceclaims"},
			"operation": "CREATE",
			"namespace": "chart-e2e",
			"name":      "bad-config",
			"object": map[string]any{
				"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
				"metadata": map[string]any{"name": "bad-config", "namespace": "chart-e2e"},
				"spec": map[string]any{"devices": map[string]any{
					"requests": []any{map[string]any{"name": "gpu", "exactly": map[string]any{"deviceClassName": gpuClass}}},
					"config": []any{map[string]any{"opaque": map[string]any{"driver": gpuDriverName, "parameters": map[string]any{
						"apiVersion": "resource.nvidia.com/v1beta1", "kind": "GpuConfig",
						"sharing": map[string]any{"strategy": "NoSuchStrategy"}}}}},
				}},
			},
		},
	}
	body, err := json.Marshal(review)
	must(t, "review", err)
	httpClient := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{
		RootCAs: roots, ServerName: chartName + "-webhook." + chartNamespace + ".svc"}}}
	url := fmt.Sprintf("https://%s/validate-resource-claim-parameters",
		net.JoinHostPort(pods.Items[0].Status.PodIP, fmt.Sprint(chartWebhookPort)))
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	must(t, "request", err)
	req.Header.Set("Content-Type", "application/json")
	resp, err := httpClient.Do(req)
	must(t, "POST "+url+" with the chart's CA", err)
	defer resp.Body.Close()
	var answer struct {
		Response struct {
			UID     string `json:"uid"`
			Allowed bool   `json:"allowed"`
			Status  struct {
				Message string `json:"message"`
			} `json:"status"`
		} `json:"response"`
	}
	must(t, "decode review answer", json.NewDecoder(resp.Body).Decode(&answer))
	if answer.Response.UID != "e2e-1" || answer.Response.Allowed ||
		!strings.Contains(answer.Response.Status.Message, "spec.devices.config[0].opaque.parameters") {
		t.Errorf("webhook answer %+v: want a denial naming spec.devices.config[0].opaque.parameters", answer.Response)
	} else {
		t.Logf("webhook denies: %s", answer.Response.Status.Message)
	}
}

// logContainerMemory prints VmRSS and Pss of a running container's process
// (from /proc: the simulated containers are processes of this machine).
func logContainerMemory(t *testing.T, env *environment, node, pod, container string) {
	t.Helper()
	n := env.node(t, node)
	view, err := cri.ReadView(cri.ViewPath(n.Config.ViewsDir(), chartNamespace, pod, container))
	if err != nil {
		t.Logf("memory of %s/%s: %v", pod, container, err)
		return
	}
	data, err := os.ReadFile(filepath.Join(n.Config.ContainersDir(), view.ContainerID, cri.PidFile))
	if err != nil {
		t.Logf("memory of %s/%s: %v", pod, container, err)
		return
	}
	pid := strings.TrimSpace(string(data))
	field := func(file, name string) string {
		b, err := os.ReadFile(filepath.Join("/proc", pid, file))
		if err != nil {
			return "?"
		}
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, name+":"); ok {
				return strings.TrimSpace(v)
			}
		}
		return "?"
	}
	t.Logf("memory of %s (%s on %s): VmRSS %s, Pss %s, RssAnon %s", container, pod, node,
		field("status", "VmRSS"), field("smaps_rollup", "Pss"), field("status", "RssAnon"))
}

func checkControllerReconciles(ctx context.Context, t *testing.T, env *environment, client kubernetes.Interface) {
	t.Helper()
	restConfig, err := clientcmd.BuildConfigFromFlags("", env.cp.Kubeconfig)
	must(t, "rest config", err)
	dyn, err := dynamic.NewForConfig(restConfig)
	must(t, "dynamic client", err)
	const ns, name = "chart-e2e", "domain"
	must(t, "namespace", create(ctx, client.CoreV1().Namespaces(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))
	start := time.Now()
	created, err := dyn.Resource(cdGVR).Namespace(ns).Create(ctx, &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "resource.nvidia.com/v1beta1",
		"kind":       "ComputeDomain",
		"metadata":   map[string]any{"name": name, "namespace": ns},
		"spec": map[string]any{
			"numNodes": int64(2),
			"channel":  map[string]any{"resourceClaimTemplate": map[string]any{"name": name + "-channel"}},
		},
	}}, metav1.CreateOptions{})
	must(t, "ComputeDomain", err)
	daemonSet := "computedomain-daemon-" + string(created.GetUID())
	waitForObject(ctx, t, "DaemonSet "+daemonSet, func(ctx context.Context) (bool, error) {
		_, err := client.AppsV1().DaemonSets(chartNamespace).Get(ctx, daemonSet, metav1.GetOptions{})
		return err == nil, ignoreNotFound(err)
	}, client.AppsV1().DaemonSets(chartNamespace).Watch)
	waitForObject(ctx, t, "workload claim template", func(ctx context.Context) (bool, error) {
		_, err := client.ResourceV1().ResourceClaimTemplates(ns).Get(ctx, name+"-channel", metav1.GetOptions{})
		return err == nil, ignoreNotFound(err)
	}, client.ResourceV1().ResourceClaimTemplates(ns).Watch)
	t.Logf("controller: ComputeDomain to daemon DaemonSet and workload template: %.1f s", time.Since(start).Seconds())
	must(t, "delete ComputeDomain", dyn.Resource(cdGVR).Namespace(ns).Delete(ctx, name, metav1.DeleteOptions{}))
	waitForObject(ctx, t, "ComputeDomain gone (finalizer released)", func(ctx context.Context) (bool, error) {
		_, err := dyn.Resource(cdGVR).Namespace(ns).Get(ctx, name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), ignoreNotFound(err)
	}, dyn.Resource(cdGVR).Namespace(ns).Watch)
	waitForObject(ctx, t, "daemon DaemonSet gone", func(ctx context.Context) (bool, error) {
		_, err := client.AppsV1().DaemonSets(chartNamespace).Get(ctx, daemonSet, metav1.GetOptions{})
		return apierrors.IsNotFound(err), ignoreNotFound(err)
	}, client.AppsV1().DaemonSets(chartNamespace).Watch)
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
