package e2e

// The environment of the gpu-kubelet-plugin tests (gpu_plugin_test.go): GPU
// nodes with mock NVML driver roots, and, installed from Go, what the Helm
// chart will install later (upstream deployments/helm/dra-driver-nvidia-gpu:
// kubeletplugin.yaml, rbac-kubeletplugin.yaml, deviceclass-{gpu,mig}.yaml).

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"nvdra.local/test/simnode/harness"
	"nvdra.local/test/simnode/internal/cri"
	"nvdra.local/test/simnode/nodeconfig"
)

const (
	gpuDriverName = "gpu.nvidia.com"
	// gpuPluginImage is mapped, in every node's image map, to the plugin
	// binary (envGPUPlugin).
	gpuPluginImage     = "nvdra.local/dra-driver-nvidia-gpu"
	gpuPluginImageTag  = "v0.0.0-e2e"
	gpuPluginNamespace = "nvidia-dra-driver-gpu"
	// The chart's names: <fullname>-service-account-kubeletplugin and
	// <fullname>-kubelet-plugin, with fullname nvidia-dra-driver-gpu.
	gpuPluginServiceAccount = "nvidia-dra-driver-gpu-service-account-kubeletplugin"
	gpuPluginDaemonSet      = "nvidia-dra-driver-gpu-kubelet-plugin"
	gpuPluginContainer      = "gpus"
	gpuClass                = "gpu.nvidia.com"
	migClass                = "mig.nvidia.com"
	// containerDriverRoot is where the plugin container sees the node's
	// driver root (the chart's mount path, the plugin's default).
	containerDriverRoot = "/driver-root"
	pluginCDIRoot       = "/var/run/cdi"
	registrarDir        = "/var/lib/kubelet/plugins_registry"
	pluginsDir          = "/var/lib/kubelet/plugins"

	// envGPUPlugin names the gpu-kubelet-plugin binary; ctest sets it to
	// $<TARGET_FILE:gpu-kubelet-plugin>.
	envGPUPlugin = "NVDRA_GPU_KUBELET_PLUGIN"
	// envBuildDir is a CMake build folder to look in when envGPUPlugin is
	// unset (default: build/ of the checkout).
	envBuildDir = "NVDRA_BUILD_DIR"
)

// findGPUPlugin returns the gpu-kubelet-plugin binary, or "" and why not.
// $NVDRA_GPU_KUBELET_PLUGIN wins (ctest always sets it; a path not built
// yet is a skip that says so); else <$NVDRA_BUILD_DIR or <checkout>/build>/
// cmd/gpu-kubelet-plugin/gpu-kubelet-plugin.
func findGPUPlugin(t *testing.T) (string, string) {
	t.Helper()
	if p := os.Getenv(envGPUPlugin); p != "" {
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Sprintf("%s=%s is not there (build target gpu-kubelet-plugin): %v", envGPUPlugin, p, err)
		}
		return p, ""
	}
	var candidates []string
	if dir := os.Getenv(envBuildDir); dir != "" {
		candidates = append(candidates, dir)
	}
	if dir, err := harness.FindCheckoutPath("build"); err == nil {
		candidates = append(candidates, dir)
	}
	for _, dir := range candidates {
		p := filepath.Join(dir, "cmd", "gpu-kubelet-plugin", "gpu-kubelet-plugin")
		if _, err := os.Stat(p); err == nil {
			return p, ""
		}
	}
	return "", fmt.Sprintf("no gpu-kubelet-plugin binary: set %s (ctest does), or %s to a CMake build folder, or build it in <checkout>/build (looked in %v)",
		envGPUPlugin, envBuildDir, candidates)
}

// findMockLibrary returns the mock libnvidia-ml.so.1: $NVDRA_MOCKNVML_PATH,
// else next to the plugin in the same build folder.
func findMockLibrary(pluginPath string) (string, string) {
	if p := os.Getenv(harness.EnvMockNVMLLibrary); p != "" {
		return p, ""
	}
	// <build>/cmd/gpu-kubelet-plugin/gpu-kubelet-plugin -> <build>/test/mocknvml.
	build := filepath.Dir(filepath.Dir(filepath.Dir(pluginPath)))
	p := filepath.Join(build, "test", "mocknvml", "libnvidia-ml.so.1")
	if _, err := os.Stat(p); err == nil {
		return p, ""
	}
	return "", fmt.Sprintf("no mock NVML library: set %s (ctest does) or build target nvdra_mocknvml (looked for %s)", harness.EnvMockNVMLLibrary, p)
}

