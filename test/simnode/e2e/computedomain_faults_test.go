package e2e

// Fault tests of ComputeDomains with the real compute-domain-controller, the
// chart's pods on simulated GB200 nodes (cd_cluster_env_test.go): a node
// partitioned and healed, a daemon killed, the API server restarted, and the
// controller killed mid-cascade. One cluster, scenarios in sequence; each
// awaits convergence on watches and inotify and logs how long it took.
//
// Throughout, an informer on the driver namespace's ComputeDomainCliques
// (indexRecorder) records every index each entry ever had: an entry whose
// index changes while it stays in its clique is an index swap (upstream
// #723, #816, #1107), an error whatever the scenario.

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/tools/cache"

	"nvdra.local/test/simnode/internal/cri"
)

const (
	faultsNamespace = "cd-faults"
	// The chart's controller container, and the exit status of a process
	// ended by a crash point (src/common/crash_point.h).
	cdControllerContainer = "compute-domain"
	crashPointExitCode    = 86
	// Where the controller's crash-once marker lives: an emptyDir the test
	// adds, which outlives the container's restart but not the pod.
	controllerCrashDir = "/crash"
)

// The deletion cascade's crash points (controller.cc Teardown), in order.
var cdCascadeCrashPoints = []string{
	"cascade-after-workload-template", "cascade-after-daemonset", "cascade-after-node-labels", "cascade-after-cliques",
}

