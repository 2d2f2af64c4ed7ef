package e2e

// The seed workflows of ComputeDomains (issue 9) on simulated GB200 nodes
// with the REAL compute-domain-controller, kubelet plugin and IMEX daemons,
// all installed by our Helm chart (cd_cluster_env_test.go). One cluster of
// five nodes in two cliques (sim-node-0..2 in clique 0, sim-node-3..4 in
// clique 1) serves the scenarios one after another; each ends by deleting
// its domain and checking that nothing of it is left.

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"

	"nvdra.local/test/simnode/harness"
	"nvdra.local/test/simnode/internal/cri"
)

// TestComputeDomainSeeds runs, on one cluster:
//  1. seed 000's nvbandwidth example (testdata/nvbandwidth-test-*.yaml, the
//     MPIJob translated as said there): Ready on the workers' two nodes, one
//     daemon per worker node, channel0 in each worker, the launcher reaches
//     both workers, `kubectl get computedomains` shows it Ready; `kubectl
//     delete -f` leaves nothing;
//  2. numNodes set (Ready only once that many daemons are) and unset (Ready
//     with the daemons there are);
//  3. a workload rescheduled to another node: the daemon leaves the old node
//     (entry, label, pod), one joins the new node, Ready again, and the
//     surviving daemon keeps its pod and index;
//  4. a domain over two cliques: two clique objects, each daemon's IMEX
//     peers only its clique's; and a second namespace cannot join it;
//  5. docs/computedomains.md's worked example, from the Markdown
//     (computedomain_docs_test.go): its workers also claim GPUs, so the
//     chart runs the GPU plugin here too.
func TestComputeDomainSeeds(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
	defer cancel()
	c := startCDCluster(ctx, t, cdClusterOptions{Cliques: []int{3, 2}, GPUPlugin: true})
	for _, step := range []struct {
		name string
		run  func(context.Context, *testing.T, *cdCluster)
	}{
		{"Seed000NvbandwidthJob", seedNvbandwidth},
		{"NumNodesSetAndUnset", seedNumNodes},
		{"WorkloadRescheduled", seedReschedule},
		{"TwoCliquesAndSecondNamespace", seedTwoCliques},
		{"DocsWorkedExample", seedDocsWorkedExample},
	} {
		start := time.Now()
		ok := t.Run(step.name, func(t *testing.T) {
			stepCtx, stepCancel := context.WithTimeout(ctx, 3*time.Minute)
			defer stepCancel()
			step.run(stepCtx, t, c)
		})
		t.Logf("%s: %.1f s", step.name, time.Since(start).Seconds())
		if !ok {
			return // the cluster may hold what the failed step left
		}
	}
}