// gpuEnvironment is a cluster whose nodes have mock GPUs and run the
// plugin as a DaemonSet.
type gpuEnvironment struct {
	*environment
	client   kubernetes.Interface
	profiles map[string]string // node name -> profile name
}

// startGPUEnvironment starts one node per profile (node i gets profiles[i]),
// installs the driver's objects and the plugin DaemonSet, checks that the
// plugin runs on every node with the chart's arguments, environment and
// mounts, and waits for every node's ResourceSlices. It skips the test when
// there is no plugin binary, or when the binary is still the placeholder
// that only waits for SIGTERM.
func startGPUEnvironment(ctx context.Context, t *testing.T, profiles ...string) *gpuEnvironment {
	t.Helper()
	return startGPUEnvironmentWithEnv(ctx, t, nil, profiles...)
}

// startGPUEnvironmentWithEnv is startGPUEnvironment with extra environment
// for the plugin container (FEATURE_GATES, CONSUMABLE_SHARES: the chart's
// featureGates and consumableShares values).
func startGPUEnvironmentWithEnv(ctx context.Context, t *testing.T, pluginEnv []corev1.EnvVar, profiles ...string) *gpuEnvironment {
	t.Helper()
	plugin, why := findGPUPlugin(t)
	if plugin == "" {
		t.Skip(why)
	}
	library, why := findMockLibrary(plugin)
	if library == "" {
		t.Skip(why)
	}
	t.Setenv(harness.EnvMockNVMLLibrary, library)
	t.Logf("plugin %s, mock NVML %s", plugin, library)

	opts := harness.Options{
		Nodes:       len(profiles),
		Images:      map[string]string{gpuPluginImage: plugin},
		GPUProfiles: map[string]string{},
	}
	byNode := map[string]string{}
	for i, p := range profiles {
		name := fmt.Sprintf("sim-node-%d", i)
		opts.GPUProfiles[name] = p
		byNode[name] = p
	}
	env := &gpuEnvironment{environment: startEnvironmentWith(t, opts), profiles: byNode}
	env.client = env.nodes.Client()

	installGPUDriver(ctx, t, env.client, env.altProcDevices(), pluginEnv)
	pods := env.checkPluginPods(ctx, t)
	env.waitForGPUSlices(ctx, t, pods)
	return env
}

// altProcDevices is the container path of the driver root's /proc/devices
// stand-in, when make-driver-root lays one out (upstream's mock NVML setup
// passes ALT_PROC_DEVICES_PATH so the plugin reads it, not this machine's).
func (e *gpuEnvironment) altProcDevices() string {
	for _, n := range e.nodes.Nodes {
		if _, err := os.Stat(filepath.Join(n.Config.DriverRoot(), "proc", "devices")); err == nil {
			return containerDriverRoot + "/proc/devices"
		}
	}
	return ""
}

// installGPUDriver creates what the chart renders for the GPU plugin:
// namespace, service account, RBAC, the two DeviceClasses and the
// kubelet-plugin DaemonSet (gpus container only).
func installGPUDriver(ctx context.Context, t *testing.T, client kubernetes.Interface, altProcDevices string, pluginEnv []corev1.EnvVar) {
	t.Helper()
	must(t, "namespace", create(ctx, client.CoreV1().Namespaces(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: gpuPluginNamespace}}))
	must(t, "service account", create(ctx, client.CoreV1().ServiceAccounts(gpuPluginNamespace),
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: gpuPluginServiceAccount}}))
	must(t, "cluster role", create(ctx, client.RbacV1().ClusterRoles(), &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "nvidia-dra-driver-gpu-kubeletplugin-role"},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{"resource.k8s.io"}, Resources: []string{"resourceclaims"}, Verbs: []string{"get", "list", "watch"}},
			{APIGroups: []string{"resource.k8s.io"}, Resources: []string{"resourceslices"},
				Verbs: []string{"get", "list", "watch", "create", "update", "patch", "delete", "deletecollection"}},
			{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get", "list", "watch", "update", "patch"}},
			{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "list", "watch"}},
			{APIGroups: []string{"", "events.k8s.io"}, Resources: []string{"events"}, Verbs: []string{"create", "patch", "update"}},
		},
	}))
	must(t, "cluster role binding", create(ctx, client.RbacV1().ClusterRoleBindings(), &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "nvidia-dra-driver-gpu-kubeletplugin-role-binding"},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "nvidia-dra-driver-gpu-kubeletplugin-role"},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: gpuPluginServiceAccount, Namespace: gpuPluginNamespace}},
	}))
	for name, typ := range map[string]string{gpuClass: "gpu", migClass: "mig", vfioClass: "vfio"} {
		class := &resourceapi.DeviceClass{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: resourceapi.DeviceClassSpec{Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{
				Expression: fmt.Sprintf("device.driver == '%s' && device.attributes['%s'].type == '%s'", gpuDriverName, gpuDriverName, typ),
			}}}},
		}
		if name == gpuClass {
			class.Spec.ExtendedResourceName = ptr("nvidia.com/gpu")
		}
		must(t, "device class "+name, create(ctx, client.ResourceV1().DeviceClasses(), class))
	}
	must(t, "daemonset", create(ctx, client.AppsV1().DaemonSets(gpuPluginNamespace), gpuPluginDaemonSetSpec(altProcDevices, pluginEnv)))
}

