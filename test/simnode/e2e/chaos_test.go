package e2e

// A chaos run (issue #26 point 5; ctest e2e.chaos): on eight gb200-tray
// nodes with our chart installed (cd_cluster_env_test.go, GPU plugin on),
// GPU claims and ComputeDomains churn while one random fault per iteration
// hits: a plugin container killed, a kubelet restarted, a node rebooted or
// partitioned, kube-apiserver restarted, the controller killed, an
// nvidia-imex killed. Invariants are checked after every iteration, on
// every ResourceClaim event (device exclusivity), and after quiescence.
//
// Seeded: CHAOS_SEED (default chaosDefaultSeed) drives two math/rand
// streams, one for the fault schedule (kinds, nodes, containers, partition
// lengths: the same for a seed whatever the cluster does) and one for the
// churn (what to create or delete, sizes, namespaces, nodes: the same
// sequence of choices, though a choice that finds no candidate, say no
// Running pod to delete yet, depends on timing). Bounded: CHAOS_ITERATIONS
// (default chaosDefaultIterations) and CHAOS_BUDGET, the fault loop's time
// budget (a Go duration, default chaosDefaultBudget); whichever ends first.
//
// Single goroutine: the fault loop runs a churn action between its waits,
// so the harness (not thread-safe) and t.Fatal stay on the test goroutine;
// waits re-evaluate their condition on informer events (chaosWatch).

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"nvdra.local/test/simnode/harness"
	"nvdra.local/test/simnode/internal/cri"
)

const (
	envChaosSeed       = "CHAOS_SEED"
	envChaosIterations = "CHAOS_ITERATIONS"
	envChaosBudget     = "CHAOS_BUDGET"

	chaosDefaultSeed       = 20261127
	chaosDefaultIterations = 30
	chaosDefaultBudget     = 100 * time.Second

	// Two namespaces: churn lands in both, and the intruder of namespace B
	// borrows the anchor domain of namespace A.
	chaosNamespaceA = "chaos-a"
	chaosNamespaceB = "chaos-b"

	// Churn bounds: live GPU pods, live churn domains, GPUs per pod, and how
	// long a pod or domain may stay without running (or Ready) before the
	// churn deletes it anyway.
	chaosMaxGPUPods   = 5
	chaosMaxDomains   = 2
	chaosMaxPodGPUs   = 2
	chaosGPUNodes     = 3
	chaosPodBound     = 20 * time.Second
	chaosDomainMinAge = 10 * time.Second
	// A fault's own recovery (the component it hit back and Ready); past
	// it the loop goes on, and quiescence decides.
	chaosRecoveryBound = 60 * time.Second
	chaosMinRecovery   = 15 * time.Second
	chaosSlice         = 1500 * time.Millisecond
	gpusPerTray        = 4
	// Written to the intruder pod after a kube-apiserver restart (inject).
	chaosProbeAnnotation = "chaos.nvdra.test/probe"
	// A PrepareAborted entry of the CD plugin is a tombstone kept on
	// purpose (claim_preparer.h, upstream #1162: a prepare still waiting
	// when its claim was unprepared must fail, not leak the channel). It
	// holds no device and is dropped by the plugin's Reconcile once older
	// than aborted_ttl (90 s), Reconcile running every reconcile_interval
	// (10 min, computedomain/plugin.h): its whole lifetime.
	cdTombstoneLifetime = 10*time.Minute + 90*time.Second
)

// Fault kinds.
const (
	chaosPluginKill       = "plugin-kill"
	chaosKubeletRestart   = "kubelet-restart"
	chaosNodeReboot       = "node-reboot"
	chaosPartition        = "partition"
	chaosAPIServerRestart = "apiserver-restart"
	chaosControllerKill   = "controller-kill"
	chaosIMEXKill         = "imex-kill"
)

var chaosFaultKinds = []string{chaosPluginKill, chaosKubeletRestart, chaosNodeReboot, chaosPartition,
	chaosAPIServerRestart, chaosControllerKill, chaosIMEXKill}

// Invariants, as violations are counted.
const (
	vDeviceShared  = "device-held-twice"
	vClaimLost     = "claim-lost"
	vNotRunning    = "claim-pod-not-running"
	vDomain        = "domain-not-converged"
	vNotDeleted    = "object-not-deleted"
	vCrossNS       = "cross-namespace-access"
	vLeak          = "leak"
	vNotHealed     = "cluster-not-healed"
	vIndexSwap     = "clique-index-swap"
	chaosPluginCDI = "compute-domains"
)

type nsName struct{ ns, name string }

func (n nsName) String() string { return n.ns + "/" + n.name }

type chaosGPUPod struct {
	nsName
	gpus    int
	created time.Time
}

type chaosDomain struct {
	cd      *computeDomain
	nodes   []string
	workers []nsName
	created time.Time
	ready   bool // seen Ready
}

type chaosRun struct {
	t          *testing.T
	c          *cdCluster
	w          *chaosWatch
	faultRng   *rand.Rand
	churnRng   *rand.Rand
	seq        int
	nodes      []string
	gpuNodes   []string
	cdNodes    []string // nodes churn domains may use
	anchor     *chaosDomain
	intruder   nsName
	intruderOn string

	gpuPods []*chaosGPUPod
	domains []*chaosDomain
	// Deleted by the run, to be gone at quiescence.
	gonePods, goneClaims []nsName
	goneDomains          []*chaosDomain

	iterations  int
	faults      map[string]int
	skipped     map[string]int
	slow        map[string]int
	checks      map[string]int
	violations  map[string]int
	gpuCreated  int
	gpuRan      int
	gpuNeverRan int
	cdCreated   int
	cdReady     int
	reported    map[string]bool
	// faultState describes, for the log, what the current fault's
	// recovery waits for (set by inject; the fault's node by default).
	faultState func() string
	// PrepareAborted tombstones of deleted claims the leak sweep found
	// (node/claim UID): not leaks while within their lifetime.
	tombstones map[string]bool
}

func chaosSettings(t *testing.T) (seed int64, iterations int, budget time.Duration) {
	t.Helper()
	seed, iterations, budget = chaosDefaultSeed, chaosDefaultIterations, chaosDefaultBudget
	var err error
	if v := os.Getenv(envChaosSeed); v != "" {
		seed, err = strconv.ParseInt(v, 10, 64)
		must(t, envChaosSeed, err)
	}
	if v := os.Getenv(envChaosIterations); v != "" {
		iterations, err = strconv.Atoi(v)
		must(t, envChaosIterations, err)
	}
	if v := os.Getenv(envChaosBudget); v != "" {
		budget, err = time.ParseDuration(v)
		must(t, envChaosBudget, err)
	}
	return seed, iterations, budget
}

