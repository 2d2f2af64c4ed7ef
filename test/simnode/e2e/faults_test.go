package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"

	"nvdra.local/test/simnode/harness"
)

// TestFaults applies each fault of the harness to a node running the test
// driver (reference kubeletplugin helper) and waits for the kubelet's and the
// control plane's own reactions. Subtests share one environment and run in
// order, each on its own node: kill-container and partition on node 0,
// restart-kubelet and delete on node 1, reboot and a plugin that stays away
// (the kubelet wipes its slices) on node 2.
func TestFaults(t *testing.T) {
	driver, err := harness.DefaultBinary("simnode-test-driver")
	if err != nil {
		t.Fatal(err)
	}
	// -v=3: the kubelet logs "Registered DRA plugin" at that level.
	env := startEnvironmentWith(t, harness.Options{Nodes: 3, Verbosity: 3,
		Images: map[string]string{driverImage: driver}})
	client := env.nodes.Client()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	createTestDriver(ctx, t, client)
	waitForDriverSlices(ctx, t, client, driverName, 3)
	cancel()
	name := func(i int) string { return env.nodes.Nodes[i].Config.Name }

	t.Run("kill-container", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		node := env.node(t, name(0))
		plugin := pluginPodOn(ctx, t, client, node.Config.Name)
		before := restartCount(plugin, "plugin")
		regs := registrations(t, node)
		slices := sliceUIDs(ctx, t, client, node.Config.Name)
		pid, err := env.nodes.KillContainer(node.Config.Name, namespace, plugin.Name, "plugin")
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("killed the plugin container of %s (pid %d)", plugin.Name, pid)
		p := waitForPod(ctx, t, client, plugin.Name, func(p *corev1.Pod) bool {
			s := containerStatus(p, "plugin")
			return s != nil && s.RestartCount > before && s.Ready
		})
		last := containerStatus(p, "plugin").LastTerminationState.Terminated
		if last == nil || last.ExitCode != 137 {
			t.Errorf("last termination %+v, want exit code 137 (SIGKILL)", last)
		}
		waitForRegistrations(ctx, t, node, regs+1)
		// Back within the kubelet's 30 s grace: its slices were never wiped.
		if now := sliceUIDs(ctx, t, client, node.Config.Name); !sameSet(now, slices) {
			t.Errorf("slices of %s changed across a plugin restart: %v -> %v", node.Config.Name, slices, now)
		}
		runClaimPodOn(ctx, t, client, node, "after-kill")
	})

	t.Run("restart-kubelet", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		node := env.node(t, name(1))
		before := runClaimPodOn(ctx, t, client, node, "before-restart")
		regs := registrations(t, node)
		slices := sliceUIDs(ctx, t, client, node.Config.Name)
		if err := env.nodes.RestartKubelet(node.Config.Name); err != nil {
			t.Fatal(err)
		}
		waitForRegistrations(ctx, t, node, regs+1)
		// The kubelet wipes the node's slices when it starts (no driver has
		// registered yet); the plugin publishes them again.
		waitForNewSlices(ctx, t, client, node.Config.Name, slices)
		// The pod that ran before is started again by the new kubelet.
		waitForPod(ctx, t, client, before.Name, func(p *corev1.Pod) bool {
			s := containerStatus(p, "work")
			return s != nil && s.Ready && s.ContainerID != containerStatus(before, "work").ContainerID
		})
		runClaimPodOn(ctx, t, client, node, "after-restart")
	})

	t.Run("reboot", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		node := env.node(t, name(2))
		oldBoot, err := node.Config.BootID()
		if err != nil {
			t.Fatal(err)
		}
		pod := runClaimPodOn(ctx, t, client, node, "before-reboot")
		// Containers see the node's boot id, not this machine's.
		waitForLog(ctx, t, client, pod.Name, "boot="+oldBoot)
		claimUID := podClaimUID(ctx, t, client, pod)
		journal := journalPath(node)
		slices := sliceUIDs(ctx, t, client, node.Config.Name)
		if err := env.nodes.Reboot(node.Config.Name); err != nil {
			t.Fatal(err)
		}
		newBoot, err := node.Config.BootID()
		if err != nil || newBoot == oldBoot {
			t.Fatalf("boot id after reboot %q (%v), before %q", newBoot, err, oldBoot)
		}
		waitForNode(ctx, t, client, node.Config.Name, func(n *corev1.Node) bool { return n.Status.NodeInfo.BootID == newBoot })
		waitForNewSlices(ctx, t, client, node.Config.Name, slices)
		// The pod is started again, and since the reboot emptied
		// var/run/cdi, only because the kubelet prepared its claim again.
		waitForPod(ctx, t, client, pod.Name, func(p *corev1.Pod) bool {
			s := containerStatus(p, "work")
			return s != nil && s.Ready && s.ContainerID != containerStatus(pod, "work").ContainerID
		})
		waitForLog(ctx, t, client, pod.Name, "boot="+newBoot)
		if n := journalCount(t, journal, "NodePrepareResources", claimUID); n < 2 {
			t.Errorf("claim %s prepared %d times, want a second NodePrepareResources after the reboot", claimUID, n)
		}
	})

	t.Run("partition", func(t *testing.T) {
		// The node lifecycle controller's grace period is its default (50 s).
		ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
		defer cancel()
		node := env.node(t, name(0))
		refused, next, err := env.nodes.RefusedConnections(node.Config.Name)
		if err != nil {
			t.Fatal(err)
		}
		if err := env.nodes.Partition(node.Config.Name); err != nil {
			t.Fatal(err)
		}
		cut := time.Now()
		leaseBefore := nodeLease(ctx, t, client, node.Config.Name)
		// The kubelet keeps trying, and fails.
		select {
		case <-next:
		case <-ctx.Done():
			t.Fatalf("the kubelet of %s made no API connection while partitioned (refused %d before)", node.Config.Name, refused)
		}
		n := waitForNode(ctx, t, client, node.Config.Name, func(n *corev1.Node) bool {
			c := nodeCondition(n, corev1.NodeReady)
			return c != nil && c.Status != corev1.ConditionTrue
		})
		t.Logf("%s Ready=%s after %.0fs of partition: %s", n.Name, nodeCondition(n, corev1.NodeReady).Status,
			time.Since(cut).Seconds(), nodeCondition(n, corev1.NodeReady).Message)
		// No heartbeat got through meanwhile.
		lease := nodeLease(ctx, t, client, node.Config.Name)
		if lease.Spec.RenewTime.After(leaseBefore.Spec.RenewTime.Time) && lease.Spec.RenewTime.After(cut.Add(time.Second)) {
			t.Errorf("lease of %s renewed at %v during the partition (cut at %v)", node.Config.Name, lease.Spec.RenewTime, cut)
		}
		if err := env.nodes.Heal(node.Config.Name); err != nil {
			t.Fatal(err)
		}
		healed := time.Now()
		waitForLease(ctx, t, client, node.Config.Name, func(l *coordinationv1.Lease) bool {
			return l.Spec.RenewTime != nil && l.Spec.RenewTime.After(healed)
		})
		waitForNode(ctx, t, client, node.Config.Name, func(n *corev1.Node) bool {
			c := nodeCondition(n, corev1.NodeReady)
			return c != nil && c.Status == corev1.ConditionTrue
		})
		runClaimPodOn(ctx, t, client, node, "after-heal")
	})

	t.Run("plugin-stays-away", func(t *testing.T) {
		// Not a harness fault: the plugin's pod is evicted by a NoExecute
		// taint and the DaemonSet does not bring it back. The kubelet
		// deregisters the driver and, after its 30 s grace, deletes the
		// node's slices itself (the Node stays, so no garbage collection).
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		node := env.node(t, name(2))
		plugin := pluginPodOn(ctx, t, client, node.Config.Name)
		if len(sliceUIDs(ctx, t, client, node.Config.Name)) == 0 {
			t.Fatalf("%s has no slices to begin with", node.Config.Name)
		}
		n, err := client.CoreV1().Nodes().Get(ctx, node.Config.Name, metav1.GetOptions{})
		must(t, "node", err)
		n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: "simnode.test/away", Effect: corev1.TaintEffectNoExecute})
		_, err = client.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{})
		must(t, "taint node", err)
		away := time.Now()
		waitForPodGone(ctx, t, client, namespace, plugin.Name)
		waitForSlicesGone(ctx, t, client, node.Config.Name)
		t.Logf("slices of %s gone %.0fs after the taint", node.Config.Name, time.Since(away).Seconds())
		if _, err := client.CoreV1().Nodes().Get(ctx, node.Config.Name, metav1.GetOptions{}); err != nil {
			t.Errorf("node %s: %v", node.Config.Name, err)
		}
		log, err := os.ReadFile(node.LogPath())
		must(t, "node log", err)
		if countLines(log, `"Unregistered DRA plugin"`, `driverName="`+driverName+`"`) == 0 {
			t.Errorf("the kubelet of %s never logged unregistering %s", node.Config.Name, driverName)
		}
	})

	t.Run("delete", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		node := env.node(t, name(1))
		list, err := client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{
			FieldSelector: fields.OneTermEqualSelector(resourceapi.ResourceSliceSelectorNodeName, node.Config.Name).String(),
		})
		if err != nil || len(list.Items) == 0 {
			t.Fatalf("%s has no slices to begin with (%v)", node.Config.Name, err)
		}
		for _, s := range list.Items {
			owned := false
			for _, o := range s.OwnerReferences {
				owned = owned || (o.Kind == "Node" && o.Name == node.Config.Name)
			}
			if !owned {
				t.Errorf("slice %s has no owner reference to Node %s: %+v", s.Name, node.Config.Name, s.OwnerReferences)
			}
		}
		if err := env.nodes.DeleteNode(ctx, node.Config.Name); err != nil {
			t.Fatal(err)
		}
		// Their owner reference names the Node: the garbage collector
		// removes them.
		waitForSlicesGone(ctx, t, client, node.Config.Name)
		if _, err := client.CoreV1().Nodes().Get(ctx, node.Config.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("node %s still exists after DeleteNode: %v", node.Config.Name, err)
		}
	})
}