// gpuPluginDaemonSetSpec is the chart's kubelet-plugin DaemonSet with
// nvidiaDriverRoot=/run/nvidia/driver, reduced to the gpus container: the
// image's program is the entrypoint (no bash wrapper, no init container
// waiting for nvidia-smi), flags as the chart's env sets them, given as
// arguments too.
func gpuPluginDaemonSetSpec(altProcDevices string, pluginEnv []corev1.EnvVar) *appsv1.DaemonSet {
	image := gpuPluginImage + ":" + gpuPluginImageTag
	hostPath := func(name, path string, typ corev1.HostPathType) corev1.Volume {
		return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: path, Type: &typ}}}
	}
	field := func(path string) *corev1.EnvVarSource {
		return &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: path}}
	}
	bidirectional, hostToContainer := corev1.MountPropagationBidirectional, corev1.MountPropagationHostToContainer
	env := []corev1.EnvVar{
		{Name: "LOG_VERBOSITY", Value: "4"},
		{Name: "NVIDIA_DRIVER_ROOT", Value: nodeconfig.DriverRootHostPath},
		{Name: "NVIDIA_VISIBLE_DEVICES", Value: "void"},
		{Name: "CDI_ROOT", Value: pluginCDIRoot},
		{Name: "NVIDIA_MIG_CONFIG_DEVICES", Value: "all"},
		{Name: "NODE_NAME", ValueFrom: field("spec.nodeName")},
		{Name: "NAMESPACE", ValueFrom: field("metadata.namespace")},
		{Name: "SERVICE_ACCOUNT_NAME", ValueFrom: field("spec.serviceAccountName")},
		{Name: "IMAGE_NAME", Value: image},
		{Name: "IMAGE_PULL_POLICY", Value: "IfNotPresent"},
		{Name: "KUBELET_REGISTRAR_DIRECTORY_PATH", Value: registrarDir},
		{Name: "KUBELET_PLUGINS_DIRECTORY_PATH", Value: pluginsDir},
	}
	if altProcDevices != "" {
		env = append(env, corev1.EnvVar{Name: "ALT_PROC_DEVICES_PATH", Value: altProcDevices})
	}
	env = append(env, pluginEnv...)
	labels := map[string]string{"app.kubernetes.io/name": "nvidia-dra-driver-gpu", "app.kubernetes.io/component": "kubelet-plugin"}
	return &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: gpuPluginDaemonSet, Labels: labels},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					ServiceAccountName:            gpuPluginServiceAccount,
					TerminationGracePeriodSeconds: ptr(int64(10)),
					// The chart's affinity asks for NFD's NVIDIA labels; here
					// the harness's profile label marks GPU nodes.
					Affinity: &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
						RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
							MatchExpressions: []corev1.NodeSelectorRequirement{{Key: nodeconfig.GPUProfileLabel, Operator: corev1.NodeSelectorOpExists}},
						}}},
					}},
					Tolerations: []corev1.Toleration{{Key: "nvidia.com/gpu", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}},
					Containers: []corev1.Container{{
						Name:  gpuPluginContainer,
						Image: image,
						Args: []string{
							"-v", "4",
							"--cdi-root=" + pluginCDIRoot,
							"--nvidia-driver-root=" + nodeconfig.DriverRootHostPath,
							"--container-driver-root=" + containerDriverRoot,
							"--kubelet-registrar-directory-path=" + registrarDir,
							"--kubelet-plugins-directory-path=" + pluginsDir,
							"--image-name=" + image,
						},
						Env:             env,
						SecurityContext: &corev1.SecurityContext{Privileged: ptr(true)},
						VolumeMounts: []corev1.VolumeMount{
							{Name: "plugins-registry", MountPath: registrarDir},
							{Name: "plugins", MountPath: pluginsDir, MountPropagation: &bidirectional},
							{Name: "cdi", MountPath: pluginCDIRoot},
							{Name: "driver-root", MountPath: containerDriverRoot, MountPropagation: &hostToContainer},
						},
					}},
					Volumes: []corev1.Volume{
						hostPath("plugins-registry", registrarDir, ""),
						hostPath("plugins", pluginsDir, ""),
						hostPath("cdi", pluginCDIRoot, ""),
						hostPath("driver-root", nodeconfig.DriverRootHostPath, corev1.HostPathDirectoryOrCreate),
					},
				},
			},
		},
	}
}

