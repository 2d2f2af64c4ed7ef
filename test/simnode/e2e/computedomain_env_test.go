package e2e

// The environment of the ComputeDomain tests (computedomain_test.go): GB200
// tray nodes (and one node without a fabric clique) with mock NVML driver
// roots that also hold the simulated IMEX (test/simimex), and, installed from
// Go:
//   - what the Helm chart will install for ComputeDomains (upstream
//     deployments/helm/dra-driver-nvidia-gpu: kubeletplugin.yaml's
//     compute-domains container, rbac-kubeletplugin.yaml,
//     rbac-compute-domain-daemon.yaml, deviceclass-compute-domain-*.yaml);
//   - the chart's ComputeDomain and ComputeDomainClique CRDs, read from
//     deployments/helm/dra-driver-nvidia-gpu/crds;
//   - what the compute-domain controller creates per ComputeDomain (issue 9;
//     upstream templates/compute-domain-daemon*.tmpl.yaml and
//     compute-domain-workload-claim-template.tmpl.yaml, names and labels as
//     upstream's controller gives them);
//   - a clique watch that plays the controller, the single writer of clique
//     entries (from the daemon pods), and records when entries change.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"

	"nvdra.local/test/simnode/harness"
	"nvdra.local/test/simnode/internal/cri"
	"nvdra.local/test/simnode/nodeconfig"
)

const (
	cdDriverName = "compute-domain.nvidia.com"
	// The simulated runtime maps an image to one program, so the plugin and
	// the daemon get an image name each (upstream ships both in the driver's
	// image, which the controller also names for the daemon DaemonSet).
	cdPluginImage = "nvdra.local/compute-domain-kubelet-plugin"
	cdDaemonImage = "nvdra.local/compute-domain-daemon"
	cdImageTag    = "v0.0.0-e2e"
	// The chart's namespace and names (fullname nvidia-dra-driver-gpu).
	cdDriverNamespace      = "nvidia-dra-driver-gpu"
	cdPluginServiceAccount = "nvidia-dra-driver-gpu-service-account-kubeletplugin"
	cdPluginDaemonSet      = "nvidia-dra-driver-gpu-kubelet-plugin"
	cdPluginContainer      = "compute-domains"
	cdDaemonServiceAccount = "compute-domain-daemon-service-account"
	cdDaemonContainer      = "compute-domain-daemon"
	cdDaemonClaimName      = "compute-domain-daemon" // the pod's resourceClaims entry
	cdDaemonClass          = "compute-domain-daemon.nvidia.com"
	cdChannelClass         = "compute-domain-default-channel.nvidia.com"
	// Upstream's label keys (cmd/compute-domain-controller/computedomain.go).
	cdLabelKey         = "resource.nvidia.com/computeDomain"
	cdCliqueLabelKey   = "resource.nvidia.com/computeDomain.cliqueID"
	cdTargetLabelKey   = "resource.nvidia.com/computeDomainTarget"
	gpuCliqueNodeLabel = "nvidia.com/gpu.clique"
	// cdTemplatesHostPath is a node folder mounted at /templates in the
	// plugin container: it stands for the folder the driver's image ships.
	cdTemplatesHostPath = "/opt/nvdra/templates"
	cdTemplateFile      = "compute-domain-daemon-config.tmpl.cfg"
	// The fabric-imex-mgmt capability the test lays out in each driver root
	// (make-driver-root has none): minor 1, as on real systems.
	imexCapMinor          = 1
	maxNodesPerIMEXDomain = 18
	cdIndexWriter         = "e2e-index-writer"
	// A daemon's status, published on its own pod (clique_membership.h).
	cdDaemonStatusAnnotation = "resource.nvidia.com/computeDomain.daemonStatus"

	// ctest sets these from the CMake build (see CMakeLists.txt); without
	// them the binaries are looked for under $NVDRA_BUILD_DIR or build/.
	envCDPlugin   = "NVDRA_CD_KUBELET_PLUGIN"
	envCDDaemon   = "NVDRA_CD_DAEMON"
	envSimIMEXDir = "NVDRA_SIMIMEX_DIR"
)

var (
	crdGVR    = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
	cdGVR     = schema.GroupVersionResource{Group: "resource.nvidia.com", Version: "v1beta1", Resource: "computedomains"}
	cliqueGVR = schema.GroupVersionResource{Group: "resource.nvidia.com", Version: "v1beta1", Resource: "computedomaincliques"}
)