// pluginPodOn returns the test driver's pod on node.
func pluginPodOn(ctx context.Context, t *testing.T, client kubernetes.Interface, node string) *corev1.Pod {
	t.Helper()
	pods, err := client.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{
		LabelSelector: "app=simnode-test-driver",
		FieldSelector: fields.OneTermEqualSelector("spec.nodeName", node).String(),
	})
	if err != nil || len(pods.Items) != 1 {
		t.Fatalf("test driver pod on %s: %v (%d pods)", node, err, len(pods.Items))
	}
	return &pods.Items[0]
}

func containerStatus(p *corev1.Pod, name string) *corev1.ContainerStatus {
	for i := range p.Status.ContainerStatuses {
		if p.Status.ContainerStatuses[i].Name == name {
			return &p.Status.ContainerStatuses[i]
		}
	}
	return nil
}

func restartCount(p *corev1.Pod, container string) int32 {
	if s := containerStatus(p, container); s != nil {
		return s.RestartCount
	}
	return 0
}

// registrations counts the kubelet's "Registered DRA plugin" lines for the
// test driver in the node's log.
func registrations(t *testing.T, node *harness.Node) int {
	t.Helper()
	data, err := os.ReadFile(node.LogPath())
	if err != nil {
		t.Fatal(err)
	}
	return countRegistrations(data)
}

