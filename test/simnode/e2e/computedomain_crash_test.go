package e2e

// Crash safety of the compute-domain kubelet plugin on a simulated GB200
// node, as the GPU plugin's at the cluster tier (test/cluster): the plugin
// killed at each Prepare step, a node reboot, and a prepare that outlives its
// unprepare (upstream #1162). Environment: computedomain_env_test.go. No
// daemons run here: the test writes the domain's clique entry for the node
// (Ready or NotReady) as the node's daemon would, so that each step depends
// only on the plugin.

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"

	"nvdra.local/test/simnode/harness"
)

const crashNamespace = "cd-e2e-crash"

// The plugin's Prepare steps with a crash point, in order (device_state.cc
// and claim_preparer.cc).
var cdPrepareCrashPoints = []string{
	"prepare-before-started-checkpoint", "prepare-after-started-checkpoint", "prepare-after-node-label",
	"prepare-before-cdi-write", "prepare-after-cdi-write", "prepare-after-devices",
	"prepare-after-completed-checkpoint",
}

// TestComputeDomainPluginCrashSafety, on one gb200-tray node:
//  1. for each Prepare crash point: the plugin DaemonSet gets
//     NVDRA_TEST_CRASH_AT=<point> (once: NVDRA_TEST_CRASH_ONCE_FILE), a
//     worker's channel claim makes the plugin exit there, the kubelet
//     restarts the container and retries, and the worker runs with exactly
//     channel0; deleting it leaves no claim spec, no checkpoint entry and no
//     domain label on the node;
//  2. reboot: a running worker's claim is prepared again after the node's
//     reboot (new boot id, CDI specs gone with the volatile folders);
//  3. #1162: a worker whose domain is not Ready is deleted while its claim
//     waits; when the entry turns Ready the waiting prepare is refused as
//     stale, the claim stays PrepareAborted, and nothing is injected or
//     labelled.
func TestComputeDomainPluginCrashSafety(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	env := startCDEnvironment(ctx, t, 1, false)
	node := env.fabric[0]
	n := env.node(t, node)
	must(t, "namespace", create(ctx, env.client.CoreV1().Namespaces(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: crashNamespace}}))
	cd := env.createBareComputeDomain(ctx, t, crashNamespace, "crash-cd", -1)
	env.writeCliqueEntry(ctx, t, cd, node, "Ready")

	// 1. A crash at each step (SIMNODE_CD_CRASH_POINTS: a comma-separated
	// subset, "-" for none, to iterate on the later steps).
	points := cdPrepareCrashPoints
	if v := os.Getenv("SIMNODE_CD_CRASH_POINTS"); v == "-" {
		points = nil
	} else if v != "" {
		points = strings.Split(v, ",")
	}
	for i, point := range points {
		marker := fmt.Sprintf("%s/%s/crashed-%s", pluginsDir, cdDriverName, point)
		env.reconfigureCDPlugin(ctx, t, map[string]string{"NVDRA_TEST_CRASH_AT": point, "NVDRA_TEST_CRASH_ONCE_FILE": marker})
		pod := env.waitForPluginWithEnv(ctx, t, node, "NVDRA_TEST_CRASH_AT", point)
		worker := fmt.Sprintf("crash-%d", i)
		env.createWorker(ctx, t, crashNamespace, worker, node, cd.channelTemplate)
		stepCtx, stepCancel := context.WithTimeout(ctx, 3*time.Minute)
		if err := waitForFile(stepCtx, filepath.Join(n.Config.Dir, marker), func([]byte) bool { return true }); err != nil {
			stepCancel()
			t.Fatalf("%s: the plugin never reached the crash point: %v", point, err)
		}
		running := waitForPodIn(stepCtx, t, env.client, crashNamespace, worker, func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodRunning })
		env.checkWorkerView(ctx, t, running, true)
		p, err := env.client.CoreV1().Pods(cdDriverNamespace).Get(ctx, pod, metav1.GetOptions{})
		must(t, "plugin pod", err)
		if restarts(p) < 1 {
			t.Errorf("%s: plugin pod %s has no container restart: it did not crash", point, pod)
		}
		claimUID := env.claimUID(ctx, t, crashNamespace, *running.Status.ResourceClaimStatuses[0].ResourceClaimName)
		if got := cdCheckpointState(t, n, claimUID); got != "PrepareCompleted" {
			t.Errorf("%s: checkpoint state %q, want PrepareCompleted", point, got)
		}
		must(t, "delete "+worker, env.client.CoreV1().Pods(crashNamespace).Delete(ctx, worker, metav1.DeleteOptions{}))
		waitForPodGone(stepCtx, t, env.client, crashNamespace, worker)
		waitForCheckpointState(stepCtx, t, n, claimUID, "")
		if fileExists(cdClaimSpecPath(n, claimUID)) {
			t.Errorf("%s: claim spec still there after the claim's unprepare", point)
		}
		env.checkNoDomainLabel(ctx, t, node)
		stepCancel()
		t.Logf("%s: crashed, restarted, prepared and unprepared", point)
	}
	// Without crash points from here; a waiting prepare gives up after 5 s
	// (step 3: the kubelet's pod worker is busy with it until then).
	env.reconfigureCDPlugin(ctx, t, map[string]string{"NVDRA_TEST_CRASH_AT": "", "NVDRA_TEST_CRASH_ONCE_FILE": "",
		"NVDRA_PREPARE_READY_WAIT_MS": "5000"})
	env.pluginPods[node] = env.waitForPluginWithEnv(ctx, t, node, "NVDRA_PREPARE_READY_WAIT_MS", "5000")

	// 2. Reboot with a prepared claim.
	rebootCtx, rebootCancel := context.WithTimeout(ctx, 4*time.Minute)
	defer rebootCancel()
	env.createWorker(ctx, t, crashNamespace, "before-reboot", node, cd.channelTemplate)
	before := waitForPodIn(rebootCtx, t, env.client, crashNamespace, "before-reboot", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodRunning })
	claimUID := env.claimUID(ctx, t, crashNamespace, *before.Status.ResourceClaimStatuses[0].ResourceClaimName)
	oldBoot, err := n.Config.BootID()
	must(t, "boot id", err)
	rebootAt := time.Now().Truncate(time.Second)
	must(t, "reboot", env.nodes.Reboot(node))
	if newBoot, err := n.Config.BootID(); err != nil || newBoot == oldBoot {
		t.Errorf("boot id after the reboot %q (%v), before %q", newBoot, err, oldBoot)
	}
	// The kubelet either starts the pod again, asking the plugin to prepare
	// its claim again, or gives the pod up and unprepares its claim (this
	// kubelet does the latter); either way nothing may be left behind.
	after := waitForPodIn(rebootCtx, t, env.client, crashNamespace, "before-reboot", func(p *corev1.Pod) bool {
		s := containerStatus(p, "worker")
		restarted := p.Status.Phase == corev1.PodRunning && s != nil && s.Ready && s.State.Running != nil &&
			!s.State.Running.StartedAt.Time.Before(rebootAt) && s.ContainerID != containerStatus(before, "worker").ContainerID
		return restarted || p.Status.Phase == corev1.PodFailed || p.Status.Phase == corev1.PodSucceeded
	})
	if after.Status.Phase == corev1.PodRunning {
		t.Logf("after the reboot the kubelet started %s again", after.Name)
		env.checkWorkerView(ctx, t, after, true)
		if got := cdCheckpointState(t, n, claimUID); got != "PrepareCompleted" {
			t.Errorf("after the reboot: checkpoint state %q, want PrepareCompleted (prepared again)", got)
		}
	} else {
		t.Logf("after the reboot the kubelet gave %s up: phase %s, reason %q, message %q", after.Name,
			after.Status.Phase, after.Status.Reason, after.Status.Message)
	}
	must(t, "delete before-reboot", env.client.CoreV1().Pods(crashNamespace).Delete(ctx, "before-reboot", metav1.DeleteOptions{}))
	waitForPodGone(rebootCtx, t, env.client, crashNamespace, "before-reboot")
	waitForCheckpointState(rebootCtx, t, n, claimUID, "")
	if fileExists(cdClaimSpecPath(n, claimUID)) {
		t.Errorf("after the reboot: the claim's CDI spec is still there")
	}
	// The domain label must not outlive the claim (the plugin's checkpoint
	// of the old boot was discarded, so its Unprepare had nothing to undo:
	// the plugin drops the unused label at start-up).
	waitForNode(rebootCtx, t, env.client, node, func(nd *corev1.Node) bool { _, ok := nd.Labels[cdLabelKey]; return !ok })

	// 3. #1162: the kubelet gives up on a waiting claim.
	staleCtx, staleCancel := context.WithTimeout(ctx, 3*time.Minute)
	defer staleCancel()
	env.writeCliqueEntry(ctx, t, cd, node, "NotReady")
	env.createWorker(ctx, t, crashNamespace, "stale", node, cd.channelTemplate)
	claim := env.workerClaim(staleCtx, t, crashNamespace, "stale")
	staleUID := env.claimUID(ctx, t, crashNamespace, claim)
	// After the reboot the plugin pod is the same, its container new.
	env.waitForPluginLog(staleCtx, t, node, "claim waits outside the node lock", claim)
	must(t, "delete stale", env.client.CoreV1().Pods(crashNamespace).Delete(ctx, "stale", metav1.DeleteOptions{}))
	waitForPodGone(staleCtx, t, env.client, crashNamespace, "stale")
	waitForCheckpointState(staleCtx, t, n, staleUID, "PrepareAborted")
	if fileExists(cdClaimSpecPath(n, staleUID)) {
		t.Errorf("the abandoned claim has a CDI spec")
	}
	env.checkNoDomainLabel(ctx, t, node)
	// Ready now: nothing is prepared for the abandoned claim, and the node's
	// channel 0 is free for the next workload (not leaked).
	env.writeCliqueEntry(ctx, t, cd, node, "Ready")
	env.createWorker(ctx, t, crashNamespace, "after-stale", node, cd.channelTemplate)
	next := waitForPodIn(staleCtx, t, env.client, crashNamespace, "after-stale", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodRunning })
	env.checkWorkerView(ctx, t, next, true)
	if got := cdCheckpointState(t, n, staleUID); got != "PrepareAborted" && got != "" {
		t.Errorf("abandoned claim: checkpoint state %q, want PrepareAborted (or dropped)", got)
	}
	if fileExists(cdClaimSpecPath(n, staleUID)) {
		t.Errorf("the abandoned claim got a CDI spec after its domain became Ready")
	}
	must(t, "delete after-stale", env.client.CoreV1().Pods(crashNamespace).Delete(ctx, "after-stale", metav1.DeleteOptions{}))
	waitForPodGone(staleCtx, t, env.client, crashNamespace, "after-stale")
}