// TestChaos:
//  1. eight gb200-tray nodes in cliques {4, 4}, chart with the GPU plugin;
//     roles drawn from the seed: an anchor domain (namespace A, workers on
//     two nodes) that lives through the run, an intruder pod in namespace B
//     whose claim (a copy of the anchor's channel template) names it, three
//     nodes for GPU pods;
//  2. per iteration: one fault, held (partition: 1-4 s) and healed, its
//     recovery awaited with churn between the waits (GPU claims and pods
//     created and deleted; domains with one or two workers created and
//     deleted on nodes no other domain uses), then the cheap invariants:
//     no device allocated to two claims (also on every claim event), no GPU
//     device node in running containers of two workload pods (the runtime's
//     views), no claim or pod of the run lost, the intruder's claim never
//     prepared (no CDI spec, no PrepareCompleted checkpoint entry, no domain
//     label on its node, its pod not Running);
//  3. quiescence: nodes, plugins and controller Ready; every live pod
//     Running, every live domain Ready on its workers' nodes, everything
//     deleted gone; the cheap invariants; the kubelet failed the intruder
//     with the namespace-isolation reason; no clique index swapped;
//  4. everything deleted: no CDI spec, plugin checkpoint entry or kubelet
//     DRA checkpoint entry of a claim that does not exist, no domain label,
//     daemon DaemonSet, daemon pod, clique, claim template or per-domain
//     folder left. The CD plugin's PrepareAborted tombstones (no device,
//     kept on purpose for at most cdTombstoneLifetime) are counted, not
//     leaks; one older, or holding devices, is.
//
// Prints the replay command first and a summary line last.
func TestChaos(t *testing.T) {
	seed, iterations, budget := chaosSettings(t)
	t.Logf("chaos: %s=%d %s=%d %s=%s; replay with: %s=%d %s=%d %s=%s test/simnode/run-go-tests -run '^TestChaos$' -v ./e2e/ (ctest: same variables, ctest -R '^e2e\\.chaos$' -V)",
		envChaosSeed, seed, envChaosIterations, iterations, envChaosBudget, budget,
		envChaosSeed, seed, envChaosIterations, iterations, envChaosBudget, budget)
	ctx, cancel := context.WithTimeout(context.Background(), 9*time.Minute)
	defer cancel()
	start := time.Now()
	c := startCDCluster(ctx, t, cdClusterOptions{Cliques: []int{4, 4}, GPUPlugin: true})
	r := &chaosRun{t: t, c: c, w: startChaosWatch(t, c),
		faultRng: rand.New(rand.NewSource(seed)), churnRng: rand.New(rand.NewSource(seed + 1)),
		faults: map[string]int{}, skipped: map[string]int{}, slow: map[string]int{}, checks: map[string]int{}, violations: map[string]int{},
		reported: map[string]bool{}, tombstones: map[string]bool{}}
	rec := startIndexRecorder(t, c.Dyn, c.Namespace)
	defer func() {
		t.Logf("chaos summary: seed=%d iterations=%d/%d faults=%v skipped=%v slow-recoveries=%v checks=%v violations=%v "+
			"gpu-pods=%d (ran %d, deleted before running %d) domains=%d (Ready %d) PrepareAborted-tombstones=%d wall=%.0fs",
			seed, r.iterations, iterations, r.faults, r.skipped, r.slow, r.checks, r.violations,
			r.gpuCreated, r.gpuRan, r.gpuNeverRan, r.cdCreated, r.cdReady, len(r.tombstones), time.Since(start).Seconds())
	}()
	r.setup(ctx)
	t.Logf("chaos: cluster and anchor ready after %.1f s; GPU nodes %v, anchor on %v, intruder on %s",
		time.Since(start).Seconds(), r.gpuNodes, r.anchor.nodes, r.intruderOn)

	loopStart := time.Now()
	for i := 1; i <= iterations && time.Since(loopStart) < budget; i++ {
		r.iteration(ctx, i, budget-time.Since(loopStart))
		r.iterations = i
	}
	t.Logf("chaos: %d iterations in %.1f s", r.iterations, time.Since(loopStart).Seconds())

	r.quiesce(ctx)
	rec.mu.Lock()
	swaps := len(rec.swaps)
	rec.mu.Unlock()
	r.violations[vIndexSwap] += swaps
	rec.CheckNoSwap(t)
	r.teardown(ctx)
	r.sweepLeaks(ctx)
}

// violate records one violation of an invariant.
func (r *chaosRun) violate(kind, format string, args ...any) {
	r.t.Helper()
	r.violations[kind]++
	r.t.Errorf("VIOLATION %s: %s", kind, fmt.Sprintf(format, args...))
}

func (r *chaosRun) name(prefix string) string {
	r.seq++
	return fmt.Sprintf("%s-%d", prefix, r.seq)
}