// checkPluginPods waits until the DaemonSet runs a pod on every node, then
// checks each pod's recorded container view: arguments, environment (node
// name, namespace, the API server for in-cluster config) and mounts (the
// node's own folders, the driver root at /driver-root). Returns node name ->
// plugin pod name.
func (e *gpuEnvironment) checkPluginPods(ctx context.Context, t *testing.T) map[string]string {
	t.Helper()
	pods := e.waitForPluginPods(ctx, t)
	for _, n := range e.nodes.Nodes {
		pod := pods[n.Config.Name]
		path := cri.ViewPath(n.Config.ViewsDir(), gpuPluginNamespace, pod, gpuPluginContainer)
		view, err := cri.ReadView(path)
		if err != nil {
			t.Fatalf("plugin view on %s: %v", n.Config.Name, err)
		}
		t.Logf("plugin on %s (%s): args %q", n.Config.Name, pod, view.Args)
		for _, name := range []string{"NODE_NAME", "NAMESPACE", "NVIDIA_DRIVER_ROOT", "CDI_ROOT", "IMAGE_NAME", "ALT_PROC_DEVICES_PATH", "KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT"} {
			v, _ := view.EnvValue(name)
			t.Logf("  env %s=%s", name, v)
		}
		for _, m := range view.Mounts {
			t.Logf("  mount %s <- %s %v", m.Destination, m.Source, m.Options)
		}
		if v, _ := view.EnvValue("NODE_NAME"); v != n.Config.Name {
			t.Errorf("plugin on %s: NODE_NAME=%q", n.Config.Name, v)
		}
		if v, _ := view.EnvValue("NAMESPACE"); v != gpuPluginNamespace {
			t.Errorf("plugin on %s: NAMESPACE=%q", n.Config.Name, v)
		}
		if v, _ := view.EnvValue("KUBERNETES_SERVICE_HOST"); v == "" {
			t.Errorf("plugin on %s: no KUBERNETES_SERVICE_HOST for in-cluster config", n.Config.Name)
		}
		if len(view.Args) == 0 || view.Args[0] != "-v" {
			t.Errorf("plugin on %s: args %q are not the DaemonSet's (the image's program is the entrypoint)", n.Config.Name, view.Args)
		}
		want := map[string]string{
			containerDriverRoot: n.Config.DriverRoot(),
			pluginCDIRoot:       filepath.Join(n.Config.Dir, pluginCDIRoot),
			registrarDir:        filepath.Join(n.Config.Dir, registrarDir),
			pluginsDir:          filepath.Join(n.Config.Dir, pluginsDir),
		}
		token := false
		for _, m := range view.Mounts {
			if src, ok := want[m.Destination]; ok {
				if filepath.Clean(m.Source) != src {
					t.Errorf("plugin on %s: %s mounted from %s, want %s", n.Config.Name, m.Destination, m.Source, src)
				}
				delete(want, m.Destination)
			}
			token = token || m.Destination == "/var/run/secrets/kubernetes.io/serviceaccount"
		}
		for dst := range want {
			t.Errorf("plugin on %s: no mount at %s", n.Config.Name, dst)
		}
		if !token {
			t.Errorf("plugin on %s: no service account token mount", n.Config.Name)
		}
		lib := filepath.Join(n.Config.DriverRoot(), "usr", "lib64", "libnvidia-ml.so.1")
		if _, err := os.Stat(lib); err != nil {
			t.Errorf("node %s driver root: %v", n.Config.Name, err)
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	return pods
}

// waitForPluginPods waits until every node runs a Running plugin pod.
func (e *gpuEnvironment) waitForPluginPods(ctx context.Context, t *testing.T) map[string]string {
	t.Helper()
	selector := "app.kubernetes.io/component=kubelet-plugin"
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.LabelSelector = selector
			return e.client.CoreV1().Pods(gpuPluginNamespace).List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.LabelSelector = selector
			return e.client.CoreV1().Pods(gpuPluginNamespace).Watch(ctx, o)
		},
	}
	running := map[string]string{}
	all := map[string]*corev1.Pod{}
	_, err := until(ctx, lw, &corev1.Pod{}, func(ev watch.Event) (bool, error) {
		p, ok := ev.Object.(*corev1.Pod)
		if !ok {
			return false, nil
		}
		all[p.Name] = p
		if ev.Type == watch.Deleted || p.Status.Phase != corev1.PodRunning {
			if running[p.Spec.NodeName] == p.Name {
				delete(running, p.Spec.NodeName)
			}
		} else if p.Spec.NodeName != "" {
			running[p.Spec.NodeName] = p.Name
		}
		return len(running) == len(e.nodes.Nodes), nil
	})
	if err != nil {
		for _, p := range all {
			t.Logf("plugin pod %s on %q: %+v", p.Name, p.Spec.NodeName, p.Status)
		}
		t.Fatalf("plugin running on %d of %d nodes: %v", len(running), len(e.nodes.Nodes), err)
	}
	return running
}