// waitForCheckpointState waits (on the checkpoint file's changes) until the
// plugin's checkpoint on n holds claim uid in `state` ("": absent).
func waitForCheckpointState(ctx context.Context, t *testing.T, n *harness.Node, uid, state string) {
	t.Helper()
	path := filepath.Join(n.Config.Dir, pluginsDir, cdDriverName, "checkpoint.json")
	var last string
	err := waitForFile(ctx, path, func([]byte) bool {
		last = cdCheckpointState(t, n, uid)
		return last == state
	})
	if err != nil {
		t.Fatalf("%s: checkpoint state of claim %s is %q, want %q: %v", n.Config.Name, uid, last, state, err)
	}
}

// createBareComputeDomain creates a ComputeDomain and its workload claim
// template only (no daemon DaemonSet: the test writes the clique itself).
// With channel >= 0 it plays the controller in channel isolation: the
// domain's status.imexChannelID, and the template's request selects that
// channel (templates are immutable: the selector is there from the start).
func (e *cdEnvironment) createBareComputeDomain(ctx context.Context, t *testing.T, namespace, name string, channel int64) *computeDomain {
	t.Helper()
	cd := &computeDomain{namespace: namespace, name: name, channelTemplate: name + "-channel"}
	obj := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "resource.nvidia.com/v1beta1",
		"kind":       "ComputeDomain",
		"metadata":   map[string]any{"name": name, "namespace": namespace},
		"spec": map[string]any{
			"numNodes": int64(1),
			"channel":  map[string]any{"resourceClaimTemplate": map[string]any{"name": cd.channelTemplate}, "allocationMode": "Single"},
		},
	}}
	created, err := e.dyn.Resource(cdGVR).Namespace(namespace).Create(ctx, obj, metav1.CreateOptions{})
	must(t, "ComputeDomain "+name, err)
	cd.uid = created.GetUID()
	tmpl := cdClaimTemplate(namespace, cd.channelTemplate, cd.uid, "Workload", "channel", cdChannelClass,
		map[string]any{"kind": "ComputeDomainChannelConfig", "domainID": string(cd.uid), "allocationMode": "Single"})
	tmpl.Finalizers = nil
	if channel >= 0 {
		must(t, "imexChannelID", unstructured.SetNestedField(created.Object, channel, "status", "imexChannelID"))
		_, err = e.dyn.Resource(cdGVR).Namespace(namespace).UpdateStatus(ctx, created, metav1.UpdateOptions{})
		must(t, "ComputeDomain status", err)
		tmpl.Spec.Spec.Devices.Requests[0].Exactly.Selectors = channelSelector(channel)
	}
	must(t, "workload claim template", create(ctx, e.client.ResourceV1().ResourceClaimTemplates(namespace), tmpl))
	return cd
}

