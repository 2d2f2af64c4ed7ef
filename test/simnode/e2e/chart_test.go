package e2e

// TestHelmChartOnSimulatedNodes: `helm install` of the chart
// (deployments/helm/dra-driver-nvidia-gpu) on simulated GB200 nodes, where
// the chart's pods run our real binaries from one image folder laid out as
// the real image (usr/bin/ with every program, templates/; the container's
// root is it over the machine's, image_root_test.go), through the real
// kubelet path: the init
// container, both kubelet plugins publishing, the controller and the
// webhook Ready, the webhook on the API server's admission path (a bad
// config refused, other vendors' claims admitted while it is down); then
// `helm upgrade` with a changed value rolls the plugins, and `helm
// uninstall` leaves none of the chart's objects or pods.

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
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"nvdra.local/test/simnode/harness"
	"nvdra.local/test/simnode/internal/cri"
)

func TestHelmChartOnSimulatedNodes(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()

	setup := prepareChart(t)
	opts := harness.Options{
		Nodes:       2,
		Images:      map[string]string{chartImage: setup.image},
		GPUProfiles: map[string]string{"sim-node-0": "gb200-tray", "sim-node-1": "gb200-tray"},
	}
	env := startEnvironmentWith(t, opts)
	client := env.nodes.Client()
	setup.nodeFiles(t, env)
	valuesFile := chartValuesFile(t, env)
	runHelm := setup.runner(ctx, t, env.cp.Kubeconfig)

	// Install: every component up through the kubelet.
	start := time.Now()
	runHelm("install", chartRelease, setup.chart, "--namespace", chartNamespace, "--create-namespace", "-f", valuesFile)
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
	checkImageRoot(ctx, t, env, setup.image, pods)

	// Figures for the chart's resource requests (printed, not asserted).
	all, err := client.CoreV1().Pods(chartNamespace).List(ctx, metav1.ListOptions{})
	must(t, "pods", err)
	for _, p := range all.Items {
		for _, c := range p.Spec.Containers {
			logContainerMemory(t, env, p.Spec.NodeName, p.Name, c.Name)
		}
	}

	// The webhook on the API server's real admission path: a claim whose
	// GpuConfig does not validate is refused, naming the field; with every
	// webhook pod down, another vendor's claim is still admitted (the
	// chart's matchConditions keep it from the webhook) while ours are
	// refused (failurePolicy Fail); once a replica is back, the bad config
	// is refused by the webhook again.
	checkWebhookAdmission(ctx, t, client)

	// The controller, with the chart's RBAC, reconciles a ComputeDomain: the
	// daemon DaemonSet in the driver's namespace, the workload claim template
	// in the domain's; deleting the domain removes them and its finalizer.
	checkControllerReconciles(ctx, t, env, client)

	// The debug bundle on this cluster, with a GPU claim and a ComputeDomain
	// prepared (debug_bundle_test.go; here to share the cluster).
	checkDebugBundle(ctx, t, env, client)

	// Upgrade with a changed value: the plugins roll to the new setting.
	start = time.Now()
	runHelm("upgrade", chartRelease, setup.chart, "--namespace", chartNamespace, "--reuse-values", "--set", "logVerbosity=6")
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

// checkWebhookAdmission creates claims through the API server, which calls
// the chart's webhook through its Service (an EndpointSlice of pod
// addresses), and scales the webhook to none and back.
func checkWebhookAdmission(ctx context.Context, t *testing.T, client kubernetes.Interface) {
	t.Helper()
	const ns = "chart-e2e"
	must(t, "namespace", create(ctx, client.CoreV1().Namespaces(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))
	deployment := chartName + "-webhook"
	claims := client.ResourceV1().ResourceClaims(ns)
	badConfig := func(name string) *resourceapi.ResourceClaim {
		return &resourceapi.ResourceClaim{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{
				Requests: []resourceapi.DeviceRequest{{Name: "gpu", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: gpuClass}}},
				Config: []resourceapi.DeviceClaimConfiguration{{DeviceConfiguration: resourceapi.DeviceConfiguration{
					Opaque: &resourceapi.OpaqueDeviceConfiguration{Driver: gpuDriverName, Parameters: k8sruntime.RawExtension{
						Raw: []byte(`{"apiVersion":"resource.nvidia.com/v1beta1","kind":"GpuConfig","sharing":{"strategy":"NoSuchStrategy"}}`)}},
				}}},
			}},
		}
	}
	refusedByWebhook := func(when string) {
		t.Helper()
		_, err := claims.Create(ctx, badConfig("bad-config"), metav1.CreateOptions{})
		if err == nil || !strings.Contains(err.Error(), `admission webhook "gpu.nvidia.com" denied the request`) ||
			!strings.Contains(err.Error(), "spec.devices.config[0].opaque.parameters") {
			t.Fatalf("%s: a claim with a bad GpuConfig: %v; want the webhook's denial naming spec.devices.config[0].opaque.parameters", when, err)
		}
		t.Logf("%s: refused: %v", when, err)
	}

	// The Service's endpoints are the pods' addresses, from the pod network.
	slices, err := client.DiscoveryV1().EndpointSlices(chartNamespace).List(ctx, metav1.ListOptions{LabelSelector: "kubernetes.io/service-name=" + deployment})
	must(t, "webhook EndpointSlices", err)
	var addresses []string
	for _, s := range slices.Items {
		for _, e := range s.Endpoints {
			addresses = append(addresses, e.Addresses...)
		}
	}
	t.Logf("webhook Service endpoints: %v", addresses)
	refusedByWebhook("webhook up")

	// Every webhook pod down.
	scaleWebhook := func(replicas int32) {
		t.Helper()
		scale, err := client.AppsV1().Deployments(chartNamespace).GetScale(ctx, deployment, metav1.GetOptions{})
		must(t, "webhook scale", err)
		scale.Spec.Replicas = replicas
		_, err = client.AppsV1().Deployments(chartNamespace).UpdateScale(ctx, deployment, scale, metav1.UpdateOptions{})
		must(t, fmt.Sprintf("scale the webhook to %d", replicas), err)
	}
	scaleWebhook(0)
	waitForNoPods(ctx, t, client, chartNamespace, chartComponentLabel+"=webhook")
	other := &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "other-vendor"},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{
			Name: "nic", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: "nic.example.com"}}}}},
	}
	if _, err := claims.Create(ctx, other, metav1.CreateOptions{}); err != nil {
		t.Fatalf("every webhook pod down: another vendor's claim refused: %v", err)
	}
	_, err = claims.Create(ctx, badConfig("while-down"), metav1.CreateOptions{})
	if err == nil || !strings.Contains(err.Error(), `failed calling webhook "gpu.nvidia.com"`) {
		t.Fatalf("every webhook pod down: a claim with our config: %v; want failurePolicy Fail's refusal", err)
	}
	t.Logf("webhook down: another vendor's claim admitted; ours refused: %v", err)

	// One replica back: the bad config is refused by the webhook again.
	scaleWebhook(1)
	waitForDeploymentAvailable(ctx, t, client, deployment)
	refusedByWebhook("one replica back")
	must(t, "delete the other vendor's claim", claims.Delete(ctx, other.Name, metav1.DeleteOptions{}))
	scaleWebhook(2)
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