func countRegistrations(log []byte) int {
	return countLines(log, `"Registered DRA plugin"`, `driverName="`+driverName+`"`)
}

// countLines counts the lines of log that hold every one of parts.
func countLines(log []byte, parts ...string) int {
	n := 0
	for _, line := range bytes.Split(log, []byte("\n")) {
		all := true
		for _, p := range parts {
			all = all && bytes.Contains(line, []byte(p))
		}
		if all {
			n++
		}
	}
	return n
}

func waitForRegistrations(ctx context.Context, t *testing.T, node *harness.Node, want int) {
	t.Helper()
	err := waitForFile(ctx, node.LogPath(), func(data []byte) bool { return countRegistrations(data) >= want })
	if err != nil {
		t.Fatalf("the kubelet of %s did not register %s again (want %d registrations): %v", node.Config.Name, driverName, want, err)
	}
}

func sliceListWatch(client kubernetes.Interface, node string) *cache.ListWatch {
	selector := fields.OneTermEqualSelector(resourceapi.ResourceSliceSelectorNodeName, node).String()
	return &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.FieldSelector = selector
			return client.ResourceV1().ResourceSlices().List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector = selector
			return client.ResourceV1().ResourceSlices().Watch(ctx, o)
		},
	}
}

// sliceUIDs lists the test driver's slices of node.
func sliceUIDs(ctx context.Context, t *testing.T, client kubernetes.Interface, node string) map[types.UID]bool {
	t.Helper()
	list, err := client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector(resourceapi.ResourceSliceSelectorNodeName, node).String(),
	})
	if err != nil {
		t.Fatalf("list slices of %s: %v", node, err)
	}
	out := map[types.UID]bool{}
	for _, s := range list.Items {
		if s.Spec.Driver == driverName {
			out[s.UID] = true
		}
	}
	return out
}