// waitForGPUSlices waits until every node has a ResourceSlice of
// gpu.nvidia.com with devices. It skips the test when the plugin says it is
// the placeholder that only waits for SIGTERM: that binary never publishes.
func (e *gpuEnvironment) waitForGPUSlices(ctx context.Context, t *testing.T, pods map[string]string) {
	t.Helper()
	// Bounded on its own: a plugin that never publishes should not use up
	// the test's whole time.
	waitCtx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	placeholder := make(chan string, 1)
	for node, pod := range pods {
		go func() {
			if line := e.followLogFor(waitCtx, pod, "not implemented yet"); line != "" {
				select {
				case placeholder <- node + ": " + line:
				default:
				}
				cancel()
			}
		}()
	}
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			return e.client.ResourceV1().ResourceSlices().List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			return e.client.ResourceV1().ResourceSlices().Watch(ctx, o)
		},
	}
	devices := map[string]map[string]int{} // node -> slice -> devices
	_, err := until(waitCtx, lw, &resourceapi.ResourceSlice{}, func(ev watch.Event) (bool, error) {
		s, ok := ev.Object.(*resourceapi.ResourceSlice)
		if !ok || s.Spec.Driver != gpuDriverName || s.Spec.NodeName == nil {
			return false, nil
		}
		node := *s.Spec.NodeName
		if devices[node] == nil {
			devices[node] = map[string]int{}
		}
		if ev.Type == watch.Deleted {
			delete(devices[node], s.Name)
		} else {
			devices[node][s.Name] = len(s.Spec.Devices)
		}
		for _, n := range e.nodes.Nodes {
			total := 0
			for _, c := range devices[n.Config.Name] {
				total += c
			}
			if total == 0 {
				return false, nil
			}
		}
		return true, nil
	})
	if err == nil {
		return
	}
	select {
	case line := <-placeholder:
		t.Skipf("gpu-kubelet-plugin is still the placeholder (it logged %q); the DaemonSet and its pods are set up as the scenarios need", line)
	default:
	}
	t.Fatalf("waiting for %s slices with devices on every node (devices per node and slice: %v): %v", gpuDriverName, devices, err)
}

// followLogFor follows a plugin pod's log through the API server and returns
// the first line holding want, or "" when ctx ends first.
func (e *gpuEnvironment) followLogFor(ctx context.Context, pod, want string) string {
	for ctx.Err() == nil {
		stream, err := e.client.CoreV1().Pods(gpuPluginNamespace).GetLogs(pod,
			&corev1.PodLogOptions{Container: gpuPluginContainer, Follow: true}).Stream(ctx)
		if err != nil {
			// The kubelet may not serve the log yet; retry gently.
			select {
			case <-ctx.Done():
			case <-time.After(200 * time.Millisecond):
			}
			continue
		}
		sc := bufio.NewScanner(stream)
		sc.Buffer(make([]byte, 64*1024), 1024*1024)
		for sc.Scan() {
			if strings.Contains(sc.Text(), want) {
				stream.Close()
				return sc.Text()
			}
		}
		stream.Close()
		// The stream ended (container restarted): follow the next one.
	}
	return ""
}

// nodeProfile returns the profile of a node, failing the test on an
// unknown node.
func (e *gpuEnvironment) nodeProfile(t *testing.T, node string) string {
	t.Helper()
	p, ok := e.profiles[node]
	if !ok {
		t.Fatalf("unknown node %q", node)
	}
	return p
}