// setup draws the nodes' roles, creates the namespaces, the anchor domain
// and the intruder.
func (r *chaosRun) setup(ctx context.Context) {
	t, c := r.t, r.c
	r.nodes = c.Nodes()
	perm := r.faultRng.Perm(len(r.nodes))
	anchorNodes := []string{r.nodes[perm[0]], r.nodes[perm[1]]}
	r.intruderOn = r.nodes[perm[2]]
	for _, i := range perm[3 : 3+chaosGPUNodes] {
		r.gpuNodes = append(r.gpuNodes, r.nodes[i])
	}
	for _, i := range perm[3:] {
		r.cdNodes = append(r.cdNodes, r.nodes[i])
	}
	sort.Strings(r.gpuNodes)
	sort.Strings(r.cdNodes)
	for _, ns := range []string{chaosNamespaceA, chaosNamespaceB} {
		must(t, "namespace "+ns, create(ctx, c.Client.CoreV1().Namespaces(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))
	}
	setupCtx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	cd := c.CreateComputeDomain(setupCtx, t, cdSpec{Namespace: chaosNamespaceA, Name: "anchor", NumNodes: 2})
	r.anchor = &chaosDomain{cd: cd, nodes: anchorNodes, created: time.Now()}
	for i, n := range anchorNodes {
		w := nsName{chaosNamespaceA, fmt.Sprintf("anchor-w%d", i)}
		c.createWorker(setupCtx, t, w.ns, w.name, n, cd.channelTemplate)
		r.anchor.workers = append(r.anchor.workers, w)
	}
	c.WaitForCDReady(setupCtx, t, cd, anchorNodes)
	r.anchor.ready = true
	// The intruder: a copy of the anchor's workload template in namespace B
	// (checkSecondNamespaceRefused's way), on a node no domain uses.
	tmpl, err := c.Client.ResourceV1().ResourceClaimTemplates(cd.namespace).Get(setupCtx, cd.channelTemplate, metav1.GetOptions{})
	must(t, "anchor's workload template", err)
	must(t, "borrowed template", create(setupCtx, c.Client.ResourceV1().ResourceClaimTemplates(chaosNamespaceB),
		&resourceapi.ResourceClaimTemplate{ObjectMeta: metav1.ObjectMeta{Name: "borrowed-channel"}, Spec: tmpl.Spec}))
	r.intruder = nsName{chaosNamespaceB, "intruder"}
	c.createWorker(setupCtx, t, r.intruder.ns, r.intruder.name, r.intruderOn, "borrowed-channel")
}

// iteration injects one fault, heals it, awaits its recovery with churn in
// between, and checks the cheap invariants.
func (r *chaosRun) iteration(ctx context.Context, i int, left time.Duration) {
	t := r.t
	kind := chaosFaultKinds[r.faultRng.Intn(len(chaosFaultKinds))]
	node := r.nodes[r.faultRng.Intn(len(r.nodes))]
	pick := r.faultRng.Intn(1 << 20) // a container, a daemon: whatever the kind needs
	hold := time.Duration(1000+r.faultRng.Intn(3000)) * time.Millisecond
	at := time.Now()
	r.faultState = func() string { return r.nodeState(node) }
	recovered, what, err := r.inject(ctx, kind, node, pick, hold)
	if err != nil {
		r.skipped[kind]++
		t.Logf("iteration %d: %s skipped: %v", i, kind, err)
	} else {
		r.faults[kind]++
		t.Logf("iteration %d: %s %s", i, kind, what)
		// Within the budget's remainder (at least chaosMinRecovery): the run
		// stays bounded, and quiescence waits for what is still slow.
		bound := min(chaosRecoveryBound, max(left, chaosMinRecovery))
		if !r.churnUntil(ctx, bound, recovered) {
			r.slow[kind]++
			t.Logf("iteration %d: %s %s: not recovered after %s (quiescence decides); %s", i, kind, what, bound, r.faultState())
		} else {
			t.Logf("iteration %d: recovered %.1f s after the fault", i, time.Since(at).Seconds())
		}
	}
	r.churn(ctx)
	r.checkCheap(ctx)
}

// inject applies a fault; returns the condition of its recovery (read from
// the informers) and what it hit. Partitions are held for hold, with churn
// meanwhile, and healed before it returns.
func (r *chaosRun) inject(ctx context.Context, kind, node string, pick int, hold time.Duration) (func() bool, string, error) {
	c := r.c
	nodes := c.Env.nodes
	switch kind {
	case chaosPluginKill:
		container := []string{gpuPluginContainer, chaosPluginCDI}[pick%2]
		p := r.pluginPod(node)
		if p == nil || containerStatus(p, container) == nil {
			return nil, "", fmt.Errorf("no plugin pod with %s on %s", container, node)
		}
		at := time.Now()
		pid, err := nodes.KillContainer(node, c.Namespace, p.Name, container)
		if err != nil {
			return nil, "", err
		}
		return func() bool {
			return startedSince(containerStatus(r.pluginPod(node), container), at) && r.nodeReady(node)
		}, fmt.Sprintf("container %s of %s on %s (pid %d)", container, p.Name, node, pid), nil
	case chaosKubeletRestart, chaosNodeReboot:
		at := time.Now()
		var err error
		if kind == chaosKubeletRestart {
			err = nodes.RestartKubelet(node)
		} else {
			err = nodes.Reboot(node)
		}
		if err != nil {
			return nil, "", err
		}
		return func() bool {
			p := r.pluginPod(node)
			if p == nil || !r.nodeReady(node) || !r.hasSlices(node) {
				return false
			}
			for i := range p.Status.ContainerStatuses {
				if !startedSince(&p.Status.ContainerStatuses[i], at) {
					return false
				}
			}
			return len(p.Status.ContainerStatuses) > 0
		}, "on " + node, nil
	case chaosPartition:
		if err := nodes.Partition(node); err != nil {
			return nil, "", err
		}
		r.churnUntil(ctx, hold, nil)
		if err := nodes.Heal(node); err != nil {
			r.t.Fatalf("heal %s: %v", node, err)
		}
		return func() bool { return r.nodeReady(node) }, fmt.Sprintf("of %s for %.1f s, healed", node, hold.Seconds()), nil
	case chaosAPIServerRestart:
		away, err := c.Env.cp.RestartAPIServer()
		if err != nil {
			r.t.Fatalf("restart kube-apiserver: %v", err)
		}
		// Recovered once this run's own pod watch is back: clients' watches
		// (the informers here, the scheduler's, the controllers') relist
		// with client-go's growing backoff after each restart, so
		// consecutive restarts leave them stale for tens of seconds. An
		// annotation written to the intruder pod shows when ours sees
		// events again.
		probe := strconv.Itoa(r.seq)
		r.seq++
		patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, chaosProbeAnnotation, probe)
		_, err = c.Client.CoreV1().Pods(r.intruder.ns).Patch(ctx, r.intruder.name, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
		must(r.t, "annotate the intruder", err)
		r.faultState = func() string { return "the run's pod informer has not seen the probe annotation " + probe }
		return func() bool {
			p := r.w.pod(r.intruder.ns, r.intruder.name)
			return p != nil && p.Annotations[chaosProbeAnnotation] == probe
		}, fmt.Sprintf("(away %.1f s)", away.Seconds()), nil
	case chaosControllerKill:
		ctl := r.w.podsWhere(c.Namespace, func(p *corev1.Pod) bool {
			return p.Labels[chartComponentLabel] == "controller" && p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning
		})
		if len(ctl) != 1 || containerStatus(ctl[0], cdControllerContainer) == nil {
			return nil, "", fmt.Errorf("%d running controller pods", len(ctl))
		}
		p := ctl[0]
		at := time.Now()
		pid, err := nodes.KillContainer(p.Spec.NodeName, c.Namespace, p.Name, cdControllerContainer)
		if err != nil {
			return nil, "", err
		}
		name := p.Name
		r.faultState = func() string {
			s := containerStatus(r.w.pod(c.Namespace, name), cdControllerContainer)
			if s == nil {
				return "controller pod " + name + " gone"
			}
			return fmt.Sprintf("controller %s ready=%t restarts=%d state=%+v", name, s.Ready, s.RestartCount, s.State)
		}
		return func() bool {
			return startedSince(containerStatus(r.w.pod(c.Namespace, name), cdControllerContainer), at)
		}, fmt.Sprintf("%s on %s (pid %d)", name, p.Spec.NodeName, pid), nil
	case chaosIMEXKill:
		daemons := r.w.podsWhere(c.Namespace, func(p *corev1.Pod) bool {
			_, ok := p.Labels[cdLabelKey]
			return ok && p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning
		})
		if len(daemons) == 0 {
			return nil, "", fmt.Errorf("no running daemon pod")
		}
		p := daemons[pick%len(daemons)]
		n, err := nodes.Node(p.Spec.NodeName)
		if err != nil {
			return nil, "", err
		}
		pid, err := findIMEXPid(n, p.Name)
		if err != nil {
			return nil, "", err
		}
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			return nil, "", fmt.Errorf("kill nvidia-imex %d: %w", pid, err)
		}
		name := p.Name
		daemon := func() (*corev1.Pod, int, error) {
			p := r.w.pod(c.Namespace, name)
			again, err := findIMEXPid(n, name)
			return p, again, err
		}
		r.faultState = func() string {
			p, again, err := daemon()
			if p == nil {
				return "daemon pod " + name + " gone"
			}
			return fmt.Sprintf("daemon pod %s %s deleting=%t restarts=%d, nvidia-imex pid %d (%v)", name, p.Status.Phase, p.DeletionTimestamp != nil, restarts(p), again, err)
		}
		// The daemon starts a new nvidia-imex itself; the domain's
		// convergence is for quiescence to check. A daemon that goes away
		// meanwhile (its domain deleted by the churn) has nothing to restart.
		return func() bool {
			p, again, err := daemon()
			return p == nil || p.DeletionTimestamp != nil || (err == nil && again != pid)
		}, fmt.Sprintf("(pid %d) of %s on %s", pid, name, p.Spec.NodeName), nil
	}
	return nil, "", fmt.Errorf("unknown fault %q", kind)
}