// TestComputeDomainFaults, on four gb200-tray nodes of one clique with the
// chart installed; P and S are two nodes the controller does not run on.
//  1. A domain (numNodes 3) with workers on every node but S turns Ready.
//  2. Partition P (its API proxy refuses connections; the kubelet and the
//     daemon there retry and are refused). A worker on S joins meanwhile:
//     the domain turns Ready on 4 nodes with P's entry as it was (our
//     controller takes status from the cliques, and P's daemon cannot
//     write; nvidia-imex does not use the API). It stays so once the node
//     controller marks P's Node Ready=Unknown (50 s), the daemon pod stays.
//     P's daemon has not seen the join; after Heal it catches up: its
//     /etc/hosts maps S's index to S's daemon; Node and daemon pod Ready.
//  3. SIGKILL P's daemon container: it restarts, turns Ready again with
//     the same index, the domain Ready; workers keep their containers.
//  4. S's worker leaves; the controller's node is partitioned and a new
//     worker on S joins: its daemon publishes its clique and NotReady on its
//     pod and gets no entry (the controller is the only writer of clique
//     entries). After Heal the controller catches up: S's entry with an
//     index, the domain Ready on 4 nodes, no other index changed.
//  5. S's worker leaves again, then kube-apiserver is restarted (etcd
//     kept). A new worker on S joins: plugin, controller and every daemon
//     are back (each daemon's /etc/hosts maps S), no index changed.
//     Deleting the domain leaves nothing.
//  6. For each cascade crash point: the controller Deployment gets
//     NVDRA_TEST_CRASH_AT=<point> (once per pod), a domain on two nodes
//     turns Ready and is deleted; the controller exits at the point (exit
//     86), the kubelet restarts it, the restarted controller finishes the
//     cascade and nothing is left (DaemonSet, claim templates, cliques,
//     node labels, daemon pods, finalizer). SIMNODE_CD_CASCADE_CRASH_POINTS
//     narrows them (comma-separated, "-" for none).
//
// Convergence times are logged, not asserted. About 2.5 minutes.
func TestComputeDomainFaults(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	c := startCDCluster(ctx, t, cdClusterOptions{Cliques: []int{4}})
	rec := startIndexRecorder(t, c.Dyn, c.Namespace)

	ctlNode := c.ControllerPod(ctx, t).Spec.NodeName
	var others []string
	for _, n := range c.Nodes() {
		if n != ctlNode {
			others = append(others, n)
		}
	}
	partitioned, spare := others[0], others[1]
	var initial []string
	for _, n := range c.Nodes() {
		if n != spare {
			initial = append(initial, n)
		}
	}
	all := c.Nodes()
	t.Logf("controller on %s; partitioned node %s, spare node %s", ctlNode, partitioned, spare)

	// 1. A Ready domain.
	start := time.Now()
	readyCtx, readyCancel := context.WithTimeout(ctx, 4*time.Minute)
	defer readyCancel()
	cd := c.CreateComputeDomain(readyCtx, t, cdSpec{Namespace: faultsNamespace, Name: "faults", NumNodes: 3})
	for _, n := range initial {
		c.createWorker(readyCtx, t, faultsNamespace, "w-"+n, n, cd.channelTemplate)
	}
	st := c.WaitForCDReady(readyCtx, t, cd, initial)
	for _, n := range initial {
		waitForPodIn(readyCtx, t, c.Client, faultsNamespace, "w-"+n, func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodRunning })
	}
	t.Logf("domain Ready on %v %.1f s after its creation: %v", initial, time.Since(start).Seconds(), st.Nodes)
	indexes := statusIndexes(t, st)

	// leave deletes S's worker and waits until its daemon left the domain.
	leave := func(ctx context.Context, t *testing.T, worker string) {
		t.Helper()
		must(t, "delete "+worker, c.Client.CoreV1().Pods(faultsNamespace).Delete(ctx, worker, metav1.DeleteOptions{}))
		waitForPodGone(ctx, t, c.Client, faultsNamespace, worker)
		delete(indexes, spare)
		checkIndexesKept(t, indexes, c.WaitForCDReady(ctx, t, cd, initial))
		waitDaemonGone(ctx, t, c, cd, spare)
	}

	t.Run("PartitionAndHeal", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(ctx, 4*time.Minute)
		defer cancel()
		daemons := c.DaemonPods(ctx, t, cd)
		before := daemons[partitioned]
		_, refused, err := c.Env.nodes.RefusedConnections(partitioned)
		must(t, "refused connections", err)
		must(t, "partition", c.Env.nodes.Partition(partitioned))
		partitionedAt := time.Now()
		healed := false
		defer func() {
			if !healed {
				_ = c.Env.nodes.Heal(partitioned)
			}
		}()
		select {
		case <-refused:
		case <-ctx.Done():
			t.Fatalf("no connection from %s refused after the partition", partitioned)
		}
		// A worker joins while P cannot see it.
		c.createWorker(ctx, t, faultsNamespace, "w-"+spare, spare, cd.channelTemplate)
		st := c.WaitForCDReady(ctx, t, cd, all)
		t.Logf("partitioned: a daemon joined on %s, domain Ready on 4 nodes %.1f s after the partition", spare, time.Since(partitionedAt).Seconds())
		checkIndexesKept(t, indexes, st)
		spareEntry := st.Nodes[spare]
		if spareEntry.Index == nil {
			t.Fatalf("%s has no index in %v", spare, st.Nodes)
		}
		indexes[spare] = *spareEntry.Index

		// Long enough for the node controller to give P up (Ready Unknown
		// after its 50 s grace; pods there marked not Ready). Our
		// controller takes the domain's status from the cliques, so the
		// domain stays Ready and P keeps its entry and index; the daemon
		// pod tolerates the unreachable taint and stays.
		n := waitForNode(ctx, t, c.Client, partitioned, func(n *corev1.Node) bool {
			cond := nodeCondition(n, corev1.NodeReady)
			return cond != nil && cond.Status != corev1.ConditionTrue
		})
		t.Logf("%s Ready=%s %.1f s after the partition", partitioned, nodeCondition(n, corev1.NodeReady).Status, time.Since(partitionedAt).Seconds())
		u, err := c.Dyn.Resource(cdGVR).Namespace(cd.namespace).Get(ctx, cd.name, metav1.GetOptions{})
		must(t, "ComputeDomain", err)
		if now := parseCDStatus(u); now.Status != "Ready" || len(now.Nodes) != len(all) || now.Nodes[partitioned].Status != "Ready" {
			t.Errorf("domain while %s is unreachable: %s %v, want Ready on %v (status from the cliques)", partitioned, now.Status, now.Nodes, all)
		} else {
			checkIndexesKept(t, indexes, now)
		}
		if p, err := c.Client.CoreV1().Pods(c.Namespace).Get(ctx, before.Name, metav1.GetOptions{}); err != nil || p.DeletionTimestamp != nil {
			t.Errorf("daemon pod %s on the unreachable node: %v (deleting: %v)", before.Name, err, p != nil && p.DeletionTimestamp != nil)
		}
		// The partition hid the join from P's daemon.
		if mapped := hostsMaps(t, c, partitioned, before, spareEntry.IPAddress, *spareEntry.Index); mapped {
			t.Errorf("the daemon on %s mapped %s while partitioned", partitioned, spare)
		}
		must(t, "heal", c.Env.nodes.Heal(partitioned))
		healed = true
		healedAt := time.Now()
		waitHostsMaps(ctx, t, c, partitioned, before, spareEntry.IPAddress, *spareEntry.Index)
		t.Logf("healed after %.1f s: the daemon on %s mapped %s's index %d %.1f s after the heal",
			healedAt.Sub(partitionedAt).Seconds(), partitioned, spare, *spareEntry.Index, time.Since(healedAt).Seconds())
		after, err := c.Client.CoreV1().Pods(c.Namespace).Get(ctx, before.Name, metav1.GetOptions{})
		must(t, "daemon pod on "+partitioned, err)
		if restarts(after) != restarts(before) {
			t.Errorf("daemon on %s restarted across the partition (%d -> %d)", partitioned, restarts(before), restarts(after))
		}
		waitForNode(ctx, t, c.Client, partitioned, func(n *corev1.Node) bool {
			cond := nodeCondition(n, corev1.NodeReady)
			return cond != nil && cond.Status == corev1.ConditionTrue
		})
		waitForPodIn(ctx, t, c.Client, c.Namespace, before.Name, podReady)
		t.Logf("%s Ready and its daemon pod Ready %.1f s after the heal", partitioned, time.Since(healedAt).Seconds())
		checkIndexesKept(t, indexes, c.WaitForCDReady(ctx, t, cd, all))
	})

	t.Run("DaemonKilled", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(ctx, 4*time.Minute)
		defer cancel()
		daemons := c.DaemonPods(ctx, t, cd)
		victim := daemons[partitioned]
		workers := workerContainers(ctx, t, c, all)
		pid, err := c.Env.nodes.KillContainer(partitioned, c.Namespace, victim.Name, cdDaemonContainer)
		must(t, "kill the daemon on "+partitioned, err)
		killedAt := time.Now()
		before := restarts(victim)
		p := waitForPodIn(ctx, t, c.Client, c.Namespace, victim.Name, func(p *corev1.Pod) bool {
			s := containerStatus(p, cdDaemonContainer)
			return s != nil && s.RestartCount > before && s.Ready
		})
		t.Logf("daemon on %s (pid %d) SIGKILLed: restarted and Ready after %.1f s", partitioned, pid, time.Since(killedAt).Seconds())
		if s := containerStatus(p, cdDaemonContainer); s.LastTerminationState.Terminated == nil || s.LastTerminationState.Terminated.ExitCode != 137 {
			t.Errorf("daemon's last termination %+v, want exit code 137", s.LastTerminationState.Terminated)
		}
		st := c.WaitForCDReady(ctx, t, cd, all)
		t.Logf("domain Ready on 4 nodes %.1f s after the kill", time.Since(killedAt).Seconds())
		checkIndexesKept(t, indexes, st)
		if got := workerContainers(ctx, t, c, all); !equalMaps(got, workers) {
			t.Errorf("workers changed across the daemon's kill: before %v, after %v", workers, got)
		}
	})

	t.Run("ControllerNodePartitioned", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(ctx, 4*time.Minute)
		defer cancel()
		leave(ctx, t, "w-"+spare)
		_, refused, err := c.Env.nodes.RefusedConnections(ctlNode)
		must(t, "refused connections", err)
		must(t, "partition", c.Env.nodes.Partition(ctlNode))
		partitionedAt := time.Now()
		healed := false
		defer func() {
			if !healed {
				_ = c.Env.nodes.Heal(ctlNode)
			}
		}()
		select {
		case <-refused:
		case <-ctx.Done():
			t.Fatalf("no connection from %s refused after the partition", ctlNode)
		}
		// S's daemon starts (the plugin labels S at Prepare: the controller
		// cannot) and publishes its clique and NotReady on its pod; with the
		// controller, the only writer of clique entries, cut off, it gets no
		// entry and no index and waits.
		c.createWorker(ctx, t, faultsNamespace, "w2-"+spare, spare, cd.channelTemplate)
		lw := cache.NewFilteredListWatchFromClient(c.Client.CoreV1().RESTClient(), "pods", c.Namespace,
			func(o *metav1.ListOptions) { o.LabelSelector = cdLabelKey + "=" + string(cd.uid) })
		if _, err := untilWithStore(ctx, lw, &corev1.Pod{}, func(s cache.Store) (bool, error) {
			for _, item := range s.List() {
				p := item.(*corev1.Pod)
				if p.Spec.NodeName == spare && p.DeletionTimestamp == nil && p.Labels[cdCliqueLabelKey] != "" &&
					p.Annotations[cdDaemonStatusAnnotation] == "NotReady" {
					return true, nil
				}
			}
			return false, nil
		}); err != nil {
			t.Fatalf("%s's daemon did not publish its clique while the controller was cut off: %v", spare, err)
		}
		for _, entries := range c.Cliques(ctx, t, cd) {
			if e, ok := entries[spare]; ok {
				t.Errorf("%s has a clique entry %v while the controller is cut off (only the controller writes them)", spare, e)
			}
		}
		t.Logf("controller's node partitioned: %s's daemon published its clique, no entry, %.1f s later", spare, time.Since(partitionedAt).Seconds())
		must(t, "heal", c.Env.nodes.Heal(ctlNode))
		healed = true
		healedAt := time.Now()
		st := c.WaitForCDReady(ctx, t, cd, all)
		t.Logf("healed after %.1f s: domain Ready on 4 nodes %.1f s after the heal", healedAt.Sub(partitionedAt).Seconds(), time.Since(healedAt).Seconds())
		checkIndexesKept(t, indexes, st)
		if e := st.Nodes[spare]; e.Index == nil {
			t.Fatalf("%s has no index after the heal: %v", spare, st.Nodes)
		} else {
			indexes[spare] = *e.Index
		}
	})

	t.Run("APIServerRestarted", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(ctx, 4*time.Minute)
		defer cancel()
		// S's worker leaves, so that a node can join after the restart.
		leave(ctx, t, "w2-"+spare)

		away, err := c.Env.cp.RestartAPIServer()
		must(t, "restart kube-apiserver", err)
		restartedAt := time.Now()
		t.Logf("kube-apiserver restarted, ready again after %.1f s", away.Seconds())
		checkIndexesKept(t, indexes, c.WaitForCDReady(ctx, t, cd, initial))

		c.createWorker(ctx, t, faultsNamespace, "w3-"+spare, spare, cd.channelTemplate)
		st := c.WaitForCDReady(ctx, t, cd, all)
		waitForPodIn(ctx, t, c.Client, faultsNamespace, "w3-"+spare, func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodRunning })
		t.Logf("after the restart a daemon joined on %s: domain Ready on 4 nodes %.1f s later", spare, time.Since(restartedAt).Seconds())
		checkIndexesKept(t, indexes, st)
		joined := st.Nodes[spare]
		if joined.Index == nil {
			t.Fatalf("%s has no index in %v", spare, st.Nodes)
		}
		daemons := c.DaemonPods(ctx, t, cd)
		for _, n := range initial {
			waitHostsMaps(ctx, t, c, n, daemons[n], joined.IPAddress, *joined.Index)
		}
		t.Logf("every daemon maps %s's index %d %.1f s after the restart", spare, *joined.Index, time.Since(restartedAt).Seconds())

		deleteAt := time.Now()
		c.DeleteComputeDomain(ctx, t, cd)
		t.Logf("domain deleted in %.1f s", time.Since(deleteAt).Seconds())
		checkNothingLeft(ctx, t, c, cd)
		workers := []string{"w3-" + spare}
		for _, n := range initial {
			workers = append(workers, "w-"+n)
		}
		deleteWorkers(ctx, t, c, workers...)
	})

	points := cdCascadeCrashPoints
	if v := os.Getenv("SIMNODE_CD_CASCADE_CRASH_POINTS"); v == "-" {
		points = nil
	} else if v != "" {
		points = strings.Split(v, ",")
	}
	for i, point := range points {
		t.Run("ControllerCrash/"+point, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(ctx, 4*time.Minute)
			defer cancel()
			ctl := setControllerCrashPoint(ctx, t, c, point)
			cd := c.CreateComputeDomain(ctx, t, cdSpec{Namespace: faultsNamespace, Name: fmt.Sprintf("crash-%d", i), NumNodes: 2})
			nodes := []string{partitioned, spare}
			var workers []string
			for _, n := range nodes {
				name := fmt.Sprintf("c%d-%s", i, n)
				c.createWorker(ctx, t, faultsNamespace, name, n, cd.channelTemplate)
				workers = append(workers, name)
			}
			c.WaitForCDReady(ctx, t, cd, nodes)
			if got := c.Cliques(ctx, t, cd); len(got) != 1 {
				t.Fatalf("cliques of %s: %v, want one", cd.name, got)
			}
			deleteAt := time.Now()
			err := c.Dyn.Resource(cdGVR).Namespace(cd.namespace).Delete(ctx, cd.name, metav1.DeleteOptions{})
			must(t, "delete "+cd.name, err)
			waitForPodIn(ctx, t, c.Client, c.Namespace, ctl.Name, func(p *corev1.Pod) bool {
				s := containerStatus(p, cdControllerContainer)
				return s != nil && s.RestartCount >= 1 && s.LastTerminationState.Terminated != nil &&
					s.LastTerminationState.Terminated.ExitCode == crashPointExitCode
			})
			crashedAt := time.Now()
			c.WaitForCD(ctx, t, cd, "gone (cascade finished by the restarted controller)", func(s cdStatus) bool { return !s.Exists })
			t.Logf("%s: controller exited at the point %.1f s after the delete; the restarted one finished the cascade %.1f s later",
				point, crashedAt.Sub(deleteAt).Seconds(), time.Since(crashedAt).Seconds())
			checkNothingLeft(ctx, t, c, cd)
			deleteWorkers(ctx, t, c, workers...)
		})
	}
	rec.CheckNoSwap(t)
}