// findBuilt returns a build output: $env when set (a path not built yet is a
// skip that says so), else rel under $NVDRA_BUILD_DIR or <checkout>/build.
func findBuilt(env, rel, target string) (string, string) {
	if p := os.Getenv(env); p != "" {
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Sprintf("%s=%s is not there (build target %s): %v", env, p, target, err)
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
		if p := filepath.Join(dir, rel); fileExists(p) {
			return p, ""
		}
	}
	return "", fmt.Sprintf("no %s: set %s (ctest does), or %s to a CMake build folder that built %s (looked in %v)",
		rel, env, envBuildDir, target, candidates)
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// cdEnvironment is a cluster whose nodes run the compute-domain kubelet
// plugin as a DaemonSet, with the chart's CRDs installed.
type cdEnvironment struct {
	*environment
	client kubernetes.Interface
	dyn    dynamic.Interface
	// fabric are the gb200-tray nodes (one clique), plain the node without
	// a fabric clique ("" when none was asked for).
	fabric []string
	plain  string
	// pluginPods maps node name -> the plugin's pod there.
	pluginPods map[string]string
}

// startCDEnvironment starts fabricNodes gb200-tray nodes and, with
// plainNode, one h100-sxm node; lays out the IMEX capability and the daemon
// config template on every node; installs the CRDs, the driver's objects and
// the plugin DaemonSet; waits for the plugin on every node and its slices.
// Skips when a binary is missing.
func startCDEnvironment(ctx context.Context, t *testing.T, fabricNodes int, plainNode bool) *cdEnvironment {
	t.Helper()
	plugin, why := findBuilt(envCDPlugin, "cmd/compute-domain-kubelet-plugin/compute-domain-kubelet-plugin", "compute-domain-kubelet-plugin")
	if plugin == "" {
		t.Skip(why)
	}
	daemon, why := findBuilt(envCDDaemon, "cmd/compute-domain-daemon/compute-domain-daemon", "compute-domain-daemon")
	if daemon == "" {
		t.Skip(why)
	}
	simimex, why := findBuilt(envSimIMEXDir, "test/simimex/bin", "simimex_nvidia_imex and simimex_nvidia_imex_ctl")
	if simimex == "" {
		t.Skip(why)
	}
	if !fileExists(filepath.Join(simimex, "nvidia-imex")) || !fileExists(filepath.Join(simimex, "nvidia-imex-ctl")) {
		t.Skipf("%s lacks nvidia-imex or nvidia-imex-ctl (build targets simimex_nvidia_imex, simimex_nvidia_imex_ctl)", simimex)
	}
	library, why := findMockLibrary(plugin)
	if library == "" {
		t.Skip(why)
	}
	template, err := harness.FindCheckoutPath(filepath.Join("templates", cdTemplateFile))
	if err != nil {
		t.Fatalf("the daemon config template: %v", err)
	}
	// make-driver-root (run by the harness) copies the simulated IMEX into
	// each driver root's usr/bin when this is set.
	t.Setenv(envSimIMEXDir, simimex)
	t.Setenv(harness.EnvMockNVMLLibrary, library)
	t.Logf("plugin %s, daemon %s, simulated IMEX %s, mock NVML %s", plugin, daemon, simimex, library)

	opts := harness.Options{
		Images:      map[string]string{cdPluginImage: plugin, cdDaemonImage: daemon},
		GPUProfiles: map[string]string{},
	}
	env := &cdEnvironment{}
	for i := 0; i < fabricNodes; i++ {
		name := fmt.Sprintf("sim-node-%d", i)
		opts.GPUProfiles[name] = "gb200-tray"
		env.fabric = append(env.fabric, name)
	}
	opts.Nodes = fabricNodes
	if plainNode {
		env.plain = fmt.Sprintf("sim-node-%d", fabricNodes)
		opts.GPUProfiles[env.plain] = "h100-sxm"
		opts.Nodes++
	}
	env.environment = startEnvironmentWith(t, opts)
	env.client = env.nodes.Client()
	restConfig, err := clientcmd.BuildConfigFromFlags("", env.cp.Kubeconfig)
	must(t, "rest config", err)
	env.dyn, err = dynamic.NewForConfig(restConfig)
	must(t, "dynamic client", err)

	tmpl, err := os.ReadFile(template)
	must(t, "read template", err)
	for _, n := range env.nodes.Nodes {
		layOutCDNodeFiles(t, n, tmpl)
		if !fileExists(filepath.Join(n.Config.DriverRoot(), "usr", "bin", "nvidia-imex")) {
			t.Fatalf("node %s: no simulated nvidia-imex in its driver root", n.Config.Name)
		}
	}

	installChartCRDs(ctx, t, env.dyn)
	installCDDriver(ctx, t, env.client)
	env.pluginPods = (&gpuEnvironment{environment: env.environment, client: env.client}).waitForPluginPods(ctx, t)
	env.waitForCDSlices(ctx, t, env.pluginPods)
	return env
}

// layOutCDNodeFiles writes what a GB200 host has beyond make-driver-root's
// layout (the fabric-imex-mgmt capability file, the IMEX channel0 device
// node) and the folder standing for the image's /templates.
func layOutCDNodeFiles(t *testing.T, n *harness.Node, template []byte) {
	t.Helper()
	caps := filepath.Join(n.Config.DriverRoot(), "proc", "driver", "nvidia", "capabilities")
	must(t, "capabilities folder", os.MkdirAll(caps, 0o755))
	must(t, "fabric-imex-mgmt", os.WriteFile(filepath.Join(caps, "fabric-imex-mgmt"),
		[]byte(fmt.Sprintf("DeviceFileMinor: %d\nDeviceFileMode: 256\nDeviceFileModify: 1\n", imexCapMinor)), 0o644))
	// The IMEX channel0 device node the driver creates on the host
	// (NVreg_CreateImexChannel0): a character device c 236:0, as
	// make-driver-root's /dev/nvidia<N> are, which the simulated runtime
	// binds into a container whose CDI spec names
	// /dev/nvidia-caps-imex-channels/channel0.
	channels := filepath.Join(n.Config.Dir, "dev", "nvidia-caps-imex-channels")
	must(t, "channels folder", os.MkdirAll(channels, 0o755))
	must(t, "channel0", cri.MakeCharDevice(filepath.Join(channels, "channel0"), imexChannelsMajor, 0, 0o666))
	dir := filepath.Join(n.Config.Dir, cdTemplatesHostPath)
	must(t, "templates folder", os.MkdirAll(dir, 0o755))
	must(t, "template", os.WriteFile(filepath.Join(dir, cdTemplateFile), template, 0o644))
}

// chartCRDFiles are the chart's CRDs (deployments/helm/.../crds), which the
// test installs as Helm would before anything else.
var chartCRDFiles = []string{
	"resource.nvidia.com_computedomains.yaml",
	"resource.nvidia.com_computedomaincliques.yaml",
}

// loadChartCRD reads one CRD file of the chart (comments and a leading
// "---" allowed) into an object.
func loadChartCRD(t *testing.T, file string) *unstructured.Unstructured {
	t.Helper()
	path, err := harness.FindCheckoutPath(filepath.Join("deployments", "helm", "dra-driver-nvidia-gpu", "crds", file))
	must(t, "chart CRD "+file, err)
	data, err := os.ReadFile(path)
	must(t, "read "+path, err)
	decoder := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	for {
		obj := &unstructured.Unstructured{}
		if err := decoder.Decode(&obj.Object); err != nil {
			t.Fatalf("%s: no CustomResourceDefinition in it: %v", path, err)
		}
		if obj.GetKind() == "CustomResourceDefinition" {
			return obj
		}
	}
}

// installChartCRDs creates the chart's ComputeDomain and ComputeDomainClique
// CRDs and waits until both are Established (served).
func installChartCRDs(ctx context.Context, t *testing.T, dyn dynamic.Interface) {
	t.Helper()
	for _, file := range chartCRDFiles {
		crd := loadChartCRD(t, file)
		if _, err := dyn.Resource(crdGVR).Create(ctx, crd, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatalf("CRD %s: %v", crd.GetName(), err)
		}
	}
	established := map[string]bool{}
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			return dyn.Resource(crdGVR).List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			return dyn.Resource(crdGVR).Watch(ctx, o)
		},
	}
	waitCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	_, err := until(waitCtx, lw, &unstructured.Unstructured{}, func(ev watch.Event) (bool, error) {
		u, ok := ev.Object.(*unstructured.Unstructured)
		if !ok {
			return false, nil
		}
		conditions, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
		for _, c := range conditions {
			if m, ok := c.(map[string]any); ok && m["type"] == "Established" && m["status"] == "True" {
				established[u.GetName()] = true
			}
		}
		return established["computedomains.resource.nvidia.com"] && established["computedomaincliques.resource.nvidia.com"], nil
	})
	if err != nil {
		t.Fatalf("chart CRDs established: %v (so far %v)", err, established)
	}
}