// startedSince: the container runs, Ready, started at or after at (the
// simulated runtime may give a container started anew after a kubelet
// restart its old ID, so the start time tells; it has whole seconds).
func startedSince(s *corev1.ContainerStatus, at time.Time) bool {
	return s != nil && s.Ready && s.State.Running != nil && !s.State.Running.StartedAt.Time.Before(at.Truncate(time.Second))
}

// churnUntil runs churn actions, one per slice, until cond holds (true) or
// d passed (false); cond nil: just for d. cond is re-evaluated on every
// informer event, and at least once per slice (conditions on processes).
func (r *chaosRun) churnUntil(ctx context.Context, d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	never := func() bool { return false }
	if cond == nil {
		cond = never
	}
	for time.Now().Before(deadline) {
		if cond() {
			return true
		}
		r.churn(ctx)
		slice := min(chaosSlice, time.Until(deadline))
		if slice <= 0 {
			break
		}
		sctx, cancel := context.WithTimeout(ctx, slice)
		err := r.w.await(sctx, cond)
		cancel()
		if err == nil {
			return true
		}
		if ctx.Err() != nil {
			r.t.Fatalf("chaos run out of time: %v", ctx.Err())
		}
	}
	return cond()
}

// churn runs one action: create or delete a GPU pod, create or delete a
// domain; when the drawn one has no candidate, its opposite.
func (r *chaosRun) churn(ctx context.Context) {
	r.observe()
	switch x := r.churnRng.Intn(10); {
	case x < 4:
		_ = r.createGPUPod(ctx) || r.deleteGPUPod(ctx)
	case x < 6:
		_ = r.deleteGPUPod(ctx) || r.createGPUPod(ctx)
	case x < 8:
		_ = r.createDomain(ctx) || r.deleteDomain(ctx)
	default:
		_ = r.deleteDomain(ctx) || r.createDomain(ctx)
	}
}

// observe notes which live domains were Ready.
func (r *chaosRun) observe() {
	for _, d := range append([]*chaosDomain{r.anchor}, r.domains...) {
		if st, ok := r.w.domain(d.cd); ok && st.Status == "Ready" && !d.ready {
			d.ready = true
			if d != r.anchor {
				r.cdReady++
			}
		}
	}
}

func (r *chaosRun) namespace() string {
	return []string{chaosNamespaceA, chaosNamespaceB}[r.churnRng.Intn(2)]
}

// createGPUPod creates a claim for 1-2 GPUs and a pod using it on one of
// the GPU nodes, while the live pods' GPUs fit those nodes.
func (r *chaosRun) createGPUPod(ctx context.Context) bool {
	gpus := 1 + r.churnRng.Intn(chaosMaxPodGPUs)
	ns := r.namespace()
	used := 0
	for _, p := range r.gpuPods {
		used += p.gpus
	}
	if len(r.gpuPods) >= chaosMaxGPUPods || used+gpus > gpusPerTray*len(r.gpuNodes) {
		return false
	}
	name := r.name("gpu")
	req := deviceRequest("gpu", gpuClass)
	req.Exactly.AllocationMode = resourceapi.DeviceAllocationModeExactCount
	req.Exactly.Count = int64(gpus)
	claim := &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{req}}},
	}
	_, err := r.c.Client.ResourceV1().ResourceClaims(ns).Create(ctx, claim, metav1.CreateOptions{})
	must(r.t, "claim "+name, err)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PodSpec{
			TerminationGracePeriodSeconds: ptr(int64(5)),
			Affinity: &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
				RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
					MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "kubernetes.io/hostname", Operator: corev1.NodeSelectorOpIn, Values: r.gpuNodes}},
				}}},
			}},
			ResourceClaims: []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimName: ptr(name)}},
			Tolerations:    []corev1.Toleration{{Key: "nvidia.com/gpu", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}},
			Containers: []corev1.Container{{
				Name:      "work",
				Image:     workImage,
				Command:   []string{"sh", "-c", "trap 'exit 0' TERM; sleep 9999 & wait"},
				Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "gpu"}}},
			}},
		},
	}
	_, err = r.c.Client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
	must(r.t, "pod "+name, err)
	r.gpuPods = append(r.gpuPods, &chaosGPUPod{nsName: nsName{ns, name}, gpus: gpus, created: time.Now()})
	r.gpuCreated++
	return true
}