// seedNvbandwidth applies seed 000's example with kubectl, as the seed's
// steps do, and deletes it with kubectl.
func seedNvbandwidth(ctx context.Context, t *testing.T, c *cdCluster) {
	const ns = "default"
	job, err := filepath.Abs(filepath.Join("testdata", "nvbandwidth-test-job.yaml"))
	must(t, "testdata", err)
	launcher, err := filepath.Abs(filepath.Join("testdata", "nvbandwidth-test-launcher-job.yaml"))
	must(t, "testdata", err)
	start := time.Now()
	out := c.Kubectl(ctx, t, "apply", "-n", ns, "-f", job)
	t.Logf("kubectl apply:\n%s", out)
	for _, want := range []string{"computedomain.resource.nvidia.com/nvbandwidth-test-compute-domain created",
		"pod/nvbandwidth-test-worker-0 created", "pod/nvbandwidth-test-worker-1 created"} {
		if !strings.Contains(out, want) {
			t.Errorf("kubectl apply output lacks %q", want)
		}
	}
	cd := c.ComputeDomainOf(ctx, t, ns, "nvbandwidth-test-compute-domain")
	workers := map[string]*corev1.Pod{}
	for i := 0; i < 2; i++ {
		name := fmt.Sprintf("nvbandwidth-test-worker-%d", i)
		workers[name] = waitForPodIn(ctx, t, c.Client, ns, name, func(p *corev1.Pod) bool { return podReady(p) })
	}
	var nodes []string
	for _, p := range workers {
		nodes = append(nodes, p.Spec.NodeName)
	}
	sort.Strings(nodes)
	if nodes[0] == nodes[1] {
		t.Fatalf("both workers on %s: each needs its node's channel-0", nodes[0])
	}
	status := c.WaitForCDReady(ctx, t, cd, nodes)
	t.Logf("apply to workers Ready and the domain Ready on %v: %.1f s", nodes, time.Since(start).Seconds())
	c.checkStatusMatchesCliques(ctx, t, cd, status)

	// One daemon per worker node, and only there. The kubelet reports a
	// daemon pod Running, with its IP, in a status update that can come after
	// the domain is Ready (the daemon publishes its own IP): wait for it.
	c.waitForDaemonPods(ctx, t, cd, nodes)
	daemons := c.DaemonPods(ctx, t, cd)
	if len(daemons) != len(nodes) {
		t.Errorf("daemon pods on %v, want one on each of %v", sortedKeys(daemons), nodes)
	}
	for _, node := range nodes {
		if daemons[node] == nil {
			t.Errorf("no daemon pod on worker node %s", node)
			continue
		}
		c.checkDaemonView(t, cd, node, daemons[node], c.CliqueOfNode(node))
	}
	for _, p := range workers {
		c.checkChannelView(t, p, "mpi-worker")
	}
	out = c.Kubectl(ctx, t, "get", "pods", "-n", c.Namespace, "-l", cdLabelKey)
	t.Logf("kubectl get pods -n %s -l %s:\n%s", c.Namespace, cdLabelKey, out)
	if got := strings.Count(out, " Running "); got != len(nodes) {
		t.Errorf("kubectl lists %d Running daemon pods, want %d", got, len(nodes))
	}

	// The launcher, once the workers are Ready (WaitForWorkersReady), with
	// the operator's hostfile.
	var hostfile strings.Builder
	for i := 0; i < 2; i++ {
		fmt.Fprintf(&hostfile, "%s slots=4\n", workers[fmt.Sprintf("nvbandwidth-test-worker-%d", i)].Status.PodIP)
	}
	_, err = c.Client.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "nvbandwidth-test-config"},
		Data:       map[string]string{"hostfile": hostfile.String()},
	}, metav1.CreateOptions{})
	must(t, "hostfile ConfigMap", err)
	c.Kubectl(ctx, t, "apply", "-n", ns, "-f", launcher)
	c.waitForJobDone(ctx, t, ns, "nvbandwidth-test-launcher")
	logs := c.Kubectl(ctx, t, "logs", "-n", ns, "--tail=-1", "-l", "job-name=nvbandwidth-test-launcher")
	t.Logf("kubectl logs -l job-name=nvbandwidth-test-launcher:\n%s", logs)
	for _, node := range nodes {
		if !strings.Contains(logs, "on "+node+": IMEX channels channel0") {
			t.Errorf("launcher log does not show the worker on %s with channel0", node)
		}
	}
	if !strings.Contains(logs, "RESULT: PASS") {
		t.Errorf("launcher did not pass")
	}

	out = c.Kubectl(ctx, t, "get", "computedomains", "-n", ns)
	t.Logf("kubectl get computedomains:\n%s", out)
	if !hasRow(out, "nvbandwidth-test-compute-domain", "2", "Ready") {
		t.Errorf("kubectl get computedomains: no row with the domain, 2 nodes and Ready")
	}

	// kubectl delete -f: the domain and the workers; then the launcher.
	claims := c.ClaimsOfPods(ctx, t, append(podList(workers), podList(daemons)...)...)
	start = time.Now()
	out = c.Kubectl(ctx, t, "delete", "-n", ns, "-f", job, "--wait=false")
	t.Logf("kubectl delete:\n%s", out)
	c.Kubectl(ctx, t, "delete", "-n", ns, "-f", launcher, "--wait=false")
	must(t, "delete hostfile", c.Client.CoreV1().ConfigMaps(ns).Delete(ctx, "nvbandwidth-test-config", metav1.DeleteOptions{}))
	c.WaitForCD(ctx, t, cd, "gone after kubectl delete", func(s cdStatus) bool { return !s.Exists })
	for name := range workers {
		waitForPodGone(ctx, t, c.Client, ns, name)
	}
	c.CheckCDCleanedUp(ctx, t, cd, claims)
	t.Logf("kubectl delete to everything cleaned up: %.1f s", time.Since(start).Seconds())
}