// statusIndexes returns node -> index of a Ready domain's status.
func statusIndexes(t *testing.T, st cdStatus) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	for name, n := range st.Nodes {
		if n.Index == nil {
			t.Fatalf("node %s has no index in %v", name, st.Nodes)
		}
		out[name] = *n.Index
	}
	return out
}

// checkIndexesKept fails when a node of want has another index in st.
func checkIndexesKept(t *testing.T, want map[string]int64, st cdStatus) {
	t.Helper()
	for node, index := range want {
		got, ok := st.Nodes[node]
		if !ok || got.Index == nil || *got.Index != index {
			t.Errorf("index of %s: %v, want %d (status %v)", node, got, index, st.Nodes)
		}
	}
}

// daemonHosts returns the file in the node's folder that is the daemon
// pod's /etc/hosts (the kubelet's etc-hosts of the pod, which the daemon
// rewrites), and the line that maps the DNS name of index to ip.
func daemonHosts(t *testing.T, c *cdCluster, node string, pod *corev1.Pod, ip string, index int64) (string, string) {
	t.Helper()
	n := c.node(t, node)
	view, err := cri.ReadView(cri.ViewPath(n.Config.ViewsDir(), c.Namespace, pod.Name, cdDaemonContainer))
	must(t, "daemon view on "+node, err)
	for _, m := range view.Mounts {
		if m.Destination == "/etc/hosts" {
			return m.Source, fmt.Sprintf("%s\tcompute-domain-daemon-%04d", ip, index)
		}
	}
	t.Fatalf("daemon %s on %s has no /etc/hosts mount in its view", pod.Name, node)
	return "", ""
}