// installCDDriver creates what the chart renders for ComputeDomains: the
// namespace, the kubelet plugin's and the daemons' service accounts and
// RBAC, the two DeviceClasses and the kubelet-plugin DaemonSet
// (compute-domains container only).
func installCDDriver(ctx context.Context, t *testing.T, client kubernetes.Interface) {
	t.Helper()
	must(t, "namespace", create(ctx, client.CoreV1().Namespaces(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: cdDriverNamespace}}))
	for _, sa := range []string{cdPluginServiceAccount, cdDaemonServiceAccount} {
		must(t, "service account "+sa, create(ctx, client.CoreV1().ServiceAccounts(cdDriverNamespace),
			&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}))
	}
	bind := func(role, sa string) {
		must(t, "cluster role binding "+role, create(ctx, client.RbacV1().ClusterRoleBindings(), &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: role + "-binding"},
			RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: role},
			Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: sa, Namespace: cdDriverNamespace}},
		}))
	}
	// rbac-kubeletplugin.yaml: the ClusterRole as upstream's, and the
	// namespaced Role on cliques with list and watch added: our plugin
	// follows them with an informer where upstream GETs them.
	must(t, "plugin cluster role", create(ctx, client.RbacV1().ClusterRoles(), &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "nvidia-dra-driver-gpu-clusterrole-kubeletplugin"},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{"resource.nvidia.com"}, Resources: []string{"computedomains"}, Verbs: []string{"get", "list", "watch"}},
			{APIGroups: []string{"resource.k8s.io"}, Resources: []string{"resourceclaims"}, Verbs: []string{"get", "list", "watch"}},
			{APIGroups: []string{"resource.k8s.io"}, Resources: []string{"resourceslices"},
				Verbs: []string{"get", "list", "watch", "create", "update", "delete"}},
			{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get", "list", "watch", "update", "patch"}},
			{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "list", "watch"}},
			{APIGroups: []string{"", "events.k8s.io"}, Resources: []string{"events"}, Verbs: []string{"create", "patch", "update"}},
		},
	}))
	bind("nvidia-dra-driver-gpu-clusterrole-kubeletplugin", cdPluginServiceAccount)
	must(t, "plugin role", create(ctx, client.RbacV1().Roles(cdDriverNamespace), &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "nvidia-dra-driver-gpu-role-kubeletplugin"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{"resource.nvidia.com"}, Resources: []string{"computedomaincliques"},
			Verbs: []string{"get", "list", "watch"}}},
	}))
	must(t, "plugin role binding", create(ctx, client.RbacV1().RoleBindings(cdDriverNamespace), &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "nvidia-dra-driver-gpu-role-binding-kubeletplugin"},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "nvidia-dra-driver-gpu-role-kubeletplugin"},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: cdPluginServiceAccount, Namespace: cdDriverNamespace}},
	}))
	// rbac-compute-domain-daemon.yaml, as upstream's.
	must(t, "daemon cluster role", create(ctx, client.RbacV1().ClusterRoles(), &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "compute-domain-daemon-role"},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{"resource.nvidia.com"}, Resources: []string{"computedomains", "computedomains/status"},
				Verbs: []string{"get", "list", "watch", "update", "patch"}},
			{APIGroups: []string{"resource.nvidia.com"}, Resources: []string{"computedomaincliques"},
				Verbs: []string{"get", "list", "watch"}},
			{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "list", "watch", "patch"}},
		},
	}))
	bind("compute-domain-daemon-role", cdDaemonServiceAccount)
	classes := map[string]string{
		cdDaemonClass: fmt.Sprintf("device.driver == '%s' && device.attributes['%s'].type == 'daemon'", cdDriverName, cdDriverName),
		cdChannelClass: fmt.Sprintf("device.driver == '%s' && device.attributes['%s'].type == 'channel' && device.attributes['%s'].id == 0",
			cdDriverName, cdDriverName, cdDriverName),
	}
	for name, expr := range classes {
		must(t, "device class "+name, create(ctx, client.ResourceV1().DeviceClasses(), &resourceapi.DeviceClass{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec:       resourceapi.DeviceClassSpec{Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: expr}}}},
		}))
	}
	must(t, "plugin daemonset", create(ctx, client.AppsV1().DaemonSets(cdDriverNamespace), cdPluginDaemonSetSpec()))
}

