// Package e2e holds the simulated-node tests: a real control plane (test/cluster)
// and simulated nodes (test/simnode), built by test/cluster/build-tools.
package e2e

import (
	"bufio"
	"context"
	"encoding/json"
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
	"k8s.io/client-go/kubernetes"

	"nvdra.local/test/simnode/internal/cri"
)

const (
	driverName  = "gpu.simnode.test"
	driverImage = "simnode.test/test-driver"
	namespace   = "simnode-e2e"
	numNodes    = 3
)

// TestDRAPathOnSimulatedNodes is issue 5's first "done when": the test driver
// (reference kubeletplugin helper) runs as a DaemonSet on three simulated
// nodes, publishes slices, the scheduler allocates a claim, the kubelet's DRA
// manager prepares it, the container view has the CDI edits, and deleting the
// pod makes the kubelet call NodeUnprepareResources.
func TestDRAPathOnSimulatedNodes(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	env := startEnvironment(t, numNodes)
	client := env.nodes.Client()

	createTestDriver(ctx, t, client)
	waitForDriverSlices(ctx, t, client, driverName, numNodes)

	pod, claim := createPodWithClaim(ctx, t, client)
	pod = waitForPod(ctx, t, client, pod.Name, func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodRunning })
	claim, err := client.ResourceV1().ResourceClaims(namespace).Get(ctx, claim.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get claim: %v", err)
	}
	if claim.Status.Allocation == nil || len(claim.Status.Allocation.Devices.Results) != 1 {
		t.Fatalf("claim %s not allocated one device: %+v", claim.Name, claim.Status.Allocation)
	}
	device := claim.Status.Allocation.Devices.Results[0].Device
	node := env.node(t, pod.Spec.NodeName)
	t.Logf("pod on %s, device %s", node.Config.Name, device)

	journal := filepath.Join(node.Config.RootDir(), "plugins", driverName, "calls.jsonl")
	waitForJournal(ctx, t, journal, "NodePrepareResources", string(claim.UID))

	view, err := cri.ReadView(cri.ViewPath(node.Config.ViewsDir(), namespace, pod.Name, "work"))
	if err != nil {
		t.Fatalf("container view: %v", err)
	}
	if got, _ := view.EnvValue("SIMNODE_GPU"); got != device {
		t.Errorf("view env SIMNODE_GPU = %q, want %q (env %v)", got, device, view.Env)
	}
	wantNode := "/dev/simgpu" + strings.TrimPrefix(device, "gpu-")
	found := false
	for _, d := range view.Devices {
		found = found || d.Path == wantNode
	}
	if !found {
		t.Errorf("view devices %+v lack %s", view.Devices, wantNode)
	}

	// The container's command ran with that environment: its log, read
	// through the API server and the kubelet, says which device it got.
	logs := waitForLog(ctx, t, client, pod.Name, "gpu="+device)
	t.Logf("container log: %q", logs)

	if err := client.CoreV1().Pods(namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatalf("delete pod: %v", err)
	}
	waitForJournal(ctx, t, journal, "NodeUnprepareResources", string(claim.UID))
}

func createTestDriver(ctx context.Context, t *testing.T, client kubernetes.Interface) {
	t.Helper()
	installTestDriver(ctx, t, client, testDriverOptions{Namespace: namespace, DriverName: driverName})
}

// testDriverOptions say where the test driver (simnode-test-driver) runs
// and what it publishes.
type testDriverOptions struct {
	Namespace  string // made here; holds its service account and DaemonSet
	DriverName string // its DRA driver name, and the name of the DeviceClass of its devices
	Devices    int    // devices per node; 0: the driver's default (2)
}