func sameSet(a, b map[types.UID]bool) bool {
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

// waitForNewSlices waits until the node has test driver slices and none of
// them is one of old (they were deleted and published anew).
func waitForNewSlices(ctx context.Context, t *testing.T, client kubernetes.Interface, node string, old map[types.UID]bool) {
	t.Helper()
	current := map[types.UID]bool{}
	_, err := until(ctx, sliceListWatch(client, node), &resourceapi.ResourceSlice{}, func(e watch.Event) (bool, error) {
		s, ok := e.Object.(*resourceapi.ResourceSlice)
		if !ok || s.Spec.Driver != driverName {
			return false, nil
		}
		if e.Type == watch.Deleted {
			delete(current, s.UID)
		} else {
			current[s.UID] = true
		}
		if len(current) == 0 {
			return false, nil
		}
		for uid := range current {
			if old[uid] {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("slices of %s were not published anew (old %v, now %v): %v", node, old, current, err)
	}
}

func waitForSlicesGone(ctx context.Context, t *testing.T, client kubernetes.Interface, node string) {
	t.Helper()
	present := map[types.UID]bool{}
	gone := func(store cache.Store) (bool, error) {
		for _, obj := range store.List() {
			present[obj.(*resourceapi.ResourceSlice).UID] = true
		}
		return len(present) == 0, nil
	}
	_, err := watchtools.UntilWithSync(ctx, sliceListWatch(client, node), &resourceapi.ResourceSlice{}, gone, func(e watch.Event) (bool, error) {
		if s, ok := e.Object.(*resourceapi.ResourceSlice); ok {
			if e.Type == watch.Deleted {
				delete(present, s.UID)
			} else {
				present[s.UID] = true
			}
		}
		return len(present) == 0, nil
	})
	if err != nil {
		t.Fatalf("slices of %s were not removed: %v", node, err)
	}
}

// runClaimPodOn creates a claim for one test driver device and a pod on node
// that uses it, waits until it runs and the driver journaled its prepare.
// The pod prints its boot id and device.
func runClaimPodOn(ctx context.Context, t *testing.T, client kubernetes.Interface, node *harness.Node, name string) *corev1.Pod {
	t.Helper()
	claim := &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{
			Name: "gpu", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: driverName},
		}}}},
	}
	claim, err := client.ResourceV1().ResourceClaims(namespace).Create(ctx, claim, metav1.CreateOptions{})
	must(t, "claim", err)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PodSpec{
			NodeSelector:                  map[string]string{"kubernetes.io/hostname": node.Config.Name},
			TerminationGracePeriodSeconds: ptr(int64(5)),
			Containers: []corev1.Container{{
				Name:  "work",
				Image: "simnode.test/shell:v1",
				Command: []string{"sh", "-c",
					"echo boot=$(cat /proc/sys/kernel/random/boot_id) gpu=$SIMNODE_GPU; trap 'exit 0' TERM; sleep 3600 & wait"},
				Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "gpu"}}},
			}},
			ResourceClaims: []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimName: &claim.Name}},
		},
	}
	_, err = client.CoreV1().Pods(namespace).Create(ctx, pod, metav1.CreateOptions{})
	must(t, "pod", err)
	pod = waitForPod(ctx, t, client, name, func(p *corev1.Pod) bool {
		s := containerStatus(p, "work")
		return s != nil && s.Ready
	})
	waitForJournal(ctx, t, journalPath(node), "NodePrepareResources", string(claim.UID))
	return pod
}