// cdPluginDaemonSetSpec is the chart's kubelet-plugin DaemonSet with
// nvidiaDriverRoot=/run/nvidia/driver, reduced to the compute-domains
// container: the image's program is the entrypoint (no bash wrapper), the
// chart's env, flags given as arguments too, gpuCliqueLabelEnabled on, and
// /templates mounted from the node (the image's folder in production).
func cdPluginDaemonSetSpec() *appsv1.DaemonSet {
	image := cdPluginImage + ":" + cdImageTag
	hostPath := func(name, path string, typ corev1.HostPathType) corev1.Volume {
		return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: path, Type: &typ}}}
	}
	field := func(path string) *corev1.EnvVarSource {
		return &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: path}}
	}
	bidirectional, hostToContainer := corev1.MountPropagationBidirectional, corev1.MountPropagationHostToContainer
	labels := map[string]string{"app.kubernetes.io/name": "nvidia-dra-driver-gpu", "app.kubernetes.io/component": "kubelet-plugin"}
	return &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: cdPluginDaemonSet, Labels: labels},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					ServiceAccountName:            cdPluginServiceAccount,
					TerminationGracePeriodSeconds: ptr(int64(10)),
					Affinity: &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
						RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
							MatchExpressions: []corev1.NodeSelectorRequirement{{Key: nodeconfig.GPUProfileLabel, Operator: corev1.NodeSelectorOpExists}},
						}}},
					}},
					Tolerations: []corev1.Toleration{{Key: "nvidia.com/gpu", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}},
					Containers: []corev1.Container{{
						Name:  cdPluginContainer,
						Image: image,
						Args: []string{
							"-v", "4",
							"--cdi-root=" + pluginCDIRoot,
							"--nvidia-driver-root=" + nodeconfig.DriverRootHostPath,
							"--container-driver-root=" + containerDriverRoot,
							"--kubelet-registrar-directory-path=" + registrarDir,
							"--kubelet-plugins-directory-path=" + pluginsDir,
						},
						Env: []corev1.EnvVar{
							{Name: "LOG_VERBOSITY", Value: "4"},
							{Name: "NVIDIA_DRIVER_ROOT", Value: nodeconfig.DriverRootHostPath},
							{Name: "NVIDIA_VISIBLE_DEVICES", Value: "void"},
							{Name: "CDI_ROOT", Value: pluginCDIRoot},
							{Name: "NVIDIA_MIG_CONFIG_DEVICES", Value: "all"},
							// make-driver-root's proc tree (upstream's mock-NVML switch).
							{Name: "ALT_PROC_DEVICES_PATH", Value: containerDriverRoot + "/proc/devices"},
							{Name: "NODE_NAME", ValueFrom: field("spec.nodeName")},
							{Name: "NAMESPACE", ValueFrom: field("metadata.namespace")},
							{Name: "IMEX_MODE", Value: "driverManaged"},
							{Name: "IMEX_ISOLATION", Value: "domain"},
							{Name: "IMEX_HOST_SOCKET_PATH", Value: "/etc/nvidia-imex/imex_ctrl.sock"},
							{Name: "KUBELET_REGISTRAR_DIRECTORY_PATH", Value: registrarDir},
							{Name: "KUBELET_PLUGINS_DIRECTORY_PATH", Value: pluginsDir},
							{Name: "GPU_CLIQUE_LABEL_ENABLED", Value: "true"},
						},
						SecurityContext: &corev1.SecurityContext{Privileged: ptr(true)},
						VolumeMounts: []corev1.VolumeMount{
							{Name: "plugins-registry", MountPath: registrarDir},
							{Name: "plugins", MountPath: pluginsDir, MountPropagation: &bidirectional},
							{Name: "cdi", MountPath: pluginCDIRoot},
							// Read-write, unlike the chart's: the mock NVML keeps its
							// state (and a lock file) in the driver root.
							{Name: "driver-root", MountPath: containerDriverRoot, MountPropagation: &hostToContainer},
							{Name: "templates", MountPath: "/templates", ReadOnly: true},
						},
					}},
					Volumes: []corev1.Volume{
						hostPath("plugins-registry", registrarDir, ""),
						hostPath("plugins", pluginsDir, ""),
						hostPath("cdi", pluginCDIRoot, ""),
						hostPath("driver-root", nodeconfig.DriverRootHostPath, corev1.HostPathDirectoryOrCreate),
						hostPath("templates", cdTemplatesHostPath, corev1.HostPathDirectory),
					},
				},
			},
		},
	}
}