func hasLine(data []byte, want string) bool {
	for _, line := range strings.Split(string(data), "\n") {
		if strings.TrimSpace(line) == want {
			return true
		}
	}
	return false
}

// hostsMaps tells whether the daemon's /etc/hosts maps index to ip now.
func hostsMaps(t *testing.T, c *cdCluster, node string, pod *corev1.Pod, ip string, index int64) bool {
	t.Helper()
	hosts, want := daemonHosts(t, c, node, pod, ip, index)
	data, err := os.ReadFile(hosts)
	must(t, "read "+hosts, err)
	return hasLine(data, want)
}

// waitHostsMaps waits, on inotify events, until the daemon's /etc/hosts
// maps index to ip.
func waitHostsMaps(ctx context.Context, t *testing.T, c *cdCluster, node string, pod *corev1.Pod, ip string, index int64) {
	t.Helper()
	hosts, want := daemonHosts(t, c, node, pod, ip, index)
	waitCtx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	var last []byte
	if err := waitForFile(waitCtx, hosts, func(data []byte) bool {
		last = data
		return hasLine(data, want)
	}); err != nil {
		t.Fatalf("daemon on %s: %s never mapped %q: %v; last:\n%s", node, hosts, want, err, last)
	}
}

// workerContainers returns "pod uid/container id/restarts" of the workers
// w-<node> that exist, by pod name.
func workerContainers(ctx context.Context, t *testing.T, c *cdCluster, nodes []string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, n := range nodes {
		p, err := c.Client.CoreV1().Pods(faultsNamespace).Get(ctx, "w-"+n, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			continue
		}
		must(t, "worker on "+n, err)
		s := containerStatus(p, "worker")
		if s == nil {
			t.Fatalf("worker %s has no container status", p.Name)
		}
		out[p.Name] = fmt.Sprintf("%s/%s/%d", p.UID, s.ContainerID, s.RestartCount)
	}
	return out
}