// writeCliqueEntry writes node's entry (index 0) in the domain's clique as
// its daemon and the controller would, creating the clique when missing.
func (e *cdEnvironment) writeCliqueEntry(ctx context.Context, t *testing.T, cd *computeDomain, node, status string) {
	t.Helper()
	name := cd.cliqueName(gb200Clique)
	entry := map[string]any{"nodeName": node, "ipAddress": e.node(t, node).Config.IP, "cliqueID": gb200Clique,
		"index": int64(0), "status": status}
	res := e.dyn.Resource(cliqueGVR).Namespace(cdDriverNamespace)
	obj, err := res.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		obj = &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "resource.nvidia.com/v1beta1",
			"kind":       "ComputeDomainClique",
			"metadata":   map[string]any{"name": name, "namespace": cdDriverNamespace, "labels": cliqueLabels(name)},
			"daemons":    []any{entry},
		}}
		_, err = res.Create(ctx, obj, metav1.CreateOptions{})
		must(t, "create clique "+name, err)
		return
	}
	must(t, "daemons", unstructured.SetNestedSlice(obj.Object, []any{entry}, "daemons"))
	_, err = res.Update(ctx, obj, metav1.UpdateOptions{})
	must(t, "update clique "+name, err)
}

// waitForPluginWithEnv waits for the plugin pod on node whose container has
// env key=value ("" also matches an absent key) running; returns its name.
func (e *cdEnvironment) waitForPluginWithEnv(ctx context.Context, t *testing.T, node, key, value string) string {
	t.Helper()
	waitCtx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	filter := func(o *metav1.ListOptions) {
		o.LabelSelector = "app.kubernetes.io/component=kubelet-plugin"
		o.FieldSelector = "spec.nodeName=" + node
	}
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			filter(&o)
			return e.client.CoreV1().Pods(cdDriverNamespace).List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			filter(&o)
			return e.client.CoreV1().Pods(cdDriverNamespace).Watch(ctx, o)
		},
	}
	var name string
	_, err := until(waitCtx, lw, &corev1.Pod{}, func(ev watch.Event) (bool, error) {
		p, ok := ev.Object.(*corev1.Pod)
		if !ok || ev.Type == watch.Deleted || p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning {
			return false, nil
		}
		got := ""
		for _, v := range p.Spec.Containers[0].Env {
			if v.Name == key {
				got = v.Value
			}
		}
		name = p.Name
		return got == value, nil
	})
	if err != nil {
		t.Fatalf("no running plugin pod on %s with %s=%q: %v", node, key, value, err)
	}
	return name
}

// cdCheckpointState is the plugin's checkpoint state of a claim on node n
// ("" when absent).
func cdCheckpointState(t *testing.T, n *harness.Node, uid string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(n.Config.Dir, pluginsDir, cdDriverName, "checkpoint.json"))
	if os.IsNotExist(err) {
		return ""
	}
	must(t, "read checkpoint", err)
	var checkpoint struct {
		V2 struct {
			PreparedClaims map[string]struct {
				CheckpointState string `json:"checkpointState"`
			} `json:"preparedClaims"`
		} `json:"v2"`
	}
	must(t, "parse checkpoint", json.Unmarshal(data, &checkpoint))
	return checkpoint.V2.PreparedClaims[uid].CheckpointState
}

func (e *cdEnvironment) checkNoDomainLabel(ctx context.Context, t *testing.T, node string) {
	t.Helper()
	got, err := e.client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	must(t, "node", err)
	if v, ok := got.Labels[cdLabelKey]; ok {
		t.Errorf("node %s still labelled %s=%s", node, cdLabelKey, v)
	}
}