// waitForCDSlices waits until every node publishes channel-0 and daemon-0
// (driver-managed mode) in a pool named after the node.
func (e *cdEnvironment) waitForCDSlices(ctx context.Context, t *testing.T, pods map[string]string) {
	t.Helper()
	waitCtx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			return e.client.ResourceV1().ResourceSlices().List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			return e.client.ResourceV1().ResourceSlices().Watch(ctx, o)
		},
	}
	devices := map[string]string{} // node -> sorted device names
	_, err := until(waitCtx, lw, &resourceapi.ResourceSlice{}, func(ev watch.Event) (bool, error) {
		s, ok := ev.Object.(*resourceapi.ResourceSlice)
		if !ok || s.Spec.Driver != cdDriverName || s.Spec.NodeName == nil {
			return false, nil
		}
		var names []string
		for _, d := range s.Spec.Devices {
			names = append(names, d.Name)
		}
		sort.Strings(names)
		if ev.Type == watch.Deleted || s.Spec.Pool.Name != *s.Spec.NodeName {
			delete(devices, *s.Spec.NodeName)
		} else {
			devices[*s.Spec.NodeName] = strings.Join(names, ",")
		}
		for _, n := range e.nodes.Nodes {
			if devices[n.Config.Name] != "channel-0,daemon-0" {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		for node, pod := range pods {
			t.Logf("plugin pod on %s: %s", node, pod)
		}
		if slices, lerr := e.client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{}); lerr == nil {
			for _, s := range slices.Items {
				var names []string
				for _, d := range s.Spec.Devices {
					names = append(names, d.Name)
				}
				t.Logf("slice %s: driver %s, node %v, pool %s, devices %v", s.Name, s.Spec.Driver, ptrValue(s.Spec.NodeName), s.Spec.Pool.Name, names)
			}
		}
		t.Fatalf("waiting for %s slices with channel-0 and daemon-0 on every node (have %v): %v", cdDriverName, devices, err)
	}
}

// computeDomain is one ComputeDomain and the objects its controller makes.
type computeDomain struct {
	namespace, name string
	uid             types.UID
	channelTemplate string // the workload ResourceClaimTemplate in namespace
}

// daemonSetName is upstream's computedomain-daemon-<cdUID>, also the name of
// the daemon ResourceClaimTemplate.
func (cd *computeDomain) daemonSetName() string { return "computedomain-daemon-" + string(cd.uid) }

// cliqueName is the ComputeDomainClique of the domain's daemons in clique.
func (cd *computeDomain) cliqueName(clique string) string { return string(cd.uid) + "." + clique }

// cliqueLabels are the labels every writer of a clique "<uid>.<cliqueID>"
// puts on it (upstream's daemons, our controller); the kubelet plugin lists
// cliques by the clique ID label.
func cliqueLabels(name string) map[string]any {
	uid, clique, _ := strings.Cut(name, ".")
	return map[string]any{"resource.nvidia.com/computeDomain": uid, "resource.nvidia.com/computeDomain.cliqueID": clique}
}

// createComputeDomain creates a ComputeDomain and then, playing the
// compute-domain controller (issue 9), the daemon ResourceClaimTemplate and
// DaemonSet in the driver namespace and the workload ResourceClaimTemplate
// in the domain's namespace, as upstream's templates render them.
func (e *cdEnvironment) createComputeDomain(ctx context.Context, t *testing.T, namespace, name string, numNodes int) *computeDomain {
	t.Helper()
	cd := &computeDomain{namespace: namespace, name: name, channelTemplate: name + "-channel"}
	obj := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "resource.nvidia.com/v1beta1",
		"kind":       "ComputeDomain",
		"metadata":   map[string]any{"name": name, "namespace": namespace},
		"spec": map[string]any{
			"numNodes": int64(numNodes),
			"channel":  map[string]any{"resourceClaimTemplate": map[string]any{"name": cd.channelTemplate}, "allocationMode": "Single"},
		},
	}}
	created, err := e.dyn.Resource(cdGVR).Namespace(namespace).Create(ctx, obj, metav1.CreateOptions{})
	must(t, "ComputeDomain "+name, err)
	cd.uid = created.GetUID()

	must(t, "daemon claim template", create(ctx, e.client.ResourceV1().ResourceClaimTemplates(cdDriverNamespace),
		cdClaimTemplate(cdDriverNamespace, cd.daemonSetName(), cd.uid, "Daemon", "daemon", cdDaemonClass,
			map[string]any{"kind": "ComputeDomainDaemonConfig", "domainID": string(cd.uid)})))
	must(t, "daemon daemonset", create(ctx, e.client.AppsV1().DaemonSets(cdDriverNamespace), cdDaemonSetSpec(cd)))
	must(t, "workload claim template", create(ctx, e.client.ResourceV1().ResourceClaimTemplates(namespace),
		cdClaimTemplate(namespace, cd.channelTemplate, cd.uid, "Workload", "channel", cdChannelClass,
			map[string]any{"kind": "ComputeDomainChannelConfig", "domainID": string(cd.uid), "allocationMode": "Single"})))
	return cd
}