// seedNumNodes: numNodes 2 is NotReady with one Ready daemon (its worker
// runs regardless: the channel waits for its own node's daemon only) and
// Ready with two; without numNodes a domain is Ready with its one daemon,
// and again with two.
func seedNumNodes(ctx context.Context, t *testing.T, c *cdCluster) {
	counted := c.CreateComputeDomain(ctx, t, cdSpec{Namespace: "seed-numnodes", Name: "counted", NumNodes: 2})
	uncounted := c.CreateComputeDomain(ctx, t, cdSpec{Namespace: "seed-numnodes", Name: "uncounted", NumNodes: -1})
	a, b := c.NodesOfClique(0)[0], c.NodesOfClique(0)[1]
	x, y := c.NodesOfClique(1)[0], c.NodesOfClique(1)[1]
	c.createWorker(ctx, t, counted.namespace, "counted-0", a, counted.channelTemplate)
	c.createWorker(ctx, t, uncounted.namespace, "uncounted-0", x, uncounted.channelTemplate)

	waitForPodIn(ctx, t, c.Client, counted.namespace, "counted-0", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodRunning })
	s := c.WaitForCD(ctx, t, counted, "one node Ready, domain NotReady (numNodes 2)", func(s cdStatus) bool {
		return len(s.Nodes) == 1 && s.Nodes[a].Status == "Ready"
	})
	if s.Status != "NotReady" {
		t.Errorf("numNodes 2 with one daemon: status %q, want NotReady", s.Status)
	}
	c.WaitForCDReady(ctx, t, uncounted, []string{x})
	t.Logf("numNodes 2 with one daemon Ready: %s; numNodes unset with one: Ready", s.Status)

	c.createWorker(ctx, t, counted.namespace, "counted-1", b, counted.channelTemplate)
	c.createWorker(ctx, t, uncounted.namespace, "uncounted-1", y, uncounted.channelTemplate)
	c.WaitForCDReady(ctx, t, counted, []string{a, b})
	c.WaitForCDReady(ctx, t, uncounted, []string{x, y})

	var pods []*corev1.Pod
	for _, name := range []string{"counted-0", "counted-1", "uncounted-0", "uncounted-1"} {
		pods = append(pods, waitForPodIn(ctx, t, c.Client, "seed-numnodes", name, func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodRunning }))
	}
	c.deleteAndCheck(ctx, t, []*computeDomain{counted, uncounted}, pods)
}