// deleteGPUPod deletes the oldest GPU pod that ran, or that did not within
// chaosPodBound, with its claim.
func (r *chaosRun) deleteGPUPod(ctx context.Context) bool {
	for i, p := range r.gpuPods {
		ran := r.w.everRan(p.ns, p.name)
		if !ran && time.Since(p.created) < chaosPodBound {
			continue
		}
		if ran {
			r.gpuRan++
		} else {
			r.gpuNeverRan++
			r.t.Logf("churn: GPU pod %s not Running %.0f s after its creation; deleted", p, time.Since(p.created).Seconds())
		}
		r.deletePod(ctx, p.nsName)
		err := r.c.Client.ResourceV1().ResourceClaims(p.ns).Delete(ctx, p.name, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			r.t.Fatalf("delete claim %s: %v", p, err)
		}
		r.goneClaims = append(r.goneClaims, p.nsName)
		r.gpuPods = append(r.gpuPods[:i], r.gpuPods[i+1:]...)
		return true
	}
	return false
}

func (r *chaosRun) deletePod(ctx context.Context, p nsName) {
	err := r.c.Client.CoreV1().Pods(p.ns).Delete(ctx, p.name, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		r.t.Fatalf("delete pod %s: %v", p, err)
	}
	r.gonePods = append(r.gonePods, p)
}

// createDomain creates a domain with workers on one or two nodes that no
// live domain uses and no worker of a deleted one still holds.
func (r *chaosRun) createDomain(ctx context.Context) bool {
	need := 1 + r.churnRng.Intn(2)
	unset := r.churnRng.Intn(3) == 0 // numNodes unset: Ready with the daemons there are
	ns := r.namespace()
	order := r.churnRng.Perm(len(r.cdNodes))
	if len(r.domains) >= chaosMaxDomains {
		return false
	}
	busy := map[string]bool{}
	for _, d := range r.domains {
		for _, n := range d.nodes {
			busy[n] = true
		}
	}
	for _, d := range r.goneDomains {
		for i, w := range d.workers {
			if r.w.pod(w.ns, w.name) != nil {
				busy[d.nodes[i]] = true
			}
		}
	}
	var nodes []string
	for _, i := range order {
		if n := r.cdNodes[i]; !busy[n] && len(nodes) < need {
			nodes = append(nodes, n)
		}
	}
	if len(nodes) < need {
		return false
	}
	numNodes := need
	if unset {
		numNodes = -1
	}
	name := r.name("cd")
	cd := r.c.CreateComputeDomain(ctx, r.t, cdSpec{Namespace: ns, Name: name, NumNodes: numNodes})
	d := &chaosDomain{cd: cd, nodes: nodes, created: time.Now()}
	for i, n := range nodes {
		w := nsName{ns, fmt.Sprintf("%s-w%d", name, i)}
		r.c.createWorker(ctx, r.t, w.ns, w.name, n, cd.channelTemplate)
		d.workers = append(d.workers, w)
	}
	r.domains = append(r.domains, d)
	r.cdCreated++
	return true
}

// deleteDomain deletes the oldest domain that was Ready or is older than
// chaosDomainMinAge: its workers, then the domain.
func (r *chaosRun) deleteDomain(ctx context.Context) bool {
	for i, d := range r.domains {
		if !d.ready && time.Since(d.created) < chaosDomainMinAge {
			continue
		}
		for _, w := range d.workers {
			r.deletePod(ctx, w)
		}
		err := r.c.Dyn.Resource(cdGVR).Namespace(d.cd.namespace).Delete(ctx, d.cd.name, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			r.t.Fatalf("delete ComputeDomain %s/%s: %v", d.cd.namespace, d.cd.name, err)
		}
		r.goneDomains = append(r.goneDomains, d)
		r.domains = append(r.domains[:i], r.domains[i+1:]...)
		return true
	}
	return false
}

// pluginPod is the chart's kubelet-plugin pod on node (nil when none).
func (r *chaosRun) pluginPod(node string) *corev1.Pod {
	pods := r.w.podsWhere(r.c.Namespace, func(p *corev1.Pod) bool {
		return p.Labels[chartComponentLabel] == "kubelet-plugin" && p.Spec.NodeName == node && p.DeletionTimestamp == nil
	})
	if len(pods) == 0 {
		return nil
	}
	return pods[0]
}

func (r *chaosRun) nodeReady(node string) bool {
	o, ok, _ := r.w.nodes.GetByKey(node)
	if !ok {
		return false
	}
	cond := nodeCondition(o.(*corev1.Node), corev1.NodeReady)
	return cond != nil && cond.Status == corev1.ConditionTrue
}

// nodeState says what a recovery waits for on node, for the log.
func (r *chaosRun) nodeState(node string) string {
	var containers []string
	if p := r.pluginPod(node); p != nil {
		for _, s := range p.Status.ContainerStatuses {
			containers = append(containers, fmt.Sprintf("%s ready=%t restarts=%d state=%+v", s.Name, s.Ready, s.RestartCount, s.State))
		}
	}
	return fmt.Sprintf("node %s Ready=%t, slices of both drivers=%t, plugin containers %v", node, r.nodeReady(node), r.hasSlices(node), containers)
}

// hasSlices: both drivers publish on node.
func (r *chaosRun) hasSlices(node string) bool {
	seen := map[string]bool{}
	for _, o := range r.w.slices.List() {
		s := o.(*resourceapi.ResourceSlice)
		if s.Spec.NodeName != nil && *s.Spec.NodeName == node && len(s.Spec.Devices) > 0 {
			seen[s.Spec.Driver] = true
		}
	}
	return seen[gpuDriverName] && seen[cdDriverName]
}

// livePods are the pods the run created and did not delete.
func (r *chaosRun) livePods() []nsName {
	out := append([]nsName(nil), r.anchor.workers...)
	out = append(out, r.intruder)
	for _, p := range r.gpuPods {
		out = append(out, p.nsName)
	}
	for _, d := range r.domains {
		out = append(out, d.workers...)
	}
	return out
}