// cdClaimTemplate renders upstream's compute-domain-{daemon,workload}-claim
// template: one request, its class, the opaque config for that request,
// the domain and target labels and the controller's finalizer.
func cdClaimTemplate(namespace, name string, uid types.UID, target, request, class string, params map[string]any) *resourceapi.ResourceClaimTemplate {
	params["apiVersion"] = "resource.nvidia.com/v1beta1"
	raw, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&params)
	if err != nil {
		panic(err)
	}
	data, err := (&unstructured.Unstructured{Object: raw}).MarshalJSON()
	if err != nil {
		panic(err)
	}
	return &resourceapi.ResourceClaimTemplate{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: namespace,
			Finalizers: []string{cdLabelKey},
			Labels:     map[string]string{cdLabelKey: string(uid), cdTargetLabelKey: target},
		},
		Spec: resourceapi.ResourceClaimTemplateSpec{Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{
			Requests: []resourceapi.DeviceRequest{{Name: request, Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: class}}},
			Config: []resourceapi.DeviceClaimConfiguration{{
				Requests: []string{request},
				DeviceConfiguration: resourceapi.DeviceConfiguration{Opaque: &resourceapi.OpaqueDeviceConfiguration{
					Driver: cdDriverName, Parameters: runtime.RawExtension{Raw: data},
				}},
			}},
		}}},
	}
}

// cdDaemonSetSpec renders upstream's compute-domain-daemon.tmpl.yaml for a
// domain: selector and nodeSelector on the domain label, the daemon claim,
// the downward-API env, and `check` as startup, liveness and readiness
// probe. LOG_VERBOSITY 2: the daemon logs its entry writes there.
func cdDaemonSetSpec(cd *computeDomain) *appsv1.DaemonSet {
	labels := map[string]string{cdLabelKey: string(cd.uid)}
	field := func(path string) *corev1.EnvVarSource {
		return &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: path}}
	}
	check := &corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"compute-domain-daemon", "-v", "$(LOG_VERBOSITY)", "check"}}}
	return &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: cd.daemonSetName(), Namespace: cdDriverNamespace, Labels: labels, Finalizers: []string{cdLabelKey}},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					ServiceAccountName:            cdDaemonServiceAccount,
					NodeSelector:                  labels,
					TerminationGracePeriodSeconds: ptr(int64(15)),
					Containers: []corev1.Container{{
						Name:    cdDaemonContainer,
						Image:   cdDaemonImage + ":" + cdImageTag,
						Command: []string{"compute-domain-daemon", "-v", "$(LOG_VERBOSITY)", "run"},
						Env: []corev1.EnvVar{
							{Name: "LOG_VERBOSITY", Value: "2"},
							{Name: "MAX_NODES_PER_IMEX_DOMAIN", Value: fmt.Sprint(maxNodesPerIMEXDomain)},
							{Name: "NODE_NAME", ValueFrom: field("spec.nodeName")},
							{Name: "POD_IP", ValueFrom: field("status.podIP")},
							{Name: "POD_UID", ValueFrom: field("metadata.uid")},
							{Name: "POD_NAME", ValueFrom: field("metadata.name")},
							{Name: "POD_NAMESPACE", ValueFrom: field("metadata.namespace")},
							{Name: "NVIDIA_VISIBLE_DEVICES", Value: "void"},
						},
						Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: cdDaemonClaimName}}},
						StartupProbe: &corev1.Probe{ProbeHandler: *check, PeriodSeconds: 1, TimeoutSeconds: 10,
							FailureThreshold: 1200, SuccessThreshold: 1},
						LivenessProbe: &corev1.Probe{ProbeHandler: *check, PeriodSeconds: 60, TimeoutSeconds: 10,
							FailureThreshold: 20, SuccessThreshold: 1},
						ReadinessProbe: &corev1.Probe{ProbeHandler: *check, PeriodSeconds: 10, TimeoutSeconds: 10,
							FailureThreshold: 1, SuccessThreshold: 1},
					}},
					Tolerations: []corev1.Toleration{
						{Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule},
						{Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute},
						{Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectPreferNoSchedule},
					},
					ResourceClaims: []corev1.PodResourceClaim{{Name: cdDaemonClaimName, ResourceClaimTemplateName: ptr(cd.daemonSetName())}},
				},
			},
		},
	}
}

// cliqueEntry is one daemons[] entry of a ComputeDomainClique.
type cliqueEntry struct {
	NodeName, IPAddress, CliqueID, Status string
	Index                                 *int64
}

func (e cliqueEntry) String() string {
	index := "none"
	if e.Index != nil {
		index = fmt.Sprint(*e.Index)
	}
	return fmt.Sprintf("{%s %s index=%s %s}", e.NodeName, e.IPAddress, index, e.Status)
}