func equalMaps(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// waitDaemonGone waits until the domain runs no daemon pod on node.
func waitDaemonGone(ctx context.Context, t *testing.T, c *cdCluster, cd *computeDomain, node string) {
	t.Helper()
	waitCtx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	lw := podListWatch(c.Client, c.Namespace, cdLabelKey+"="+string(cd.uid))
	if _, err := untilWithStore(waitCtx, lw, &corev1.Pod{}, func(s cache.Store) (bool, error) {
		for _, item := range s.List() {
			if p, ok := item.(*corev1.Pod); ok && p.Spec.NodeName == node {
				return false, nil
			}
		}
		return true, nil
	}); err != nil {
		t.Fatalf("daemon pod of %s on %s still there: %v", cd.name, node, err)
	}
}

// deleteWorkers deletes the pods of faultsNamespace named and waits until
// they are gone.
func deleteWorkers(ctx context.Context, t *testing.T, c *cdCluster, names ...string) {
	t.Helper()
	for _, name := range names {
		err := c.Client.CoreV1().Pods(faultsNamespace).Delete(ctx, name, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			t.Fatalf("delete %s: %v", name, err)
		}
	}
	for _, name := range names {
		waitForPodGone(ctx, t, c.Client, faultsNamespace, name)
	}
}

// checkNothingLeft checks, once the domain is gone, that nothing of it
// remains: the DaemonSet, both claim templates, cliques and node labels at
// once (the cascade removed them before the finalizer), daemon pods
// awaited (the garbage collector removes them after the DaemonSet).
func checkNothingLeft(ctx context.Context, t *testing.T, c *cdCluster, cd *computeDomain) {
	t.Helper()
	var left []string
	if _, err := c.Client.AppsV1().DaemonSets(c.Namespace).Get(ctx, cd.daemonSetName(), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		left = append(left, fmt.Sprintf("DaemonSet %s (%v)", cd.daemonSetName(), err))
	}
	for _, rct := range [][2]string{{c.Namespace, cd.daemonSetName()}, {cd.namespace, cd.channelTemplate}} {
		if _, err := c.Client.ResourceV1().ResourceClaimTemplates(rct[0]).Get(ctx, rct[1], metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			left = append(left, fmt.Sprintf("ResourceClaimTemplate %s/%s (%v)", rct[0], rct[1], err))
		}
	}
	selector := metav1.ListOptions{LabelSelector: cdLabelKey + "=" + string(cd.uid)}
	cliques, err := c.Dyn.Resource(cliqueGVR).Namespace(c.Namespace).List(ctx, selector)
	must(t, "cliques", err)
	for _, o := range cliques.Items {
		left = append(left, "ComputeDomainClique "+o.GetName())
	}
	nodes, err := c.Client.CoreV1().Nodes().List(ctx, selector)
	must(t, "nodes", err)
	for _, o := range nodes.Items {
		left = append(left, "label on node "+o.Name)
	}
	if len(left) > 0 {
		t.Errorf("left after %s was deleted: %v", cd.name, left)
	}
	waitCtx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	lw := podListWatch(c.Client, c.Namespace, selector.LabelSelector)
	if _, err := untilWithStore(waitCtx, lw, &corev1.Pod{}, func(s cache.Store) (bool, error) { return len(s.List()) == 0, nil }); err != nil {
		t.Errorf("daemon pods of %s still there: %v", cd.name, err)
	}
}

// setControllerCrashPoint gives the controller Deployment's container
// NVDRA_TEST_CRASH_AT=point with a crash-once marker in an emptyDir (so the
// restarted container gets past the point, and a new pod crashes again),
// and waits until the rollout left one running pod with it; returns it.
func setControllerCrashPoint(ctx context.Context, t *testing.T, c *cdCluster, point string) *corev1.Pod {
	t.Helper()
	deployments := c.Client.AppsV1().Deployments(c.Namespace)
	d, err := deployments.Get(ctx, cdControllerDeployment, metav1.GetOptions{})
	must(t, "controller Deployment", err)
	spec := &d.Spec.Template.Spec
	set := map[string]string{"NVDRA_TEST_CRASH_AT": point, "NVDRA_TEST_CRASH_ONCE_FILE": controllerCrashDir + "/crashed"}
	hasVolume := false
	for _, v := range spec.Volumes {
		hasVolume = hasVolume || v.Name == "crash"
	}
	if !hasVolume {
		spec.Volumes = append(spec.Volumes, corev1.Volume{Name: "crash", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}})
	}
	found := false
	for i := range spec.Containers {
		ct := &spec.Containers[i]
		if ct.Name != cdControllerContainer {
			continue
		}
		found = true
		setEnv(ct, set)
		mounted := false
		for _, m := range ct.VolumeMounts {
			mounted = mounted || m.Name == "crash"
		}
		if !mounted {
			ct.VolumeMounts = append(ct.VolumeMounts, corev1.VolumeMount{Name: "crash", MountPath: controllerCrashDir})
		}
	}
	if !found {
		t.Fatalf("controller Deployment has no container %q", cdControllerContainer)
	}
	_, err = deployments.Update(ctx, d, metav1.UpdateOptions{})
	must(t, "update the controller Deployment", err)
	return waitForControllerWith(ctx, t, c, "NVDRA_TEST_CRASH_AT", point)
}