func podClaimUID(ctx context.Context, t *testing.T, client kubernetes.Interface, pod *corev1.Pod) string {
	t.Helper()
	claim, err := client.ResourceV1().ResourceClaims(namespace).Get(ctx, *pod.Spec.ResourceClaims[0].ResourceClaimName, metav1.GetOptions{})
	must(t, "claim", err)
	return string(claim.UID)
}

func journalPath(node *harness.Node) string {
	return node.Config.RootDir() + "/plugins/" + driverName + "/calls.jsonl"
}

// journalCount counts the journal's entries of call for claimUID.
func journalCount(t *testing.T, path, call, claimUID string) int {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, line := range strings.Split(string(data), "\n") {
		if strings.Contains(line, fmt.Sprintf(`"call":%q`, call)) && strings.Contains(line, fmt.Sprintf(`"claimUID":%q`, claimUID)) {
			n++
		}
	}
	return n
}

func nodeCondition(n *corev1.Node, c corev1.NodeConditionType) *corev1.NodeCondition {
	for i := range n.Status.Conditions {
		if n.Status.Conditions[i].Type == c {
			return &n.Status.Conditions[i]
		}
	}
	return nil
}

// waitForNode waits, on a watch, until cond holds for the Node.
func waitForNode(ctx context.Context, t *testing.T, client kubernetes.Interface, name string, cond func(*corev1.Node) bool) *corev1.Node {
	t.Helper()
	selector := fields.OneTermEqualSelector("metadata.name", name).String()
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.FieldSelector = selector
			return client.CoreV1().Nodes().List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector = selector
			return client.CoreV1().Nodes().Watch(ctx, o)
		},
	}
	var last *corev1.Node
	ev, err := until(ctx, lw, &corev1.Node{}, func(e watch.Event) (bool, error) {
		n, ok := e.Object.(*corev1.Node)
		if !ok {
			return false, nil
		}
		last = n
		return cond(n), nil
	})
	if err != nil {
		var status any
		if last != nil {
			status = last.Status.Conditions
		}
		t.Fatalf("waiting for node %s: %v; last conditions %+v", name, err, status)
	}
	return ev.Object.(*corev1.Node)
}

func nodeLease(ctx context.Context, t *testing.T, client kubernetes.Interface, node string) *coordinationv1.Lease {
	t.Helper()
	l, err := client.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(ctx, node, metav1.GetOptions{})
	must(t, "node lease", err)
	return l
}

// waitForLease waits, on a watch, until cond holds for the node's Lease.
func waitForLease(ctx context.Context, t *testing.T, client kubernetes.Interface, node string, cond func(*coordinationv1.Lease) bool) {
	t.Helper()
	selector := fields.OneTermEqualSelector("metadata.name", node).String()
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.FieldSelector = selector
			return client.CoordinationV1().Leases(corev1.NamespaceNodeLease).List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector = selector
			return client.CoordinationV1().Leases(corev1.NamespaceNodeLease).Watch(ctx, o)
		},
	}
	_, err := until(ctx, lw, &coordinationv1.Lease{}, func(e watch.Event) (bool, error) {
		l, ok := e.Object.(*coordinationv1.Lease)
		return ok && cond(l), nil
	})
	if err != nil {
		t.Fatalf("waiting for the lease of %s: %v", node, err)
	}
}