// seedReschedule moves one of two workers to another node of the clique.
func seedReschedule(ctx context.Context, t *testing.T, c *cdCluster) {
	cd := c.CreateComputeDomain(ctx, t, cdSpec{Namespace: "seed-reschedule", Name: "follow", NumNodes: 2})
	nodes := c.NodesOfClique(0)
	stay, leave, join := nodes[0], nodes[1], nodes[2]
	c.createWorker(ctx, t, cd.namespace, "worker-stay", stay, cd.channelTemplate)
	c.createWorker(ctx, t, cd.namespace, "worker-move", leave, cd.channelTemplate)
	c.WaitForCDReady(ctx, t, cd, []string{stay, leave})
	before := c.Cliques(ctx, t, cd)[c.CliqueID(0)]
	daemonsBefore := c.DaemonPods(ctx, t, cd)
	t.Logf("before: entries %v", before)

	// The workload moves: its pod on `leave` is deleted and comes back on
	// `join` (as a controller's replacement pod would, pinned elsewhere).
	start := time.Now()
	moved := waitForPodIn(ctx, t, c.Client, cd.namespace, "worker-move", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodRunning })
	movedClaims := c.ClaimsOfPods(ctx, t, moved, daemonsBefore[leave])
	must(t, "delete worker-move", c.Client.CoreV1().Pods(cd.namespace).Delete(ctx, "worker-move", metav1.DeleteOptions{}))
	c.createWorker(ctx, t, cd.namespace, "worker-moved", join, cd.channelTemplate)
	status := c.WaitForCDReady(ctx, t, cd, []string{stay, join})
	t.Logf("worker moved %s -> %s: Ready again after %.1f s", leave, join, time.Since(start).Seconds())

	after := c.WaitForCliques(ctx, t, cd, "entry of "+leave+" removed", func(m map[string]map[string]cliqueEntry) bool {
		_, still := m[c.CliqueID(0)][leave]
		return !still
	})[c.CliqueID(0)]
	t.Logf("after: entries %v", after)
	if before[stay].Index == nil || after[stay].Index == nil || *before[stay].Index != *after[stay].Index {
		t.Errorf("the surviving daemon on %s changed index: %v -> %v", stay, before[stay], after[stay])
	}
	if after[join].Index == nil || *after[join].Index == *after[stay].Index {
		t.Errorf("the joining daemon on %s: entry %v, want an index other than %v", join, after[join], after[stay])
	}
	c.checkStatusMatchesCliques(ctx, t, cd, status)
	waitForPodGone(ctx, t, c.Client, c.Namespace, daemonsBefore[leave].Name)
	n, err := c.Client.CoreV1().Nodes().Get(ctx, leave, metav1.GetOptions{})
	must(t, "node", err)
	if v, ok := n.Labels[cdLabelKey]; ok {
		t.Errorf("node %s keeps %s=%s after the workload left it", leave, cdLabelKey, v)
	}
	daemonsAfter := c.DaemonPods(ctx, t, cd)
	if daemonsAfter[stay] == nil || daemonsAfter[stay].UID != daemonsBefore[stay].UID || restarts(daemonsAfter[stay]) != restarts(daemonsBefore[stay]) {
		t.Errorf("the daemon on %s was replaced or restarted", stay)
	}
	if daemonsAfter[join] == nil {
		t.Errorf("no daemon on %s, where the workload moved", join)
	}
	// The old node's claims are unprepared there.
	waitCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for _, claim := range movedClaims {
		if err := waitForFileGone(waitCtx, cdClaimSpecPath(c.node(t, leave), claim.UID)); err != nil {
			t.Errorf("claim %s: CDI spec left on %s: %v", claim.Name, leave, err)
		}
	}
	var pods []*corev1.Pod
	for _, name := range []string{"worker-stay", "worker-moved"} {
		pods = append(pods, waitForPodIn(ctx, t, c.Client, cd.namespace, name, func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodRunning }))
	}
	c.deleteAndCheck(ctx, t, []*computeDomain{cd}, pods)
}

