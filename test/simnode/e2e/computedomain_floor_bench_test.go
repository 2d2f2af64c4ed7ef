package e2e

// The floor of the ComputeDomain scale benchmark (issue 27): the same shape
// of workload as ours, on the same simulated nodes and control plane, with a
// driver that prepares at once and runs no IMEX: the test driver on the
// reference kubelet plugin helper (cmd/simnode-test-driver). What the floor
// takes is what Kubernetes itself takes for the shape: claims made from
// templates, scheduling, the DaemonSet controller, the kubelets' pod start.
// Our workload cannot be faster than that; the ratio of ours to it is what
// the driver costs.
//
// The shape, as TestComputeDomainScaleBench's (ours):
//   - a DaemonSet of N pods, one per node, each with a claim from a
//     template (ours: the controller's IMEX daemon DaemonSet);
//   - N worker pods pinned one per node, each with a claim from a template
//     (ours: the domain's channel template).
// Both come from one submission. Unlike ours, the floor's DaemonSet covers
// every node from the start: ours only follows the node labels the
// controller puts once the workers' channels are allocated.

import (
	"context"
	"fmt"
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
)

const (
	// The floor's driver: its namespace, DRA driver name and DeviceClass.
	floorDriverNamespace = "cd-floor-driver"
	floorDriverName      = "floor.simnode.test"
	// The floor's workload.
	floorNamespace   = "cd-floor"
	floorDaemonLabel = "cd-floor-daemon"
)

// floorWorkload is what the floor's scaleRecorder follows.
var floorWorkload = scaleWorkload{workerNamespace: floorNamespace, daemonNamespace: floorNamespace, daemonLabel: floorDaemonLabel}

// installFloorDriver runs the test driver on every node with two devices
// each (one for the node's daemon claim, one for its worker's) and waits
// until every node publishes them.
func installFloorDriver(ctx context.Context, t *testing.T, client kubernetes.Interface, nodes int) {
	t.Helper()
	installTestDriver(ctx, t, client, testDriverOptions{Namespace: floorDriverNamespace, DriverName: floorDriverName, Devices: 2})
	waitForDriverSlices(ctx, t, client, floorDriverName, nodes)
}

// floorResult is one floor run's figures, from its submission.
type floorResult struct {
	Submitted    time.Duration // the last worker pod created
	Running      time.Duration // the last worker Running
	DaemonsReady time.Duration // the last daemon pod Ready
	Window       time.Duration // submission to both of the above
	Stages       []stageFigure
	Audit        auditCounts
	CPU          map[string]float64
}

// runFloor submits the floor's workload on every node of c with client (no
// client-side limit, as ours) and waits until every worker runs and every
// daemon pod is Ready.
func runFloor(ctx context.Context, t *testing.T, c *cdCluster, client kubernetes.Interface, auditPath string) floorResult {
	t.Helper()
	nodes := c.Nodes()
	must(t, "namespace", create(ctx, client.CoreV1().Namespaces(),
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: floorNamespace}}))
	for _, name := range []string{"daemon", "worker"} {
		must(t, "claim template "+name, create(ctx, client.ResourceV1().ResourceClaimTemplates(floorNamespace),
			&resourceapi.ResourceClaimTemplate{
				ObjectMeta: metav1.ObjectMeta{Name: name},
				Spec: resourceapi.ResourceClaimTemplateSpec{Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{
					Requests: []resourceapi.DeviceRequest{{Name: "device",
						Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: floorDriverName}}}}}},
			}))
	}
	rec := startScaleRecorder(t, c, client, len(nodes), floorWorkload)

	cpuBefore := cpuByProgram()
	t0 := time.Now()
	labels := map[string]string{floorDaemonLabel: "daemon"}
	must(t, "floor DaemonSet", create(ctx, client.AppsV1().DaemonSets(floorNamespace), &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: "daemon"},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       floorPodSpec("daemon", "daemon"),
			},
		},
	}))
	for i, node := range nodes {
		spec := floorPodSpec("worker", "worker")
		spec.NodeSelector = map[string]string{"kubernetes.io/hostname": node}
		_, err := client.CoreV1().Pods(floorNamespace).Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("worker-%d", i)}, Spec: spec}, metav1.CreateOptions{})
		must(t, "floor worker", err)
	}
	var r floorResult
	r.Submitted = time.Since(t0)
	done := rec.wait(ctx, t, nil, t0)
	r.Window = done.Sub(t0)
	r.CPU = cpuSince(cpuBefore, cpuByProgram())
	rec.mu.Lock()
	r.Running = lastOf(rec.stages[stageWorkerRunning]).Sub(t0)
	r.DaemonsReady = lastOf(rec.stages[stageDaemonReady]).Sub(t0)
	rec.mu.Unlock()
	r.Stages = rec.stageFigures(t0)
	r.Audit = countAudit(t, auditPath, t0, done)
	return r
}

// floorPodSpec is a floor pod: one container holding the claim from
// template, Ready once it runs (no probe).
func floorPodSpec(container, template string) corev1.PodSpec {
	return corev1.PodSpec{
		TerminationGracePeriodSeconds: ptr(int64(5)),
		ResourceClaims:                []corev1.PodResourceClaim{{Name: "device", ResourceClaimTemplateName: ptr(template)}},
		Containers: []corev1.Container{{
			Name:      container,
			Image:     workImage,
			Command:   []string{"sh", "-c", "trap 'exit 0' TERM; sleep 9999 & wait"},
			Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "device"}}},
		}},
	}
}

func (f floorResult) print(n int) {
	fmt.Printf("  floor (test driver, no IMEX; same nodes): workers Running %.2f s, daemon pods Ready %.2f s "+
		"(all created after %.2f s); API requests %d (kubelets %.1f per node)\n", f.Running.Seconds(),
		f.DaemonsReady.Seconds(), f.Submitted.Seconds(), f.Audit.total(), float64(f.Audit.byClient["kubelet"])/float64(n))
	fmt.Printf("  floor stages (median / last):")
	for _, st := range f.Stages {
		if st.Nodes > 0 {
			fmt.Printf(" %s %.2f / %.2f s;", st.Stage, st.P50.Seconds(), st.Last.Seconds())
		}
	}
	fmt.Println()
}

// removeWorkload deletes namespace ns (a workload's pods, claims and, for
// ours, the domain, whose cascade removes its daemons) and waits until no
// pod matching selector is left in any of waitNamespaces: whichever of ours
// and the floor runs second must not share the nodes with the first's pods
// (idle containers still cost each kubelet its pod syncs and relists; at 72
// nodes 144 of them slowed the second run by half).
func removeWorkload(ctx context.Context, t *testing.T, client kubernetes.Interface, ns string, waitFor map[string]string) {
	t.Helper()
	start := time.Now()
	if err := client.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		t.Fatalf("delete namespace %s: %v", ns, err)
	}
	for podNS, selector := range waitFor {
		lw := &cache.ListWatch{
			ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
				o.LabelSelector = selector
				return client.CoreV1().Pods(podNS).List(ctx, o)
			},
			WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
				o.LabelSelector = selector
				return client.CoreV1().Pods(podNS).Watch(ctx, o)
			},
		}
		if _, err := untilWithStore(ctx, lw, &corev1.Pod{}, func(s cache.Store) (bool, error) { return len(s.List()) == 0, nil }); err != nil {
			t.Fatalf("pods %q in %s still there after deleting namespace %s: %v", selector, podNS, ns, err)
		}
	}
	t.Logf("workload in %s removed in %.1f s", ns, time.Since(start).Seconds())
}