// checkCheap checks the invariants that hold at every moment.
func (r *chaosRun) checkCheap(ctx context.Context) {
	r.checks[vDeviceShared]++
	r.w.record(sharedDevices(r.w.claimList(), r.w.pods))
	for _, what := range r.w.takeShared() {
		r.violate(vDeviceShared, "%s", what)
	}
	for key, pods := range r.nodeDeviceHolders() {
		if len(pods) > 1 && !r.reported[key] {
			r.reported[key] = true
			r.violate(vDeviceShared, "%s held by running containers of %d pods: %v", key, len(pods), keys(pods))
		}
	}

	// No claim lost: every pod the run keeps exists, and so do its claims
	// (the GPU pods' own, the workers' generated ones once named). Read
	// from the API, not the informers: a lost object must not hide behind
	// a stale cache.
	r.checks[vClaimLost]++
	for _, p := range r.livePods() {
		pod, err := r.c.Client.CoreV1().Pods(p.ns).Get(ctx, p.name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) || (err == nil && pod.DeletionTimestamp != nil) {
			r.violate(vClaimLost, "pod %s of the run is gone or deleting (%v)", p, err)
			continue
		}
		must(r.t, "pod "+p.String(), err)
		for _, s := range pod.Status.ResourceClaimStatuses {
			if s.ResourceClaimName == nil {
				continue
			}
			if _, err := r.c.Client.ResourceV1().ResourceClaims(p.ns).Get(ctx, *s.ResourceClaimName, metav1.GetOptions{}); apierrors.IsNotFound(err) {
				r.violate(vClaimLost, "claim %s/%s of pod %s is gone", p.ns, *s.ResourceClaimName, p)
			}
		}
	}
	for _, g := range r.gpuPods {
		if _, err := r.c.Client.ResourceV1().ResourceClaims(g.ns).Get(ctx, g.name, metav1.GetOptions{}); apierrors.IsNotFound(err) {
			r.violate(vClaimLost, "claim %s is gone", g)
		}
	}

	// No cross-namespace access: the intruder's claim is never prepared.
	r.checks[vCrossNS]++
	p := r.w.pod(r.intruder.ns, r.intruder.name)
	if p != nil && p.Status.Phase == corev1.PodRunning {
		r.violate(vCrossNS, "intruder %s runs on %s", r.intruder, p.Spec.NodeName)
	}
	if uid := r.intruderClaimUID(); uid != "" {
		for _, node := range r.nodes {
			n := r.c.node(r.t, node)
			if fileExists(cdClaimSpecPath(n, uid)) {
				r.violate(vCrossNS, "intruder's claim %s has a CDI spec on %s", uid, node)
			}
			if state := checkpointClaims(r.t, n, cdDriverName)[uid].State; state == "PrepareCompleted" {
				r.violate(vCrossNS, "intruder's claim %s is PrepareCompleted in the checkpoint of %s", uid, node)
			}
		}
	}
	if o, ok, _ := r.w.nodes.GetByKey(r.intruderOn); ok {
		if v := o.(*corev1.Node).Labels[cdLabelKey]; v == string(r.anchor.cd.uid) {
			r.violate(vCrossNS, "intruder's node %s labelled with the anchor domain %s", r.intruderOn, v)
		}
	}
}

func (r *chaosRun) intruderClaimUID() string {
	p := r.w.pod(r.intruder.ns, r.intruder.name)
	if p == nil || len(p.Status.ResourceClaimStatuses) == 0 || p.Status.ResourceClaimStatuses[0].ResourceClaimName == nil {
		return ""
	}
	if c := r.w.claim(r.intruder.ns, *p.Status.ResourceClaimStatuses[0].ResourceClaimName); c != nil {
		return string(c.UID)
	}
	return ""
}

// checkpointEntry is one claim of a plugin's checkpoint.
type checkpointEntry struct {
	State     string // v2's checkpointState; "v1" for a claim only v1 has
	AbortedAt string
	Devices   int // prepared device groups
}

// checkpointClaims reads a plugin's checkpoint on n by claim UID; nil when
// there is none.
func checkpointClaims(t *testing.T, n *harness.Node, driver string) map[string]checkpointEntry {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(n.Config.Dir, pluginsDir, driver, "checkpoint.json"))
	if os.IsNotExist(err) {
		return nil
	}
	must(t, "read checkpoint", err)
	type entry struct {
		CheckpointState string            `json:"checkpointState"`
		AbortedAt       string            `json:"abortedAt"`
		PreparedDevices []json.RawMessage `json:"preparedDevices"`
	}
	var checkpoint struct {
		V1 struct {
			PreparedClaims map[string]entry `json:"preparedClaims"`
		} `json:"v1"`
		V2 struct {
			PreparedClaims map[string]entry `json:"preparedClaims"`
		} `json:"v2"`
	}
	must(t, "parse checkpoint of "+driver, json.Unmarshal(data, &checkpoint))
	out := map[string]checkpointEntry{}
	for uid, e := range checkpoint.V1.PreparedClaims {
		out[uid] = checkpointEntry{State: "v1", Devices: len(e.PreparedDevices)}
	}
	for uid, e := range checkpoint.V2.PreparedClaims {
		out[uid] = checkpointEntry{State: e.CheckpointState, AbortedAt: e.AbortedAt, Devices: len(e.PreparedDevices)}
	}
	return out
}

// kubeletDRAClaims reads the kubelet's own DRA checkpoint on n
// (var/lib/kubelet/dra_manager_state): the UIDs of the claims it holds.
func kubeletDRAClaims(t *testing.T, n *harness.Node) []string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(n.Config.Dir, "var", "lib", "kubelet", "dra_manager_state"))
	if os.IsNotExist(err) {
		return nil
	}
	must(t, "read the kubelet's DRA checkpoint", err)
	var outer struct{ Data string }
	must(t, "parse the kubelet's DRA checkpoint", json.Unmarshal(data, &outer))
	var inner struct {
		ClaimInfoStateList []struct{ ClaimUID string }
	}
	must(t, "parse the kubelet's DRA checkpoint data", json.Unmarshal([]byte(outer.Data), &inner))
	var out []string
	for _, c := range inner.ClaimInfoStateList {
		out = append(out, c.ClaimUID)
	}
	return out
}

// tombstone: a PrepareAborted entry without devices, within the lifetime
// the plugin gives it.
func (e checkpointEntry) tombstone(now time.Time) bool {
	at, err := time.Parse(time.RFC3339, e.AbortedAt)
	return e.State == "PrepareAborted" && e.Devices == 0 && err == nil && now.Sub(at) < cdTombstoneLifetime
}