// seedTwoCliques: workers on two nodes of clique 0 and one of clique 1 form
// two IMEX domains of one ComputeDomain; a pod of another namespace with a
// claim naming the domain is refused.
func seedTwoCliques(ctx context.Context, t *testing.T, c *cdCluster) {
	cd := c.CreateComputeDomain(ctx, t, cdSpec{Namespace: "seed-cliques", Name: "spread", NumNodes: 3})
	nodes := []string{c.NodesOfClique(0)[0], c.NodesOfClique(0)[1], c.NodesOfClique(1)[0]}
	for i, node := range nodes {
		c.createWorker(ctx, t, cd.namespace, fmt.Sprintf("worker-%d", i), node, cd.channelTemplate)
	}
	status := c.WaitForCDReady(ctx, t, cd, nodes)
	c.checkStatusMatchesCliques(ctx, t, cd, status)
	cliques := c.Cliques(ctx, t, cd)
	if len(cliques) != 2 || len(cliques[c.CliqueID(0)]) != 2 || len(cliques[c.CliqueID(1)]) != 1 {
		t.Errorf("cliques %v: want %s with 2 entries and %s with 1", cliques, c.CliqueID(0), c.CliqueID(1))
	}
	for id, entries := range cliques {
		seen := map[int64]bool{}
		for node, e := range entries {
			if e.Index == nil || *e.Index < 0 || *e.Index >= int64(len(entries)) || seen[*e.Index] {
				t.Errorf("clique %s: entry of %s has index %v, want distinct 0..%d", id, node, e, len(entries)-1)
				continue
			}
			seen[*e.Index] = true
		}
	}
	// Running with the IP the kubelet reports (see above).
	daemons := c.waitForDaemonPods(ctx, t, cd, nodes)
	for _, node := range nodes {
		c.checkIMEXPeers(ctx, t, daemons, node)
	}

	// Another namespace: its claim template names the domain (a copy of the
	// workload template's config), its pod lands on a free node.
	c.checkSecondNamespaceRefused(ctx, t, cd, c.NodesOfClique(1)[1])

	var pods []*corev1.Pod
	for i := range nodes {
		pods = append(pods, waitForPodIn(ctx, t, c.Client, cd.namespace, fmt.Sprintf("worker-%d", i), func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodRunning }))
	}
	for _, p := range pods {
		c.checkChannelView(t, p, "worker")
	}
	c.deleteAndCheck(ctx, t, []*computeDomain{cd}, pods)
}

// checkIMEXPeers checks what the daemon on node gave nvidia-imex: the DNS
// names of its /etc/hosts map to exactly the daemon pods of its own clique
// (by their indexes in the clique object), and nvidia-imex-ctl -N shows
// that many nodes READY.
func (c *cdCluster) checkIMEXPeers(ctx context.Context, t *testing.T, daemons map[string]*corev1.Pod, node string) {
	t.Helper()
	n := c.node(t, node)
	pod := daemons[node]
	hosts, err := harness.ExecSync(ctx, n, c.Namespace, pod.Name, cdDaemonContainer, "cat", "/etc/hosts")
	must(t, "/etc/hosts of the daemon on "+node, err)
	got := map[string]bool{}
	for _, line := range strings.Split(hosts, "\n") {
		if f := strings.Fields(line); len(f) == 2 && strings.HasPrefix(f[1], "compute-domain-daemon-") {
			got[f[0]] = true
		}
	}
	want := map[string]bool{}
	clique := c.CliqueOfNode(node)
	for other, p := range daemons {
		if c.CliqueOfNode(other) == clique {
			want[p.Status.PodIP] = true
		}
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("daemon on %s (clique %s): /etc/hosts maps IMEX names to %v, want its clique's daemons %v\n%s", node, clique, got, want, hosts)
	}
	out, err := harness.ExecSync(ctx, n, c.Namespace, pod.Name, cdDaemonContainer, "nvidia-imex-ctl", "-N", "-c", "/imexd/imexd.cfg")
	if err != nil {
		t.Errorf("nvidia-imex-ctl -N on %s: %v\n%s", node, err, out)
		return
	}
	ready := strings.Count(out, "- READY ")
	if ready != len(want) || !strings.Contains(out, "Domain State: UP") {
		t.Errorf("IMEX domain seen from %s: %d nodes READY, want %d, UP:\n%s", node, ready, len(want), out)
	}
}