func setEnv(ct *corev1.Container, set map[string]string) {
	for name, value := range set {
		replaced := false
		for i := range ct.Env {
			if ct.Env[i].Name == name {
				ct.Env[i] = corev1.EnvVar{Name: name, Value: value}
				replaced = true
			}
		}
		if !replaced {
			ct.Env = append(ct.Env, corev1.EnvVar{Name: name, Value: value})
		}
	}
}

// waitForControllerWith waits until the controller Deployment has exactly
// one pod, Running and Ready, whose container has env name=value; returns
// it.
func waitForControllerWith(ctx context.Context, t *testing.T, c *cdCluster, name, value string) *corev1.Pod {
	t.Helper()
	waitCtx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	var found *corev1.Pod
	var seen []string
	lw := podListWatch(c.Client, c.Namespace, chartComponentLabel+"=controller")
	_, err := untilWithStore(waitCtx, lw, &corev1.Pod{}, func(s cache.Store) (bool, error) {
		items := s.List()
		seen = seen[:0]
		found = nil
		for _, item := range items {
			p := item.(*corev1.Pod)
			seen = append(seen, fmt.Sprintf("%s %s", p.Name, p.Status.Phase))
			for _, ct := range p.Spec.Containers {
				for _, e := range ct.Env {
					if ct.Name == cdControllerContainer && e.Name == name && e.Value == value &&
						p.Status.Phase == corev1.PodRunning && podReady(p) && p.DeletionTimestamp == nil {
						found = p
					}
				}
			}
		}
		return len(items) == 1 && found != nil, nil
	})
	if err != nil {
		t.Fatalf("controller pod with %s=%s (pods: %v): %v", name, value, seen, err)
	}
	return found
}