// installTestDriver runs the test driver as a DaemonSet on every node, with
// a DeviceClass selecting its devices.
func installTestDriver(ctx context.Context, t *testing.T, client kubernetes.Interface, o testDriverOptions) {
	t.Helper()
	must(t, "namespace", create(ctx, client.CoreV1().Namespaces(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: o.Namespace}}))
	must(t, "service account", create(ctx, client.CoreV1().ServiceAccounts(o.Namespace),
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "test-driver"}}))
	must(t, "cluster role binding", create(ctx, client.RbacV1().ClusterRoleBindings(), &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "simnode-test-driver-" + o.Namespace},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "cluster-admin"},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: "test-driver", Namespace: o.Namespace}},
	}))
	hostPath := func(name, path string) corev1.Volume {
		dirOrCreate := corev1.HostPathDirectoryOrCreate
		return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: path, Type: &dirOrCreate}}}
	}
	args := []string{"-v=2", "--driver-name=" + o.DriverName}
	if o.Devices > 0 {
		args = append(args, fmt.Sprintf("--devices=%d", o.Devices))
	}
	labels := map[string]string{"app": "simnode-test-driver"}
	must(t, "daemonset", create(ctx, client.AppsV1().DaemonSets(o.Namespace), &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: "test-driver"},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					ServiceAccountName: "test-driver",
					Containers: []corev1.Container{{
						Name:  "plugin",
						Image: driverImage + ":v1",
						Args:  args,
						Env: []corev1.EnvVar{{Name: "NODE_NAME", ValueFrom: &corev1.EnvVarSource{
							FieldRef: &corev1.ObjectFieldSelector{FieldPath: "spec.nodeName"}}}},
						VolumeMounts: []corev1.VolumeMount{
							{Name: "registry", MountPath: "/var/lib/kubelet/plugins_registry"},
							{Name: "plugins", MountPath: "/var/lib/kubelet/plugins"},
							{Name: "cdi", MountPath: "/var/run/cdi"},
						},
					}},
					Volumes: []corev1.Volume{
						hostPath("registry", "/var/lib/kubelet/plugins_registry"),
						hostPath("plugins", "/var/lib/kubelet/plugins"),
						hostPath("cdi", "/var/run/cdi"),
					},
				},
			},
		},
	}))
	must(t, "device class", create(ctx, client.ResourceV1().DeviceClasses(), &resourceapi.DeviceClass{
		ObjectMeta: metav1.ObjectMeta{Name: o.DriverName},
		Spec: resourceapi.DeviceClassSpec{Selectors: []resourceapi.DeviceSelector{{
			CEL: &resourceapi.CELDeviceSelector{Expression: fmt.Sprintf("device.driver == %q", o.DriverName)}}}},
	}))
}

func createPodWithClaim(ctx context.Context, t *testing.T, client kubernetes.Interface) (*corev1.Pod, *resourceapi.ResourceClaim) {
	t.Helper()
	claim := &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "one-gpu"},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{
			Name: "gpu", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: driverName},
		}}}},
	}
	claim, err := client.ResourceV1().ResourceClaims(namespace).Create(ctx, claim, metav1.CreateOptions{})
	must(t, "claim", err)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "gpu-user"},
		Spec: corev1.PodSpec{
			TerminationGracePeriodSeconds: ptr(int64(5)),
			Containers: []corev1.Container{{
				Name:      "work",
				Image:     "simnode.test/shell:v1",
				Command:   []string{"sh", "-c", "echo gpu=$SIMNODE_GPU; trap 'exit 0' TERM; sleep 3600 & wait"},
				Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "gpu"}}},
			}},
			ResourceClaims: []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimName: &claim.Name}},
		},
	}
	pod, err = client.CoreV1().Pods(namespace).Create(ctx, pod, metav1.CreateOptions{})
	must(t, "pod", err)
	return pod, claim
}

// waitForJournal waits until the test driver's journal holds call for claim.
func waitForJournal(ctx context.Context, t *testing.T, path, call, claimUID string) {
	t.Helper()
	err := waitForFile(ctx, path, func(data []byte) bool {
		sc := bufio.NewScanner(strings.NewReader(string(data)))
		for sc.Scan() {
			var e struct{ Call, ClaimUID string }
			if json.Unmarshal(sc.Bytes(), &e) == nil && e.Call == call && e.ClaimUID == claimUID {
				return true
			}
		}
		return false
	})
	if err != nil {
		data, _ := os.ReadFile(path)
		t.Fatalf("no %s for claim %s in %s: %v\njournal:\n%s", call, claimUID, path, err, data)
	}
}

func must(t *testing.T, what string, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

func ptr[T any](v T) *T { return &v }