// checkSecondNamespaceRefused: a user in another namespace copies the
// domain's workload claim template (the domain's UID in its config, no
// labels of ours) and runs a pod with it on node. The plugin refuses the
// claim: the kubelet's prepare error names namespace isolation and the
// claim's namespace; the pod never runs, its node gets no domain label and
// no daemon, and the domain's status does not list it.
func (c *cdCluster) checkSecondNamespaceRefused(ctx context.Context, t *testing.T, cd *computeDomain, node string) {
	t.Helper()
	const ns, name = "seed-intruder", "intruder"
	must(t, "namespace", create(ctx, c.Client.CoreV1().Namespaces(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))
	tmpl, err := c.Client.ResourceV1().ResourceClaimTemplates(cd.namespace).Get(ctx, cd.channelTemplate, metav1.GetOptions{})
	must(t, "workload template", err)
	copied := &resourceapi.ResourceClaimTemplate{
		ObjectMeta: metav1.ObjectMeta{Name: "borrowed-channel", Namespace: ns},
		Spec:       tmpl.Spec,
	}
	must(t, "borrowed template", create(ctx, c.Client.ResourceV1().ResourceClaimTemplates(ns), copied))
	c.createWorker(ctx, t, ns, name, node, "borrowed-channel")
	// kubemark's kubelet records events with a fake recorder (none reach
	// the API server), so its log is where the prepare error shows.
	waitCtx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	var message string
	err = waitForFile(waitCtx, c.node(t, node).LogPath(), func(data []byte) bool {
		for _, line := range strings.Split(string(data), "\n") {
			if strings.Contains(line, `"Failed to prepare dynamic resources"`) && strings.Contains(line, `pod="`+ns+`/`+name+`"`) {
				message = line
				return strings.Contains(line, "namespace isolation")
			}
		}
		return false
	})
	if err != nil {
		t.Fatalf("the kubelet on %s never failed %s/%s's prepare with the namespace-isolation reason (last: %q): %v", node, ns, name, message, err)
	}
	t.Logf("kubelet: %s", message)
	if !strings.Contains(message, "the claim is in namespace "+ns) {
		t.Errorf("the reason does not name the claim's namespace %s: %s", ns, message)
	}
	p, err := c.Client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
	must(t, "intruder", err)
	if p.Status.Phase == corev1.PodRunning {
		t.Errorf("%s/%s runs", ns, name)
	}
	if _, err := os.Stat(filepath.Join(c.node(t, node).Config.ViewsDir(), ns, name)); err == nil {
		t.Errorf("%s/%s got a container on %s", ns, name, node)
	}
	n, err := c.Client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	must(t, "node", err)
	if v, ok := n.Labels[cdLabelKey]; ok {
		t.Errorf("node %s labelled %s=%s for a claim of another namespace", node, cdLabelKey, v)
	}
	if d := c.DaemonPods(ctx, t, cd)[node]; d != nil {
		t.Errorf("the domain has a daemon on %s, the intruder's node", node)
	}
	u, err := c.Dyn.Resource(cdGVR).Namespace(cd.namespace).Get(ctx, cd.name, metav1.GetOptions{})
	must(t, "ComputeDomain", err)
	if _, listed := parseCDStatus(u).Nodes[node]; listed {
		t.Errorf("the domain's status lists the intruder's node %s", node)
	}
	must(t, "delete intruder", c.Client.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{}))
	waitForPodGone(waitCtx, t, c.Client, ns, name)
}

// checkStatusMatchesCliques checks status.nodes against the clique
// objects: each node's IP, clique id and index as its clique entry says,
// and each clique id the one of the node's clique.
func (c *cdCluster) checkStatusMatchesCliques(ctx context.Context, t *testing.T, cd *computeDomain, s cdStatus) {
	t.Helper()
	cliques := c.Cliques(ctx, t, cd)
	// The pods' IPs as the kubelet reports them, once it has: the domain can
	// be Ready before that report (the daemon publishes its own IP).
	var nodes []string
	for node := range s.Nodes {
		nodes = append(nodes, node)
	}
	daemons := c.waitForDaemonPods(ctx, t, cd, nodes)
	for node, n := range s.Nodes {
		e, ok := cliques[n.CliqueID][node]
		switch {
		case n.CliqueID != c.CliqueOfNode(node):
			t.Errorf("status.nodes %v: clique id, want %s", n, c.CliqueOfNode(node))
		case !ok:
			t.Errorf("status.nodes %v: no entry in clique %s (%v)", n, n.CliqueID, cliques)
		case n.Index == nil || e.Index == nil || *n.Index != *e.Index || n.IPAddress != e.IPAddress:
			t.Errorf("status.nodes %v differs from its clique entry %v", n, e)
		case daemons[node] == nil || daemons[node].Status.PodIP != n.IPAddress:
			t.Errorf("status.nodes %v: not the IP of the daemon pod there", n)
		}
	}
}