func cliqueEntries(u *unstructured.Unstructured) map[string]cliqueEntry {
	out := map[string]cliqueEntry{}
	list, _, _ := unstructured.NestedSlice(u.Object, "daemons")
	for _, item := range list {
		m, ok := item.(map[string]any)
		if !ok {
			continue
		}
		e := cliqueEntry{}
		e.NodeName, _ = m["nodeName"].(string)
		e.IPAddress, _ = m["ipAddress"].(string)
		e.CliqueID, _ = m["cliqueID"].(string)
		e.Status, _ = m["status"].(string)
		if i, ok := m["index"].(int64); ok {
			e.Index = &i
		}
		out[e.NodeName] = e
	}
	return out
}

// entryChange is a status change of one clique entry as this test saw it.
type entryChange struct {
	clique, node, status string
	at                   time.Time
}

// cliqueWatch follows the driver namespace's ComputeDomainCliques with an
// informer and plays the compute-domain controller, the only writer of
// clique entries: from the domain's daemon pods (a daemon publishes its
// clique label and its status annotation on its own pod; node and IP from
// the pod) it writes every clique's entries by server-side apply under its
// own field manager, each new node with the lowest free index, except nodes
// on hold, whose entries get none until Release. Indexes stay with their
// node while its pod lives. Safe for concurrent use.
type cliqueWatch struct {
	dyn dynamic.Interface

	writeMu sync.Mutex // one write pass at a time
	mu      sync.Mutex
	changed chan struct{} // closed and replaced on every change
	cliques map[string]*unstructured.Unstructured
	pods    map[string]*unstructured.Unstructured // daemon pods by name
	given   map[string]map[string]int64           // clique -> node -> index this writer gave
	written map[string][]any                      // clique -> entries last applied
	hold    map[string]bool
	changes []entryChange
	errs    []error
}

// startCliqueWatch starts the watch and writer; hold names nodes whose
// entries get no index until Release. Stopped by the test's cleanup.
func startCliqueWatch(t *testing.T, dyn dynamic.Interface, hold ...string) *cliqueWatch {
	t.Helper()
	w := &cliqueWatch{
		dyn: dyn, changed: make(chan struct{}), cliques: map[string]*unstructured.Unstructured{},
		pods: map[string]*unstructured.Unstructured{}, given: map[string]map[string]int64{},
		written: map[string][]any{}, hold: map[string]bool{},
	}
	for _, n := range hold {
		w.hold[n] = true
	}
	unwrap := func(obj any) any {
		if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			return d.Obj
		}
		return obj
	}
	factory := dynamicinformer.NewFilteredDynamicSharedInformerFactory(dyn, 0, cdDriverNamespace, nil)
	informer := factory.ForResource(cliqueGVR).Informer()
	_, err := informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { w.onChange(obj, false) },
		UpdateFunc: func(_, obj any) { w.onChange(obj, false) },
		DeleteFunc: func(obj any) { w.onChange(unwrap(obj), true) },
	})
	must(t, "clique informer handler", err)
	podInformer := factory.ForResource(corev1.SchemeGroupVersion.WithResource("pods")).Informer()
	_, err = podInformer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { w.onPod(obj, false) },
		UpdateFunc: func(_, obj any) { w.onPod(obj, false) },
		DeleteFunc: func(obj any) { w.onPod(unwrap(obj), true) },
	})
	must(t, "pod informer handler", err)
	stop := make(chan struct{})
	factory.Start(stop)
	t.Cleanup(func() {
		close(stop)
		factory.Shutdown()
		w.mu.Lock()
		defer w.mu.Unlock()
		for _, err := range w.errs {
			t.Errorf("clique writer: %v", err)
		}
	})
	return w
}

func (w *cliqueWatch) onChange(obj any, deleted bool) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return
	}
	now := time.Now()
	name := u.GetName()
	w.mu.Lock()
	before := map[string]cliqueEntry{}
	if old := w.cliques[name]; old != nil {
		before = cliqueEntries(old)
	}
	entries := map[string]cliqueEntry{}
	if deleted {
		delete(w.cliques, name)
		delete(w.written, name)
	} else {
		w.cliques[name] = u
		entries = cliqueEntries(u)
	}
	for node, e := range entries {
		if b, ok := before[node]; !ok || b.Status != e.Status {
			w.changes = append(w.changes, entryChange{clique: name, node: node, status: e.Status, at: now})
		}
	}
	for node := range before {
		if _, ok := entries[node]; !ok {
			w.changes = append(w.changes, entryChange{clique: name, node: node, status: "Removed", at: now})
		}
	}
	close(w.changed)
	w.changed = make(chan struct{})
	w.mu.Unlock()
}

func (w *cliqueWatch) onPod(obj any, deleted bool) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok || u.GetLabels()[cdLabelKey] == "" {
		return
	}
	w.mu.Lock()
	if deleted {
		delete(w.pods, u.GetName())
	} else {
		w.pods[u.GetName()] = u
	}
	w.mu.Unlock()
	w.sync()
}