// nodeDeviceHolders reads, from the runtime's container views of every
// node, which workload pods' running containers hold each GPU device node
// (/dev/nvidia<N>): node + path -> pods. The node's own view of "held",
// independent of the API. The driver namespace's pods are left out: the
// IMEX daemons see every GPU on purpose (the CD plugin's base spec "all",
// upstream's management mode) without a GPU claim.
func (r *chaosRun) nodeDeviceHolders() map[string]map[string]bool {
	out := map[string]map[string]bool{}
	for _, node := range r.nodes {
		n := r.c.node(r.t, node)
		views, _ := filepath.Glob(filepath.Join(n.Config.ViewsDir(), "*", "*", "*.json"))
		for _, path := range views {
			v, err := cri.ReadView(path)
			if err != nil || v.Namespace == r.c.Namespace {
				continue // being written, or the driver's
			}
			data, err := os.ReadFile(filepath.Join(n.Config.ContainersDir(), v.ContainerID, cri.PidFile))
			if err != nil {
				continue // not running
			}
			pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
			if err != nil || pid <= 0 || syscall.Kill(pid, 0) != nil {
				continue
			}
			for _, d := range v.Devices {
				if !gpuDeviceNode.MatchString(d.Path) {
					continue
				}
				key := node + ":" + d.Path
				if out[key] == nil {
					out[key] = map[string]bool{}
				}
				out[key][v.Namespace+"/"+v.Pod+" ("+v.PodUID+")"] = true
			}
		}
	}
	return out
}

var gpuDeviceNode = regexp.MustCompile(`^/dev/nvidia[0-9]+$`)

// quiesce: no more faults or churn. The cluster heals, every live object
// converges, everything deleted is gone; then every invariant is checked.
func (r *chaosRun) quiesce(ctx context.Context) {
	t := r.t
	start := time.Now()
	qctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	healthy := func() []string {
		var bad []string
		for _, n := range r.nodes {
			if !r.nodeReady(n) {
				bad = append(bad, "node "+n+" not Ready")
			}
			if p := r.pluginPod(n); p == nil || !podReady(p) {
				bad = append(bad, "plugin on "+n+" not Ready")
			}
			if !r.hasSlices(n) {
				bad = append(bad, "slices of "+n+" missing")
			}
		}
		ctl := r.w.podsWhere(r.c.Namespace, func(p *corev1.Pod) bool {
			return p.Labels[chartComponentLabel] == "controller" && p.DeletionTimestamp == nil && podReady(p)
		})
		if len(ctl) != 1 {
			bad = append(bad, fmt.Sprintf("%d Ready controller pods", len(ctl)))
		}
		return bad
	}
	if err := r.w.await(qctx, func() bool { return len(healthy()) == 0 }); err != nil {
		for _, b := range healthy() {
			r.violate(vNotHealed, "%s", b)
		}
	}
	t.Logf("quiescence: cluster healthy %.1f s after the last fault", time.Since(start).Seconds())

	// Every live object converged, everything deleted gone.
	pending := func() map[string][]string {
		out := map[string][]string{}
		for _, p := range r.livePods() {
			if p == r.intruder {
				continue
			}
			if pod := r.w.pod(p.ns, p.name); pod == nil || pod.Status.Phase != corev1.PodRunning {
				out[vNotRunning] = append(out[vNotRunning], fmt.Sprintf("pod %s: %v", p, podPhase(pod)))
			}
		}
		for _, d := range append([]*chaosDomain{r.anchor}, r.domains...) {
			st, ok := r.w.domain(d.cd)
			if !ok || !readyOn(st, d.nodes) {
				out[vDomain] = append(out[vDomain], fmt.Sprintf("domain %s/%s not Ready on %v: %s %v", d.cd.namespace, d.cd.name, d.nodes, st.Status, st.Nodes))
			}
		}
		for _, d := range r.goneDomains {
			if _, ok := r.w.domain(d.cd); ok {
				out[vDomain] = append(out[vDomain], fmt.Sprintf("deleted domain %s/%s still there", d.cd.namespace, d.cd.name))
			}
		}
		for _, p := range r.gonePods {
			if r.w.pod(p.ns, p.name) != nil {
				out[vNotDeleted] = append(out[vNotDeleted], "pod "+p.String())
			}
		}
		for _, c := range r.goneClaims {
			if claim := r.w.claim(c.ns, c.name); claim != nil {
				out[vNotDeleted] = append(out[vNotDeleted], "claim "+c.String()+" "+r.claimState(claim))
			}
		}
		return out
	}
	if err := r.w.await(qctx, func() bool { return len(pending()) == 0 }); err != nil {
		for kind, list := range pending() {
			for _, what := range list {
				r.violate(kind, "at quiescence: %s", what)
			}
		}
	}
	r.observe()
	t.Logf("quiescence: %d live pods Running, %d live domains Ready, deletions done %.1f s after the last fault",
		len(r.livePods())-1, len(r.domains)+1, time.Since(start).Seconds())
	r.checkCheap(ctx)

	// The kubelet failed the intruder's prepare with the plugin's reason
	// (kubemark's kubelet records events with a fake recorder: its log).
	r.checks[vCrossNS]++
	lctx, lcancel := context.WithTimeout(ctx, 30*time.Second)
	defer lcancel()
	err := waitForFile(lctx, r.c.node(t, r.intruderOn).LogPath(), func(data []byte) bool {
		for _, line := range strings.Split(string(data), "\n") {
			if strings.Contains(line, `"Failed to prepare dynamic resources"`) &&
				strings.Contains(line, `pod="`+r.intruder.String()+`"`) && strings.Contains(line, "namespace isolation") {
				return true
			}
		}
		return false
	})
	if err != nil {
		r.violate(vCrossNS, "the kubelet on %s never failed %s's prepare with the namespace-isolation reason: %v", r.intruderOn, r.intruder, err)
	}
}

// claimState says, for a claim that should be gone, what holds it: its
// finalizers, its allocation, and each reserving pod, whether it still
// exists (a reservation of a pod that is gone is the resourceclaim
// controller's to release).
func (r *chaosRun) claimState(c *resourceapi.ResourceClaim) string {
	var reserved []string
	for _, ref := range c.Status.ReservedFor {
		state := "gone"
		if p := r.w.pod(c.Namespace, ref.Name); p != nil && p.UID == ref.UID {
			state = podPhase(p)
		}
		reserved = append(reserved, fmt.Sprintf("%s %s (uid %s, %s)", ref.Resource, ref.Name, ref.UID, state))
	}
	return fmt.Sprintf("(uid %s, deleting=%t, finalizers %v, allocated=%t, reservedFor %v)",
		c.UID, c.DeletionTimestamp != nil, c.Finalizers, c.Status.Allocation != nil, reserved)
}

func podPhase(p *corev1.Pod) string {
	if p == nil {
		return "gone"
	}
	return string(p.Status.Phase)
}

// readyOn: the domain is Ready with exactly nodes in its status, each Ready
// (WaitForCDReady's condition, and the chaos run's at quiescence).
func readyOn(s cdStatus, nodes []string) bool {
	want := append([]string(nil), nodes...)
	sort.Strings(want)
	if s.Status != "Ready" || strings.Join(s.NodeNames(), ",") != strings.Join(want, ",") {
		return false
	}
	for _, n := range s.Nodes {
		if n.Status != "Ready" {
			return false
		}
	}
	return true
}