// checkChannelView checks that a running workload container got exactly
// the IMEX channel0 device node of its node.
func (c *cdCluster) checkChannelView(t *testing.T, pod *corev1.Pod, container string) {
	t.Helper()
	n := c.node(t, pod.Spec.NodeName)
	view, err := readContainerView(n, pod.Namespace, pod.Name, container)
	if err != nil {
		t.Errorf("%s/%s: %v", pod.Namespace, pod.Name, err)
		return
	}
	var devices []string
	for _, d := range view.Devices {
		devices = append(devices, fmt.Sprintf("%s %s %d:%d", d.Path, d.Type, d.Major, d.Minor))
	}
	want := fmt.Sprintf("%s c %d:0", imexChannelDevice, imexChannelsMajor)
	if len(devices) != 1 || devices[0] != want {
		t.Errorf("%s/%s on %s: device nodes %v, want exactly [%s]", pod.Namespace, pod.Name, n.Config.Name, devices, want)
	}
}

// deleteAndCheck deletes the workload pods and the domains, then checks
// that nothing of them is left.
func (c *cdCluster) deleteAndCheck(ctx context.Context, t *testing.T, cds []*computeDomain, pods []*corev1.Pod) {
	t.Helper()
	all := append([]*corev1.Pod(nil), pods...)
	for _, cd := range cds {
		all = append(all, podList(c.DaemonPods(ctx, t, cd))...)
	}
	claims := c.ClaimsOfPods(ctx, t, all...)
	start := time.Now()
	for _, p := range pods {
		must(t, "delete "+p.Name, c.Client.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{}))
	}
	for _, cd := range cds {
		c.DeleteComputeDomain(ctx, t, cd)
	}
	for _, p := range pods {
		waitForPodGone(ctx, t, c.Client, p.Namespace, p.Name)
	}
	for _, cd := range cds {
		c.CheckCDCleanedUp(ctx, t, cd, claims)
	}
	t.Logf("delete to everything cleaned up: %.1f s", time.Since(start).Seconds())
}

// waitForJobDone waits until the Job completed; fails when it failed.
func (c *cdCluster) waitForJobDone(ctx context.Context, t *testing.T, ns, name string) {
	t.Helper()
	selector := fields.OneTermEqualSelector("metadata.name", name).String()
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.FieldSelector = selector
			return c.Client.BatchV1().Jobs(ns).List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector = selector
			return c.Client.BatchV1().Jobs(ns).Watch(ctx, o)
		},
	}
	var last *batchv1.Job
	_, err := until(ctx, lw, &batchv1.Job{}, func(e watch.Event) (bool, error) {
		j, ok := e.Object.(*batchv1.Job)
		if !ok {
			return false, nil
		}
		last = j
		return j.Status.Succeeded > 0 || j.Status.Failed > 0, nil
	})
	if err != nil || last.Status.Failed > 0 {
		logs, _ := c.kubectl(ctx, "logs", "-n", ns, "--tail=-1", "-l", "job-name="+name)
		t.Fatalf("Job %s/%s: %v, status %+v; logs:\n%s", ns, name, err, statusOfJob(last), logs)
	}
}

func statusOfJob(j *batchv1.Job) any {
	if j == nil {
		return nil
	}
	return j.Status
}

// hasRow reports whether a line of kubectl's table holds all fields.
func hasRow(table string, fields ...string) bool {
	for _, line := range strings.Split(table, "\n") {
		cols := map[string]bool{}
		for _, f := range strings.Fields(line) {
			cols[f] = true
		}
		all := true
		for _, f := range fields {
			all = all && cols[f]
		}
		if all {
			return true
		}
	}
	return false
}

func sortedKeys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func podList(m map[string]*corev1.Pod) []*corev1.Pod {
	var out []*corev1.Pod
	for _, k := range sortedKeys(m) {
		out = append(out, m[k])
	}
	return out
}

func readContainerView(n *harness.Node, ns, pod, container string) (*cri.View, error) {
	return cri.ReadView(cri.ViewPath(n.Config.ViewsDir(), ns, pod, container))
}