// sync writes every clique whose entries, as the pods say, differ from what
// this writer last applied.
func (w *cliqueWatch) sync() {
	w.writeMu.Lock()
	defer w.writeMu.Unlock()
	type member struct{ ip, status, cliqueID string }
	w.mu.Lock()
	members := map[string]map[string]member{} // clique -> node -> member
	for _, p := range w.pods {
		uid, cid := p.GetLabels()[cdLabelKey], p.GetLabels()[cdCliqueLabelKey]
		node, _, _ := unstructured.NestedString(p.Object, "spec", "nodeName")
		ip, _, _ := unstructured.NestedString(p.Object, "status", "podIP")
		if p.GetDeletionTimestamp() != nil || uid == "" || cid == "" || node == "" || ip == "" {
			continue
		}
		status := "NotReady"
		if p.GetAnnotations()[cdDaemonStatusAnnotation] == "Ready" {
			status = "Ready"
		}
		clique := uid + "." + cid
		if members[clique] == nil {
			members[clique] = map[string]member{}
		}
		members[clique][node] = member{ip: ip, status: status, cliqueID: cid}
	}
	for clique := range w.given {
		if members[clique] == nil {
			members[clique] = map[string]member{}
		}
	}
	intents := map[string][]any{}
	for clique, nodes := range members {
		given := w.given[clique]
		if given == nil {
			given = map[string]int64{}
			w.given[clique] = given
		}
		for node := range given {
			if _, ok := nodes[node]; !ok {
				delete(given, node) // left: its index is free again
			}
		}
		names := make([]string, 0, len(nodes))
		for node := range nodes {
			names = append(names, node)
		}
		sort.Strings(names)
		for _, node := range names {
			if _, ok := given[node]; ok || w.hold[node] {
				continue
			}
			used := map[int64]bool{}
			for _, i := range given {
				used[i] = true
			}
			var i int64
			for used[i] {
				i++
			}
			given[node] = i
		}
		daemons := []any{}
		for _, node := range names {
			m := nodes[node]
			entry := map[string]any{"nodeName": node, "ipAddress": m.ip, "cliqueID": m.cliqueID, "status": m.status}
			if i, ok := given[node]; ok {
				entry["index"] = i
			}
			daemons = append(daemons, entry)
		}
		if last, ok := w.written[clique]; (ok && reflect.DeepEqual(last, daemons)) || (!ok && len(daemons) == 0) {
			continue
		}
		w.written[clique] = daemons
		intents[clique] = daemons
	}
	w.mu.Unlock()
	for clique, daemons := range intents {
		w.apply(clique, daemons)
	}
}

func (w *cliqueWatch) apply(clique string, daemons []any) {
	intent := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "resource.nvidia.com/v1beta1",
		"kind":       "ComputeDomainClique",
		"metadata":   map[string]any{"name": clique, "namespace": cdDriverNamespace, "labels": cliqueLabels(clique)},
		"daemons":    daemons,
	}}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := w.dyn.Resource(cliqueGVR).Namespace(cdDriverNamespace).Apply(ctx, clique, intent,
		metav1.ApplyOptions{FieldManager: cdIndexWriter, Force: true})
	if err != nil && !errors.Is(err, context.Canceled) {
		w.mu.Lock()
		delete(w.written, clique) // write again on the next change
		w.errs = append(w.errs, fmt.Errorf("apply entries %v to %s: %w", daemons, clique, err))
		w.mu.Unlock()
	}
}

// Release lets the held node's entries get an index.
func (w *cliqueWatch) Release(node string) {
	w.mu.Lock()
	delete(w.hold, node)
	w.mu.Unlock()
	w.sync()
}

// WaitForChanges waits, on informer events, until cond holds for the entry
// status changes seen so far.
func (w *cliqueWatch) WaitForChanges(ctx context.Context, t *testing.T, what string, cond func([]entryChange) bool) []entryChange {
	t.Helper()
	for {
		w.mu.Lock()
		changes := append([]entryChange(nil), w.changes...)
		ch := w.changed
		w.mu.Unlock()
		if cond(changes) {
			return changes
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s: %v; changes seen: %+v", what, ctx.Err(), changes)
			return nil
		case <-ch:
		}
	}
}

// Entries returns the entries of a clique (nil: no such clique).
func (w *cliqueWatch) Entries(clique string) map[string]cliqueEntry {
	w.mu.Lock()
	defer w.mu.Unlock()
	if u := w.cliques[clique]; u != nil {
		return cliqueEntries(u)
	}
	return nil
}

// Changes returns the entry status changes seen so far.
func (w *cliqueWatch) Changes() []entryChange {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]entryChange(nil), w.changes...)
}

// WaitFor waits, on informer events, until cond holds for the entries of
// clique (nil when absent); fails the test with what was last seen.
func (w *cliqueWatch) WaitFor(ctx context.Context, t *testing.T, clique, what string, cond func(map[string]cliqueEntry) bool) map[string]cliqueEntry {
	t.Helper()
	for {
		w.mu.Lock()
		var entries map[string]cliqueEntry
		if u := w.cliques[clique]; u != nil {
			entries = cliqueEntries(u)
		}
		ch := w.changed
		w.mu.Unlock()
		if cond(entries) {
			return entries
		}
		select {
		case <-ctx.Done():
			t.Fatalf("clique %s: %s: %v; entries %+v", clique, what, ctx.Err(), entries)
			return nil
		case <-ch:
		}
	}
}

func ptrValue[T any](p *T) any {
	if p == nil {
		return nil
	}
	return *p
}