// teardown deletes everything the run made and waits until it is gone.
func (r *chaosRun) teardown(ctx context.Context) {
	start := time.Now()
	for _, p := range r.livePods() {
		r.deletePod(ctx, p)
	}
	for _, g := range r.gpuPods {
		err := r.c.Client.ResourceV1().ResourceClaims(g.ns).Delete(ctx, g.name, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			r.t.Fatalf("delete claim %s: %v", g, err)
		}
		r.goneClaims = append(r.goneClaims, g.nsName)
	}
	r.gpuPods = nil
	err := r.c.Client.ResourceV1().ResourceClaimTemplates(chaosNamespaceB).Delete(ctx, "borrowed-channel", metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		r.t.Fatalf("delete the borrowed template: %v", err)
	}
	for _, d := range append([]*chaosDomain{r.anchor}, r.domains...) {
		err := r.c.Dyn.Resource(cdGVR).Namespace(d.cd.namespace).Delete(ctx, d.cd.name, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			r.t.Fatalf("delete ComputeDomain %s/%s: %v", d.cd.namespace, d.cd.name, err)
		}
		r.goneDomains = append(r.goneDomains, d)
	}
	r.domains = nil
	tctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	left := func() []string {
		var out []string
		for _, o := range r.w.pods.List() {
			if p := o.(*corev1.Pod); p.Namespace == chaosNamespaceA || p.Namespace == chaosNamespaceB {
				out = append(out, "pod "+p.Namespace+"/"+p.Name)
			}
		}
		for _, c := range r.w.claimList() {
			if c.Namespace == chaosNamespaceA || c.Namespace == chaosNamespaceB {
				out = append(out, "claim "+c.Namespace+"/"+c.Name+" "+r.claimState(c))
			}
		}
		for _, o := range r.w.domains.List() {
			u := o.(*unstructured.Unstructured)
			out = append(out, "ComputeDomain "+u.GetNamespace()+"/"+u.GetName())
		}
		sort.Strings(out)
		return out
	}
	if err := r.w.await(tctx, func() bool { return len(left()) == 0 }); err != nil {
		for _, what := range left() {
			r.violate(vNotDeleted, "after teardown: %s", what)
		}
	}
	r.t.Logf("teardown: everything deleted in %.1f s", time.Since(start).Seconds())
}

// leaks lists what nothing should hold once every claim and domain of the
// run is gone: claim CDI specs and checkpoint entries of claims that do
// not exist, domain labels on nodes, daemon DaemonSets, pods and claim
// templates, cliques, the plugin's per-domain folders.
func (r *chaosRun) leaks() []string {
	live := map[string]bool{}
	for _, c := range r.w.claimList() {
		live[string(c.UID)] = true
	}
	var out []string
	for _, node := range r.nodes {
		n := r.c.node(r.t, node)
		specs, _ := filepath.Glob(filepath.Join(n.Config.Dir, pluginCDIRoot, "*-claim_*.yaml"))
		for _, s := range specs {
			base := filepath.Base(s)
			uid := strings.TrimSuffix(base[strings.LastIndex(base, "-claim_")+len("-claim_"):], ".yaml")
			if !live[uid] {
				out = append(out, fmt.Sprintf("CDI spec %s on %s", base, node))
			}
		}
		for _, driver := range []string{gpuDriverName, cdDriverName} {
			for uid, e := range checkpointClaims(r.t, n, driver) {
				switch {
				case live[uid]:
				case driver == cdDriverName && e.tombstone(time.Now()):
					r.tombstones[node+"/"+uid] = true
				default:
					out = append(out, fmt.Sprintf("%s checkpoint entry of claim %s (%+v) on %s", driver, uid, e, node))
				}
			}
		}
		for _, uid := range kubeletDRAClaims(r.t, n) {
			if !live[uid] {
				out = append(out, fmt.Sprintf("kubelet DRA checkpoint entry of claim %s on %s", uid, node))
			}
		}
		entries, _ := os.ReadDir(filepath.Join(n.Config.Dir, cdPluginDomainsPath))
		for _, e := range entries {
			out = append(out, fmt.Sprintf("domain folder %s on %s", e.Name(), node))
		}
	}
	for _, o := range r.w.nodes.List() {
		n := o.(*corev1.Node)
		for k, v := range n.Labels {
			if k == cdLabelKey || strings.HasPrefix(k, cdLabelKey+".") {
				out = append(out, fmt.Sprintf("label %s=%s on node %s", k, v, n.Name))
			}
		}
	}
	for _, o := range r.w.daemonSets.List() {
		if m := o.(metav1.Object); strings.HasPrefix(m.GetName(), "computedomain-daemon-") {
			out = append(out, "DaemonSet "+m.GetName())
		}
	}
	for _, o := range r.w.cliques.List() {
		out = append(out, "ComputeDomainClique "+o.(metav1.Object).GetName())
	}
	for _, o := range r.w.templates.List() {
		m := o.(metav1.Object)
		if m.GetNamespace() == chaosNamespaceA || m.GetNamespace() == chaosNamespaceB || strings.HasPrefix(m.GetName(), "computedomain-daemon-") {
			out = append(out, "ResourceClaimTemplate "+m.GetNamespace()+"/"+m.GetName())
		}
	}
	for _, p := range r.w.podsWhere(r.c.Namespace, func(p *corev1.Pod) bool { _, ok := p.Labels[cdLabelKey]; return ok }) {
		out = append(out, "daemon pod "+p.Name+" on "+p.Spec.NodeName)
	}
	sort.Strings(out)
	return out
}

// sweepLeaks waits for the leaks to go: API objects on informer events,
// files re-read at least once per slice (file events of every node's
// folders would be many watches for one final check).
func (r *chaosRun) sweepLeaks(ctx context.Context) {
	r.checks[vLeak]++
	start := time.Now()
	deadline := time.Now().Add(time.Minute)
	var left []string
	for {
		left = r.leaks()
		if len(left) == 0 || time.Now().After(deadline) {
			break
		}
		sctx, cancel := context.WithTimeout(ctx, time.Second)
		_ = r.w.await(sctx, func() bool { return false })
		cancel()
	}
	for _, what := range left {
		r.violate(vLeak, "%s", what)
	}
	r.t.Logf("leak sweep: %d left after %.1f s", len(left), time.Since(start).Seconds())
}