// indexRecorder follows the driver namespace's cliques with an informer and
// records, per clique entry, every index it had since it last joined. An
// entry that leaves (its node gone from the clique, or the clique deleted)
// starts afresh. Safe for concurrent use.
type indexRecorder struct {
	mu sync.Mutex
	// history: "<clique>/<node>" -> distinct indexes in order, while the
	// entry stays.
	history map[string][]int64
	swaps   []string
}

func startIndexRecorder(t *testing.T, dyn dynamic.Interface, namespace string) *indexRecorder {
	t.Helper()
	r := &indexRecorder{history: map[string][]int64{}}
	factory := dynamicinformer.NewFilteredDynamicSharedInformerFactory(dyn, 0, namespace, nil)
	informer := factory.ForResource(cliqueGVR).Informer()
	_, err := informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { r.observe(obj, false) },
		UpdateFunc: func(_, obj any) { r.observe(obj, false) },
		DeleteFunc: func(obj any) { r.observe(obj, true) },
	})
	must(t, "clique informer", err)
	stop := make(chan struct{})
	t.Cleanup(func() { close(stop) })
	factory.Start(stop)
	if !cache.WaitForCacheSync(stop, informer.HasSynced) {
		t.Fatal("clique informer did not sync")
	}
	return r
}

func (r *indexRecorder) observe(obj any, deleted bool) {
	if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj, deleted = tomb.Obj, true
	}
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return
	}
	entries := cliqueEntries(u)
	r.mu.Lock()
	defer r.mu.Unlock()
	prefix := u.GetName() + "/"
	for key := range r.history {
		if !strings.HasPrefix(key, prefix) {
			continue
		}
		if _, present := entries[strings.TrimPrefix(key, prefix)]; deleted || !present {
			delete(r.history, key)
		}
	}
	if deleted {
		return
	}
	for node, e := range entries {
		if e.Index == nil {
			continue
		}
		key := prefix + node
		h := r.history[key]
		if len(h) > 0 && h[len(h)-1] == *e.Index {
			continue
		}
		if len(h) > 0 {
			r.swaps = append(r.swaps, fmt.Sprintf("%s: %d -> %d (resourceVersion %s)", key, h[len(h)-1], *e.Index, u.GetResourceVersion()))
		}
		r.history[key] = append(h, *e.Index)
	}
}

// CheckNoSwap fails the test for every index change of an entry that stayed.
func (r *indexRecorder) CheckNoSwap(t *testing.T) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	sort.Strings(r.swaps)
	for _, s := range r.swaps {
		t.Errorf("index changed while the entry stayed: %s", s)
	}
}
