package e2e

// TestComputeDomainScaleBench is issue 9's scale benchmark, printed, not
// asserted: for each size N in SIMNODE_CD_SCALE_SIZES (scripts/bench passes
// "4,18,72"), a fresh ComputeDomain cluster (cd_cluster_env_test.go: N
// gb200-tray nodes in cliques of at most SIMNODE_CD_SCALE_CLIQUE, default 18,
// as NVL72 racks; our chart with the real controller, the CD kubelet plugin
// and the controller's IMEX daemons as pods), then the workload a user
// submits: one ComputeDomain with numNodes=N and N worker pods, one per node,
// each with a channel claim from the domain's claim template. Measured from
// the submission:
//   - every worker's channel claim prepared (the plugin's own "claim
//     prepared" log stamp on each node; the last one counts),
//   - every worker Running, every daemon pod Ready, the domain Ready (as this
//     test's watches see them),
//   - API requests in that window: from the API server's metrics
//     (apiserver_request_total, by verb and resource), and attributed to
//     clients by its audit log (harness.EnvAuditLog): node side (kubelets by
//     their user agent simnode-kubelet/<node>, the plugins' and daemons'
//     service accounts), the compute-domain controller, the control plane's
//     own controllers and scheduler, this test.
// Before the submission an idle window (SIMNODE_CD_SCALE_IDLE, default 10 s)
// gives the cluster's background request rate. SIMNODE_CD_SCALE_NODE_NICE
// (0 to 19, default 0) starts the node processes, and so every pod's
// processes, at that nice value: the control plane, which a real cluster
// runs on machines of its own, then comes first on this machine's cores
// (figures cd_scale.<N>.node_nice_<n>.*). Writes JSON lines to
// SIMNODE_CD_SCALE_OUT when set (bench/collect.py makes them cd_scale.<N>.*).

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"

	"nvdra.local/test/simnode/harness"
)

const (
	cdScaleNamespace = "cd-scale"
	cdScaleDomain    = "scale"
	// The user agent of this test's own requests (its audit entries).
	cdScaleUserAgent = "cd-scale-bench"
)

func TestComputeDomainScaleBench(t *testing.T) {
	spec := os.Getenv("SIMNODE_CD_SCALE_SIZES")
	if spec == "" {
		t.Skip("set SIMNODE_CD_SCALE_SIZES=4,18,72 to time a ComputeDomain workload on that many simulated nodes")
	}
	var sizes []int
	for _, f := range strings.Split(spec, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 {
			t.Fatalf("SIMNODE_CD_SCALE_SIZES=%q: want node counts separated by commas, e.g. 4,18,72", spec)
		}
		sizes = append(sizes, n)
	}
	perClique := maxNodesPerIMEXDomain
	if v := os.Getenv("SIMNODE_CD_SCALE_CLIQUE"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			t.Fatalf("SIMNODE_CD_SCALE_CLIQUE=%q: want the most nodes per clique, e.g. 18", v)
		}
		perClique = n
	}
	idle := 10 * time.Second
	if v := os.Getenv("SIMNODE_CD_SCALE_IDLE"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 {
			t.Fatalf("SIMNODE_CD_SCALE_IDLE=%q: want a duration, e.g. 10s", v)
		}
		idle = d
	}
	// Inherited by each size's cluster-launcher.
	t.Setenv(harness.EnvAuditLog, "1")
	floor := os.Getenv("SIMNODE_CD_SCALE_FLOOR") != "0"
	nice := 0
	if v := os.Getenv("SIMNODE_CD_SCALE_NODE_NICE"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 || n > 19 {
			t.Fatalf("SIMNODE_CD_SCALE_NODE_NICE=%q: want the node processes' nice value, 0 to 19", v)
		}
		nice = n
	}
	var results []cdScaleResult
	runs := map[int]int{} // size -> runs so far
	for _, n := range sizes {
		// The floor and ours take turns going first over a size's runs, so
		// that neither always runs on the other's leftovers.
		floorFirst := runs[n]%2 == 0
		runs[n]++
		t.Run(fmt.Sprintf("nodes=%d", n), func(t *testing.T) {
			r := runCDScale(t, n, perClique, idle, nice, floor, floorFirst)
			r.print()
			r.write(t)
			results = append(results, r)
		})
	}
	fmt.Println("cd scale summary (s from submission; requests in that window; floor: the same shape with the test driver):")
	fmt.Printf("  | %6s %8s %10s %9s %8s %7s %10s %9s %10s %11s %10s %10s %9s\n", "nodes", "cliques", "prepared", "running",
		"floor", "ratio", "daemons", "cd ready", "requests", "node side", "driver/n", "controller", "machine")
	for _, r := range results {
		fmt.Printf("  | %6d %8d %10.2f %9.2f %8.2f %7.2f %10.2f %9.2f %10d %11d %10.1f %10d %9s\n", r.Nodes, r.Cliques,
			r.Prepared.Seconds(), r.Running.Seconds(), r.Floor.Running.Seconds(), r.ratioToFloor(), r.DaemonsReady.Seconds(),
			r.CDReady.Seconds(), r.Audit.total(), r.Audit.nodeSide(), r.driverRequestsPerNode(),
			r.Audit.byClient["controller"], r.LoadAvg)
	}
}

// cdScaleResult is one size's figures.
type cdScaleResult struct {
	Nodes, Cliques int
	// From the submission (the domain's create call) to ...
	Submitted    time.Duration // the last worker pod created
	Templates    time.Duration // the workload claim template (controller) seen
	Prepared     time.Duration // the last channel claim prepared (plugin log stamps)
	Running      time.Duration // the last worker Running
	DaemonsReady time.Duration // the last daemon pod Ready
	CDReady      time.Duration // status Ready with N nodes
	Window       time.Duration // submission to everything above
	// PreparedP50 is the median of the nodes' channel prepares.
	PreparedP50 time.Duration
	// ControllerRetries counts the controller's failed reconciles in the
	// window, ControllerErrors their most common errors.
	ControllerRetries int
	ControllerErrors  string
	// Stages are each node's way there, stage by stage.
	Stages []stageFigure
	// Metrics is apiserver_request_total over the window, by "VERB resource".
	Metrics map[string]float64
	Audit   auditCounts
	// Idle is the audit count over the idle window before the submission.
	Idle       auditCounts
	IdleWindow time.Duration
	LoadAvg    string
	// CPU seconds spent in the window by program (process name), this
	// machine's processes: who the 2 cores worked for.
	CPU map[string]float64
	// kube-controller-manager's and kube-scheduler's client QPS
	// (CLUSTER_CONTROLLER_QPS for the launcher; "default": 20 and 50).
	ControlPlaneQPS string
	// NodeNice is the simulated nodes' nice value (SIMNODE_CD_SCALE_NODE_NICE).
	NodeNice int
	// NodeMonitorGrace is kube-controller-manager's node monitor grace
	// period (CLUSTER_NODE_MONITOR_GRACE_PERIOD for the launcher; "default").
	NodeMonitorGrace string
	// Floor is the floor's run on the same cluster (FloorRan false when
	// SIMNODE_CD_SCALE_FLOOR=0), before ours when FloorFirst.
	Floor      floorResult
	FloorRan   bool
	FloorFirst bool
}

// auditCounts are requests counted from the audit log, per client group
// and per client group and "VERB resource".
type auditCounts struct {
	byClient map[string]int
	byVerb   map[string]map[string]int // client -> "verb resource" -> count
	nodes    map[string]bool           // nodes seen in node-side requests
	// latency holds the server-side durations (received to answered) of
	// completed non-watch requests by client and "verb resource"; failed
	// counts the answers >= 400 by client and "verb resource code".
	latency map[string]map[string][]time.Duration
	failed  map[string]map[string]int
}

func (a auditCounts) total() int {
	n := 0
	for _, c := range a.byClient {
		n += c
	}
	return n
}

// nodeClients are the client groups that run on every node.
var nodeClients = []string{"kubelet", "cd-plugin", "cd-daemon", "gpu-plugin"}

func (a auditCounts) nodeSide() int {
	n := 0
	for _, c := range nodeClients {
		n += a.byClient[c]
	}
	return n
}

// driverClients are the client groups of the driver's own components.
var driverClients = []string{"cd-plugin", "cd-daemon", "controller"}

// driverRejections counts the answers 409 (conflict) and 429 (too many
// requests) the API server gave the driver's components.
func (a auditCounts) driverRejections() int {
	n := 0
	for _, c := range driverClients {
		for what, count := range a.failed[c] {
			if strings.HasSuffix(what, " 409") || strings.HasSuffix(what, " 429") {
				n += count
			}
		}
	}
	return n
}

// ratioToFloor is ours over the floor, submission to all workers Running
// (0 without a floor run).
func (r cdScaleResult) ratioToFloor() float64 {
	if !r.FloorRan || r.Floor.Running <= 0 {
		return 0
	}
	return r.Running.Seconds() / r.Floor.Running.Seconds()
}

// driverRequestsPerNode is the requests of the driver's components (the
// plugins, the daemons, the controller) in the window, per node.
func (r cdScaleResult) driverRequestsPerNode() float64 {
	n := 0
	for _, c := range driverClients {
		n += r.Audit.byClient[c]
	}
	return float64(n) / float64(r.Nodes)
}

func (a auditCounts) controlPlane() int {
	return a.byClient["kube-controller-manager"] + a.byClient["kube-scheduler"] + a.byClient["kube-apiserver"]
}

func runCDScale(t *testing.T, n, perClique int, idle time.Duration, nice int, floor, floorFirst bool) cdScaleResult {
	// 20 minutes, and 5 s more per node: starting the plugin pods alone takes
	// ~2.5 s per node at 256 nodes on two cores. SIMNODE_CD_SCALE_TIMEOUT
	// sets it instead (a try at a size this machine may not manage).
	limit := 20*time.Minute + time.Duration(n)*5*time.Second
	if v := os.Getenv("SIMNODE_CD_SCALE_TIMEOUT"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			t.Fatalf("SIMNODE_CD_SCALE_TIMEOUT=%q: want a duration, e.g. 15m", v)
		}
		limit = d
	}
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	var cliques []int
	for left := n; left > 0; left -= perClique {
		cliques = append(cliques, min(left, perClique))
	}
	start := time.Now()
	c := startCDCluster(ctx, t, cdClusterOptions{Cliques: cliques, TestDriver: floor, NodeNice: nice})
	if floor {
		installFloorDriver(ctx, t, c.Client, n)
	}
	t.Logf("%d nodes in cliques %v: cluster up in %.1f s", n, cliques, time.Since(start).Seconds())
	for _, node := range c.Env.nodes.Nodes {
		if got, err := node.Nice(); err != nil || got != nice {
			t.Fatalf("node %s: nice %d (%v), want %d (SIMNODE_CD_SCALE_NODE_NICE)", node.Config.Name, got, err, nice)
		}
	}
	checkPluginWatchers(t, c.Env)
	r := cdScaleResult{Nodes: n, Cliques: len(cliques), IdleWindow: idle, NodeNice: nice, FloorRan: floor, FloorFirst: floorFirst}

	// This test's own client: no client-side limit (client-go's default of
	// 5 per second would make submitting N pods the slowest part), and a
	// user agent of its own for the audit log.
	restConfig, err := clientcmd.BuildConfigFromFlags("", c.Env.cp.Kubeconfig)
	must(t, "rest config", err)
	restConfig.QPS, restConfig.Burst, restConfig.UserAgent = 1000, 1000, cdScaleUserAgent
	client, err := kubernetes.NewForConfig(restConfig)
	must(t, "client", err)
	must(t, "namespace", create(ctx, client.CoreV1().Namespaces(),
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: cdScaleNamespace}}))
	auditPath := c.Env.cp.AuditLogPath()
	if floor && floorFirst {
		r.Floor = runFloor(ctx, t, c, client, auditPath)
		removeWorkload(ctx, t, client, floorNamespace, map[string]string{floorNamespace: ""})
	}
	rec := startScaleRecorder(t, c, client, n, cdScaleWorkload)

	// Idle: what the cluster asks of the API server with nothing to do (a
	// measuring window, not a synchronisation).
	idleFrom := time.Now()
	time.Sleep(idle)
	idleTo := time.Now()

	metricsBefore := apiServerRequests(ctx, t, client)
	cpuBefore := cpuByProgram()
	t0 := time.Now()
	cd := c.CreateComputeDomain(ctx, t, cdSpec{Namespace: cdScaleNamespace, Name: cdScaleDomain, NumNodes: n})
	fast := *c.cdEnvironment
	fast.client = client
	workers := map[string]string{} // node -> pod
	for i, node := range c.Nodes() {
		name := fmt.Sprintf("worker-%d", i)
		fast.createWorker(ctx, t, cdScaleNamespace, name, node, cd.channelTemplate)
		workers[node] = name
	}
	r.Submitted = time.Since(t0)
	done := rec.wait(ctx, t, cd, t0)
	r.Window = done.Sub(t0)
	r.CPU = cpuSince(cpuBefore, cpuByProgram())
	metricsAfter := apiServerRequests(ctx, t, client)
	r.Metrics = map[string]float64{}
	for k, v := range metricsAfter {
		if d := v - metricsBefore[k]; d > 0 {
			r.Metrics[k] = d
		}
	}
	r.Templates = rec.templateAt.Sub(t0)
	rec.mu.Lock()
	r.Running = lastOf(rec.stages[stageWorkerRunning]).Sub(t0)
	r.DaemonsReady = lastOf(rec.stages[stageDaemonReady]).Sub(t0)
	r.CDReady = rec.cdReadyAt.Sub(t0)
	rec.mu.Unlock()

	// The plugins' log stamps of each worker's prepared claim.
	var prepared []time.Duration
	for node, pod := range workers {
		claim := fast.workerClaim(ctx, t, cdScaleNamespace, pod)
		plog := fast.containerLog(ctx, t, chartNamespace, c.pluginPods[node], cdPluginContainer)
		line, ok := firstLine(plog, `"claim prepared"`, cdScaleNamespace+"/"+claim)
		if !ok {
			t.Errorf("plugin on %s: no \"claim prepared\" for %s/%s in its log", node, cdScaleNamespace, claim)
			continue
		}
		prepared = append(prepared, line.at.Sub(t0))
		rec.note(func() { rec.markLocked(stagePrepared, node, line.at) })
	}
	r.Stages = rec.stageFigures(t0)
	sort.Slice(prepared, func(i, j int) bool { return prepared[i] < prepared[j] })
	if len(prepared) > 0 {
		r.Prepared = prepared[len(prepared)-1]
		r.PreparedP50 = prepared[(len(prepared)-1)/2]
	}

	// The controller's failed reconciles in the window (each is retried
	// after a per-domain backoff that doubles, so they cost time).
	controller := c.ControllerPod(ctx, t)
	clog := fast.containerLog(ctx, t, chartNamespace, controller.Name, "compute-domain")
	errs := map[string]int{}
	for _, l := range clog {
		if !l.at.Before(t0) && !l.at.After(done) && strings.Contains(l.text, `"reconcile failed`) {
			r.ControllerRetries++
			errs[logField(l.text, "err")]++
		}
	}
	r.ControllerErrors = topCounts(errs, 3)
	if dir := os.Getenv("SIMNODE_CD_SCALE_LOGS"); dir != "" {
		saveScaleLogs(ctx, t, &fast, filepath.Join(dir, fmt.Sprintf("nodes-%d", n)), controller.Name)
		// The API server's audit log too: who asked what, when.
		if data, err := os.ReadFile(auditPath); err == nil {
			_ = os.WriteFile(filepath.Join(dir, fmt.Sprintf("nodes-%d", n), "audit.log"), data, 0o644)
		}
	}

	r.Idle = countAudit(t, auditPath, idleFrom, idleTo)
	r.Audit = countAudit(t, auditPath, t0, done)
	if floor && !floorFirst {
		removeWorkload(ctx, t, client, cdScaleNamespace,
			map[string]string{cdScaleNamespace: "", chartNamespace: cdLabelKey + "=" + string(cd.uid)})
		r.Floor = runFloor(ctx, t, c, client, auditPath)
	}
	if data, err := os.ReadFile("/proc/loadavg"); err == nil {
		r.LoadAvg = strings.Join(strings.Fields(string(data))[:3], " ")
	}
	r.NodeMonitorGrace = "default"
	if v := os.Getenv("CLUSTER_NODE_MONITOR_GRACE_PERIOD"); v != "" && v != "0" {
		r.NodeMonitorGrace = v
	}
	r.ControlPlaneQPS = "default"
	if v := os.Getenv("CLUSTER_CONTROLLER_QPS"); v != "" && v != "0" {
		r.ControlPlaneQPS = v
	}
	return r
}

// The stages of one node's part of the workload, in the order they happen
// (scaleRecorder keys its times by these).
const (
	stageWorkerClaim     = "worker claim made" // kube-controller-manager made the worker's claim (pod status)
	stageWorkerScheduled = "worker scheduled"  // the scheduler bound the worker (claim allocated)
	stageNodeLabelled    = "node labelled"     // the controller's (or plugin's) domain label on the Node
	stageDaemonCreated   = "daemon created"    // the DaemonSet controller created the node's daemon pod
	stageDaemonClaim     = "daemon claim made" // kube-controller-manager made the daemon's claim (pod status)
	stageDaemonScheduled = "daemon scheduled"  // the domain's DaemonSet pod bound to the node
	stageDaemonRunning   = "daemon running"    // its container started
	stageEntry           = "clique entry"      // the daemon's entry in its clique
	stageIndex           = "index assigned"    // the controller's index in that entry
	stageEntryReady      = "entry Ready"       // the daemon's Ready status in the entry
	stagePrepared        = "channel prepared"  // the plugin's "claim prepared" (log stamp)
	stageWorkerRunning   = "worker Running"    // the worker's container started
	stageDaemonReady     = "daemon pod Ready"  // the kubelet's readiness probe passed
	stageStatusReady     = "status node Ready" // the node Ready in the domain's status.nodes
)

var cdScaleStages = []string{stageWorkerClaim, stageWorkerScheduled, stageNodeLabelled, stageDaemonCreated,
	stageDaemonClaim, stageDaemonScheduled, stageDaemonRunning,
	stageEntry, stageIndex, stageEntryReady, stagePrepared, stageWorkerRunning, stageDaemonReady, stageStatusReady}

// saveScaleLogs writes the logs of the driver's pods (controller, plugins,
// daemons) into dir, for a look at a slow run (SIMNODE_CD_SCALE_LOGS).
func saveScaleLogs(ctx context.Context, t *testing.T, e *cdEnvironment, dir, controller string) {
	t.Helper()
	must(t, "logs folder", os.MkdirAll(dir, 0o755))
	pods, err := e.client.CoreV1().Pods(chartNamespace).List(ctx, metav1.ListOptions{})
	must(t, "driver pods", err)
	for _, p := range pods.Items {
		for _, container := range p.Spec.Containers {
			raw, err := e.client.CoreV1().Pods(chartNamespace).GetLogs(p.Name,
				&corev1.PodLogOptions{Container: container.Name, Timestamps: true}).DoRaw(ctx)
			if err != nil {
				t.Logf("log of %s/%s: %v", p.Name, container.Name, err)
				continue
			}
			name := fmt.Sprintf("%s_%s_%s.log", p.Spec.NodeName, p.Name, container.Name)
			must(t, "save log", os.WriteFile(filepath.Join(dir, name), raw, 0o644))
		}
	}
	t.Logf("logs of the driver's pods (controller %s) in %s", controller, dir)
}

// checkPluginWatchers fails when a node's kubelet could not start its
// plugin watcher: it would never register the node's DRA plugins and the
// node's claims would wait forever ("DRA driver ... is not registered"),
// while the plugin itself runs and publishes. Seen when this machine ran out
// of inotify instances (fs.inotify.max_user_instances, per user: every
// simulated node and plugin of every test on the machine takes some).
func checkPluginWatchers(t *testing.T, env *environment) {
	t.Helper()
	const failed = "(plugin watcher) starts failed"
	for _, node := range env.nodes.Nodes {
		data, err := os.ReadFile(node.LogPath())
		must(t, "node log", err)
		for _, line := range strings.Split(string(data), "\n") {
			if strings.Contains(line, failed) {
				limit, _ := os.ReadFile("/proc/sys/fs/inotify/max_user_instances")
				t.Fatalf("node %s: its kubelet's plugin watcher did not start, so no DRA plugin can register there:\n%s\n"+
					"\"too many open files\" here means this machine's inotify instances ran out "+
					"(fs.inotify.max_user_instances=%s, shared by every process of the user): run fewer simulated nodes "+
					"at once, or raise it (sysctl fs.inotify.max_user_instances=8192)", node.Config.Name, line,
					strings.TrimSpace(string(limit)))
			}
		}
	}
}

// scaleRecorder notes, from informers started before the submission, when
// each stage was first seen on each node, and when the domain was Ready.
// Safe for concurrent use.
type scaleRecorder struct {
	n int
	w scaleWorkload

	changeNotifier
	stages     map[string]map[string]time.Time // stage -> node -> first seen
	templateAt time.Time
	cdUID      string
	cdReadyAt  time.Time
	cdStatus   cdStatus
}

// scaleWorkload says which pods a scaleRecorder follows: ours (the
// domain's workers and the controller's IMEX daemons) or the floor's
// (computedomain_floor_bench_test.go: the same shape without a domain).
type scaleWorkload struct {
	workerNamespace string
	daemonNamespace string
	daemonLabel     string // a daemon pod has this label (any value)
	domain          bool   // also wait for the domain cdScaleDomain to be Ready
}

var cdScaleWorkload = scaleWorkload{workerNamespace: cdScaleNamespace, daemonNamespace: chartNamespace,
	daemonLabel: cdLabelKey, domain: true}

func startScaleRecorder(t *testing.T, c *cdCluster, client kubernetes.Interface, n int, w scaleWorkload) *scaleRecorder {
	t.Helper()
	rec := &scaleRecorder{n: n, w: w, changeNotifier: newChangeNotifier(), stages: map[string]map[string]time.Time{}}
	for _, s := range cdScaleStages {
		rec.stages[s] = map[string]time.Time{}
	}
	stop := make(chan struct{})
	t.Cleanup(func() { close(stop) })

	factory := informers.NewSharedInformerFactoryWithOptions(client, 0)
	pods := factory.Core().V1().Pods().Informer()
	_, err := pods.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { rec.onPod(obj) },
		UpdateFunc: func(_, obj any) { rec.onPod(obj) },
	})
	must(t, "pod handler", err)
	nodes := factory.Core().V1().Nodes().Informer()
	_, err = nodes.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { rec.onNode(obj) },
		UpdateFunc: func(_, obj any) { rec.onNode(obj) },
	})
	must(t, "node handler", err)
	templates := factory.Resource().V1().ResourceClaimTemplates().Informer()
	_, err = templates.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: func(obj any) {
		if tmpl, ok := obj.(*resourceapi.ResourceClaimTemplate); ok && tmpl.Namespace == w.workerNamespace {
			rec.note(func() {
				if rec.templateAt.IsZero() {
					rec.templateAt = time.Now()
				}
			})
		}
	}})
	must(t, "template handler", err)
	factory.Start(stop)

	domains := dynamicinformer.NewFilteredDynamicSharedInformerFactory(c.Dyn, 0, cdScaleNamespace, nil)
	_, err = domains.ForResource(cdGVR).Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { rec.onDomain(obj) },
		UpdateFunc: func(_, obj any) { rec.onDomain(obj) },
	})
	must(t, "domain handler", err)
	domains.Start(stop)
	cliques := dynamicinformer.NewFilteredDynamicSharedInformerFactory(c.Dyn, 0, chartNamespace, nil)
	_, err = cliques.ForResource(cliqueGVR).Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { rec.onClique(obj) },
		UpdateFunc: func(_, obj any) { rec.onClique(obj) },
	})
	must(t, "clique handler", err)
	cliques.Start(stop)
	waitBenchInformersSynced(t, factory, domains, cliques)
	return rec
}

// changeNotifier lets a benchmark's recorder, fed by informer handlers,
// wake a waiter on every change: note runs f under mu, then closes changed
// and replaces it.
type changeNotifier struct {
	mu      sync.Mutex
	changed chan struct{} // closed and replaced on every change
}

func newChangeNotifier() changeNotifier { return changeNotifier{changed: make(chan struct{})} }

func (n *changeNotifier) note(f func()) {
	n.mu.Lock()
	defer n.mu.Unlock()
	f()
	close(n.changed)
	n.changed = make(chan struct{})
}

// waitBenchInformersSynced fails the test unless every informer of the
// factories synced within a minute.
func waitBenchInformersSynced(t *testing.T, factory informers.SharedInformerFactory,
	dynamic ...dynamicinformer.DynamicSharedInformerFactory) {
	t.Helper()
	syncCtx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for typ, ok := range factory.WaitForCacheSync(syncCtx.Done()) {
		if !ok {
			t.Fatalf("the benchmark's %v informer did not sync", typ)
		}
	}
	for _, f := range dynamic {
		for gvr, ok := range f.WaitForCacheSync(syncCtx.Done()) {
			if !ok {
				t.Fatalf("the benchmark's %s informer did not sync", gvr.Resource)
			}
		}
	}
}

// markLocked records the first time stage was seen on node.
func (rec *scaleRecorder) markLocked(stage, node string, at time.Time) {
	if _, seen := rec.stages[stage][node]; !seen && node != "" {
		rec.stages[stage][node] = at
	}
}

func (rec *scaleRecorder) onPod(obj any) {
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	now := time.Now()
	daemon := p.Namespace == rec.w.daemonNamespace && p.Labels[rec.w.daemonLabel] != ""
	worker := !daemon && p.Namespace == rec.w.workerNamespace
	if node := intendedNode(p); node != "" {
		switch {
		case worker && len(p.Status.ResourceClaimStatuses) > 0:
			rec.note(func() { rec.markLocked(stageWorkerClaim, node, now) })
		case daemon:
			rec.note(func() {
				rec.markLocked(stageDaemonCreated, node, now)
				if len(p.Status.ResourceClaimStatuses) > 0 {
					rec.markLocked(stageDaemonClaim, node, now)
				}
			})
		}
	}
	if p.Spec.NodeName == "" {
		return
	}
	node := p.Spec.NodeName
	switch {
	case worker:
		rec.note(func() {
			rec.markLocked(stageWorkerScheduled, node, now)
			if p.Status.Phase == corev1.PodRunning {
				rec.markLocked(stageWorkerRunning, node, now)
			}
		})
	case daemon:
		rec.note(func() {
			rec.markLocked(stageDaemonScheduled, node, now)
			if p.Status.Phase == corev1.PodRunning {
				rec.markLocked(stageDaemonRunning, node, now)
			}
			if podReady(p) {
				rec.markLocked(stageDaemonReady, node, now)
			}
		})
	}
}

// intendedNode is the node a pod is for before it is bound: a worker's
// hostname node selector, a DaemonSet pod's node affinity (matchFields
// metadata.name), else its spec.nodeName.
func intendedNode(p *corev1.Pod) string {
	if p.Spec.NodeName != "" {
		return p.Spec.NodeName
	}
	if node := p.Spec.NodeSelector["kubernetes.io/hostname"]; node != "" {
		return node
	}
	if a := p.Spec.Affinity; a != nil && a.NodeAffinity != nil && a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution != nil {
		for _, term := range a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms {
			for _, field := range term.MatchFields {
				if field.Key == "metadata.name" && len(field.Values) == 1 {
					return field.Values[0]
				}
			}
		}
	}
	return ""
}

func (rec *scaleRecorder) onNode(obj any) {
	node, ok := obj.(*corev1.Node)
	if !ok || node.Labels[cdLabelKey] == "" {
		return
	}
	now := time.Now()
	rec.note(func() {
		if node.Labels[cdLabelKey] == rec.cdUID {
			rec.markLocked(stageNodeLabelled, node.Name, now)
		}
	})
}

func (rec *scaleRecorder) onClique(obj any) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return
	}
	now := time.Now()
	entries := cliqueEntries(u)
	rec.note(func() {
		if rec.cdUID == "" || !strings.HasPrefix(u.GetName(), rec.cdUID+".") {
			return
		}
		for node, e := range entries {
			rec.markLocked(stageEntry, node, now)
			if e.Index != nil {
				rec.markLocked(stageIndex, node, now)
			}
			if e.Status == "Ready" {
				rec.markLocked(stageEntryReady, node, now)
			}
		}
	})
}

func (rec *scaleRecorder) onDomain(obj any) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok || u.GetName() != cdScaleDomain {
		return
	}
	now := time.Now()
	s := parseCDStatus(u)
	rec.note(func() {
		rec.cdUID = string(u.GetUID())
		rec.cdStatus = s
		for node, ns := range s.Nodes {
			if ns.Status == "Ready" {
				rec.markLocked(stageStatusReady, node, now)
			}
		}
		if rec.cdReadyAt.IsZero() && s.Status == "Ready" && len(s.Nodes) == rec.n {
			rec.cdReadyAt = now
		}
	})
}

func lastOf(times map[string]time.Time) time.Time {
	var out time.Time
	for _, at := range times {
		if at.After(out) {
			out = at
		}
	}
	return out
}

// wait waits, on the informers' events, until every worker runs, every
// daemon pod is Ready and the domain is Ready with n nodes; returns the
// moment the last of these was seen.
func (rec *scaleRecorder) wait(ctx context.Context, t *testing.T, cd *computeDomain, t0 time.Time) time.Time {
	t.Helper()
	if cd != nil {
		rec.note(func() { rec.cdUID = string(cd.uid) }) // its label may come before the informer's event
	}
	for {
		rec.mu.Lock()
		running, ready := len(rec.stages[stageWorkerRunning]), len(rec.stages[stageDaemonReady])
		cdReady, status, ch := rec.cdReadyAt, rec.cdStatus, rec.changed
		var last time.Time
		for _, at := range []time.Time{lastOf(rec.stages[stageWorkerRunning]), lastOf(rec.stages[stageDaemonReady]), cdReady} {
			if at.After(last) {
				last = at
			}
		}
		rec.mu.Unlock()
		if running == rec.n && ready == rec.n && (!rec.w.domain || !cdReady.IsZero()) {
			return last
		}
		select {
		case <-ctx.Done():
			for _, st := range rec.stageFigures(t0) {
				t.Logf("stage %-18s reached on %d of %d nodes, median %.2f s, last %.2f s from the submission",
					st.Stage, st.Nodes, rec.n, st.P50.Seconds(), st.Last.Seconds())
			}
			if cd == nil {
				t.Fatalf("%s on %d nodes: %d workers Running, %d daemons Ready: %v", rec.w.workerNamespace, rec.n, running, ready, ctx.Err())
			}
			t.Fatalf("domain %s/%s on %d nodes: %d workers Running, %d daemons Ready, domain status %q with %d nodes: %v",
				cd.namespace, cd.name, rec.n, running, ready, status.Status, len(status.Nodes), ctx.Err())
		case <-ch:
		}
	}
}

// stageFigures returns, per stage in order, the median and the last time
// from t0 over the nodes (and how many nodes reached it).
func (rec *scaleRecorder) stageFigures(t0 time.Time) []stageFigure {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	var out []stageFigure
	for _, s := range cdScaleStages {
		var ds []time.Duration
		for _, at := range rec.stages[s] {
			ds = append(ds, at.Sub(t0))
		}
		if len(ds) == 0 {
			out = append(out, stageFigure{Stage: s})
			continue
		}
		sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
		out = append(out, stageFigure{Stage: s, Nodes: len(ds), P50: ds[(len(ds)-1)/2], Last: ds[len(ds)-1]})
	}
	return out
}

// stageFigure is one stage's times over the nodes, from the submission.
type stageFigure struct {
	Stage     string
	Nodes     int
	P50, Last time.Duration
}

// apiServerRequests scrapes the API server's apiserver_request_total and
// sums it by "VERB resource[/subresource]" (codes, scopes and versions
// added up). Counted when a request completes (a watch when it ends).
func apiServerRequests(ctx context.Context, t *testing.T, client kubernetes.Interface) map[string]float64 {
	t.Helper()
	raw, err := client.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	must(t, "API server /metrics", err)
	out := map[string]float64{}
	for _, line := range strings.Split(string(raw), "\n") {
		rest, ok := strings.CutPrefix(line, "apiserver_request_total{")
		if !ok {
			continue
		}
		labels, value, ok := strings.Cut(rest, "} ")
		if !ok {
			continue
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(value), 64)
		if err != nil {
			continue
		}
		l := promLabels(labels)
		key := l["verb"] + " " + l["resource"]
		if l["subresource"] != "" {
			key += "/" + l["subresource"]
		}
		out[key] += v
	}
	return out
}

// promLabels parses `a="x",b="y"` (no escaped quotes in these labels).
func promLabels(s string) map[string]string {
	out := map[string]string{}
	for _, kv := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(kv, "=")
		if ok {
			out[k] = strings.Trim(v, `"`)
		}
	}
	return out
}

// auditEvent is the part of an audit.k8s.io/v1 Event the benchmark reads.
type auditEvent struct {
	AuditID string `json:"auditID"`
	Verb    string `json:"verb"`
	User    struct {
		Username string              `json:"username"`
		Extra    map[string][]string `json:"extra"`
	} `json:"user"`
	UserAgent string `json:"userAgent"`
	ObjectRef *struct {
		Resource    string `json:"resource"`
		Subresource string `json:"subresource"`
	} `json:"objectRef"`
	RequestReceived time.Time `json:"requestReceivedTimestamp"`
	Stage           string    `json:"stage"`
	StageTimestamp  time.Time `json:"stageTimestamp"`
	ResponseStatus  *struct {
		Code int `json:"code"`
	} `json:"responseStatus"`
}

// auditClient names the client group of a request: kubelet, cd-plugin,
// cd-daemon, gpu-plugin (node side); controller (compute-domain
// controller); webhook; kube-controller-manager, kube-scheduler,
// kube-apiserver (control plane); bench (this test); other. node is the node it came from, when
// known.
func auditClient(e *auditEvent) (client, node string) {
	node = strings.Join(e.User.Extra["authentication.kubernetes.io/node-name"], "")
	user := e.User.Username
	switch {
	case strings.HasPrefix(e.UserAgent, "simnode-kubelet/"):
		return "kubelet", strings.TrimPrefix(e.UserAgent, "simnode-kubelet/")
	case strings.HasPrefix(e.UserAgent, cdScaleUserAgent) || user == "admin":
		// This test's clients (the environment's use the admin
		// kubeconfig too, with the test binary's user agent).
		return "bench", ""
	case user == "system:apiserver":
		return "kube-apiserver", "" // its own loopback client (admission)
	case user == "system:kube-scheduler":
		return "kube-scheduler", ""
	case user == "system:kube-controller-manager" || strings.HasPrefix(user, "system:serviceaccount:kube-system:"):
		return "kube-controller-manager", ""
	case strings.HasPrefix(user, "system:serviceaccount:"+floorDriverNamespace+":"):
		return "floor-driver", node
	case strings.HasPrefix(user, "system:serviceaccount:"+chartNamespace+":"):
		sa := strings.TrimPrefix(user, "system:serviceaccount:"+chartNamespace+":")
		switch {
		case strings.Contains(sa, "compute-domain-daemon"):
			return "cd-daemon", node
		case strings.Contains(sa, "controller"):
			return "controller", ""
		case strings.Contains(sa, "webhook"):
			return "webhook", ""
		case strings.Contains(sa, "kubeletplugin"):
			// One service account for both plugins; the GPU plugin sets
			// its own user agent.
			if strings.HasPrefix(e.UserAgent, "gpu-kubelet-plugin") {
				return "gpu-plugin", node
			}
			return "cd-plugin", node
		}
	}
	return "other", ""
}

// countAudit counts the audit log's requests received in [from, to], each
// once (a request has up to two events: ResponseStarted for watches,
// ResponseComplete).
func countAudit(t *testing.T, path string, from, to time.Time) auditCounts {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatalf("the API server's audit log (%s=1 was set for the control plane): %v", harness.EnvAuditLog, err)
	}
	defer f.Close()
	counts := auditCounts{byClient: map[string]int{}, byVerb: map[string]map[string]int{}, nodes: map[string]bool{},
		latency: map[string]map[string][]time.Duration{}, failed: map[string]map[string]int{}}
	seen := map[string]bool{}
	complete := map[string]bool{}
	rd := bufio.NewReaderSize(f, 1<<20)
	for {
		line, err := rd.ReadBytes('\n')
		if len(line) > 0 {
			var e auditEvent
			inWindow := json.Unmarshal(line, &e) == nil && !e.RequestReceived.Before(from) && !e.RequestReceived.After(to)
			if inWindow && e.Stage == "ResponseComplete" && e.Verb != "watch" && !complete[e.AuditID] {
				complete[e.AuditID] = true
				client, _ := auditClient(&e)
				what := e.Verb
				if e.ObjectRef != nil {
					what += " " + e.ObjectRef.Resource
				}
				if counts.latency[client] == nil {
					counts.latency[client] = map[string][]time.Duration{}
					counts.failed[client] = map[string]int{}
				}
				counts.latency[client][what] = append(counts.latency[client][what], e.StageTimestamp.Sub(e.RequestReceived))
				if e.ResponseStatus != nil && e.ResponseStatus.Code >= 400 {
					counts.failed[client][fmt.Sprintf("%s %d", what, e.ResponseStatus.Code)]++
				}
			}
			if inWindow && !seen[e.AuditID] {
				seen[e.AuditID] = true
				client, node := auditClient(&e)
				counts.byClient[client]++
				what := e.Verb
				if e.ObjectRef != nil {
					what += " " + e.ObjectRef.Resource
					if e.ObjectRef.Subresource != "" {
						what += "/" + e.ObjectRef.Subresource
					}
				}
				if counts.byVerb[client] == nil {
					counts.byVerb[client] = map[string]int{}
				}
				counts.byVerb[client][what]++
				if node != "" {
					counts.nodes[node] = true
				}
			}
		}
		if err == io.EOF {
			break
		}
		must(t, "read "+path, err)
	}
	return counts
}

func (r cdScaleResult) print() {
	s := func(d time.Duration) string { return fmt.Sprintf("%.2f s", d.Seconds()) }
	fmt.Printf("cd scale: %d nodes (%d cliques), from submitting the domain and %d workers (all created after %s):\n",
		r.Nodes, r.Cliques, r.Nodes, s(r.Submitted))
	fmt.Printf("  workload claim template seen %s; channel claims prepared: median %s, last %s; workers Running %s; "+
		"daemons Ready %s; domain Ready %s; machine load %s; control plane client QPS %s\n",
		s(r.Templates), s(r.PreparedP50), s(r.Prepared), s(r.Running), s(r.DaemonsReady), s(r.CDReady), r.LoadAvg,
		r.ControlPlaneQPS)
	fmt.Printf("  stages, from the submission (median / last over the nodes):")
	for _, st := range r.Stages {
		fmt.Printf(" %s %s / %s", st.Stage, s(st.P50), s(st.Last))
		if st.Nodes != r.Nodes {
			fmt.Printf(" (%d nodes)", st.Nodes)
		}
		fmt.Print(";")
	}
	fmt.Println()
	fmt.Printf("  CPU seconds in the window by program (%s of wall time on %d cores):", s(r.Window), runtime.NumCPU())
	programs := make([]string, 0, len(r.CPU))
	for p := range r.CPU {
		programs = append(programs, p)
	}
	sort.Slice(programs, func(i, j int) bool { return r.CPU[programs[i]] > r.CPU[programs[j]] })
	for i, p := range programs {
		if i == 16 {
			break
		}
		fmt.Printf(" %s %.2f;", p, r.CPU[p])
	}
	fmt.Println()
	fmt.Printf("  controller: %d failed reconciles in the window (retried with backoff) %s\n", r.ControllerRetries, r.ControllerErrors)
	fmt.Printf("  API requests in those %s (audit log): %d in all; node side %d (%.1f per node); by client:",
		s(r.Window), r.Audit.total(), r.Audit.nodeSide(), float64(r.Audit.nodeSide())/float64(r.Nodes))
	clients := make([]string, 0, len(r.Audit.byClient))
	for c := range r.Audit.byClient {
		clients = append(clients, c)
	}
	sort.Strings(clients)
	for _, c := range clients {
		fmt.Printf(" %s %d", c, r.Audit.byClient[c])
	}
	fmt.Println()
	for _, c := range clients {
		fmt.Printf("  - %-24s %s\n", c, topCounts(r.Audit.byVerb[c], 8))
		var lat []string
		for what, ds := range r.Audit.latency[c] {
			if strings.HasPrefix(what, "get ") || strings.HasPrefix(what, "list ") {
				continue
			}
			sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
			lat = append(lat, fmt.Sprintf("%s p50 %.0f ms max %.0f ms", what,
				float64(ds[(len(ds)-1)/2].Microseconds())/1000, float64(ds[len(ds)-1].Microseconds())/1000))
		}
		sort.Strings(lat)
		if len(lat) > 0 {
			fmt.Printf("  ~ %-24s server time of writes: %s\n", c, strings.Join(lat, "; "))
		}
		if len(r.Audit.failed[c]) > 0 {
			fmt.Printf("  ~ %-24s failed answers: %s\n", c, topCounts(r.Audit.failed[c], 6))
		}
	}
	var metricsTotal float64
	asInt := map[string]int{}
	for k, v := range r.Metrics {
		metricsTotal += v
		asInt[k] = int(v)
	}
	fmt.Printf("  apiserver_request_total over the window (completed requests, watches when they end): %.0f: %s\n",
		metricsTotal, topCounts(asInt, 12))
	fmt.Printf("  idle before (%s): %d requests, %.2f per node per second on the node side\n", s(r.IdleWindow),
		r.Idle.total(), float64(r.Idle.nodeSide())/float64(r.Nodes)/r.IdleWindow.Seconds())
	fmt.Printf("  driver: %.2f requests per node (plugin %.2f, daemon %.2f, controller %.2f); %d answers 409 or 429; "+
		"controller CPU %.3f s per node; domain Ready %s after the last channel prepared\n", r.driverRequestsPerNode(),
		float64(r.Audit.byClient["cd-plugin"])/float64(r.Nodes), float64(r.Audit.byClient["cd-daemon"])/float64(r.Nodes),
		float64(r.Audit.byClient["controller"])/float64(r.Nodes), r.Audit.driverRejections(),
		r.CPU["compute-domain-controller"]/float64(r.Nodes), s(r.CDReady-r.Prepared))
	if r.FloorRan {
		order := "after ours"
		if r.FloorFirst {
			order = "before ours"
		}
		fmt.Printf("  floor run %s:\n", order)
		r.Floor.print(r.Nodes)
		fmt.Printf("  ratio to the floor (workers Running): %.2f\n", r.ratioToFloor())
	}
}

// topCounts renders the largest counts as "VERB resource=N, ...".
func topCounts(m map[string]int, k int) string {
	keys := make([]string, 0, len(m))
	for key := range m {
		keys = append(keys, key)
	}
	sort.Slice(keys, func(i, j int) bool {
		if m[keys[i]] != m[keys[j]] {
			return m[keys[i]] > m[keys[j]]
		}
		return keys[i] < keys[j]
	})
	var parts []string
	for i, key := range keys {
		if i == k {
			parts = append(parts, fmt.Sprintf("(+%d more)", len(keys)-k))
			break
		}
		parts = append(parts, fmt.Sprintf("%s=%d", key, m[key]))
	}
	return strings.Join(parts, ", ")
}

// write appends the figures as JSON lines ({"bench":"cd_scale","nodes",
// "name","value","unit"}) to SIMNODE_CD_SCALE_OUT, when set.
func (r cdScaleResult) write(t *testing.T) {
	t.Helper()
	path := os.Getenv("SIMNODE_CD_SCALE_OUT")
	if path == "" {
		return
	}
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	must(t, "open "+path, err)
	defer f.Close()
	emit := func(name string, value float64, unit string) {
		// Another control plane or another node priority: another figure.
		if r.NodeMonitorGrace != "default" {
			name = "node_grace_" + r.NodeMonitorGrace + "." + name
		}
		if r.NodeNice != 0 {
			name = fmt.Sprintf("node_nice_%d.%s", r.NodeNice, name)
		}
		if r.ControlPlaneQPS != "default" {
			name = "cp_qps_" + r.ControlPlaneQPS + "." + name
		}
		line, _ := json.Marshal(map[string]any{"bench": "cd_scale", "nodes": r.Nodes, "name": name, "value": value, "unit": unit})
		fmt.Fprintln(f, string(line))
	}
	round := func(d time.Duration) float64 { return float64(d.Milliseconds()) / 1000 }
	emit("submit_to_all_prepared_s", round(r.Prepared), "s")
	emit("submit_to_prepared_p50_s", round(r.PreparedP50), "s")
	emit("submit_to_all_running_s", round(r.Running), "s")
	emit("submit_to_daemons_ready_s", round(r.DaemonsReady), "s")
	emit("submit_to_cd_ready_s", round(r.CDReady), "s")
	emit("api_requests", float64(r.Audit.total()), "requests")
	emit("api_requests_node_side_per_node", float64(r.Audit.nodeSide())/float64(r.Nodes), "requests")
	emit("api_requests_controller", float64(r.Audit.byClient["controller"]), "requests")
	emit("api_requests_control_plane", float64(r.Audit.controlPlane()), "requests")
	emit("idle_api_requests_per_node_per_s", float64(r.Idle.nodeSide())/float64(r.Nodes)/r.IdleWindow.Seconds(), "requests/s")
	emit("cd_ready_after_last_prepared_s", round(r.CDReady-r.Prepared), "s")
	emit("api_requests_driver_per_node", r.driverRequestsPerNode(), "requests")
	for _, c := range driverClients {
		emit("api_requests_"+strings.ReplaceAll(c, "-", "_")+"_per_node", float64(r.Audit.byClient[c])/float64(r.Nodes), "requests")
	}
	emit("driver_409_429_answers", float64(r.Audit.driverRejections()), "answers")
	emit("controller_failed_reconciles", float64(r.ControllerRetries), "reconciles")
	emit("controller_cpu_s_per_node", r.CPU["compute-domain-controller"]/float64(r.Nodes), "s")
	if r.FloorRan {
		emit("floor_submit_to_all_running_s", round(r.Floor.Running), "s")
		emit("floor_submit_to_daemons_ready_s", round(r.Floor.DaemonsReady), "s")
		emit("ratio_to_floor", float64(int(r.ratioToFloor()*1000+0.5))/1000, "x")
	}
	// The whole run for the cost model (bench/cd_cost_model.py): stages,
	// requests by client and by client and kind ("verb resource[/sub]"), and
	// CPU seconds by program, ours and the floor's.
	run := map[string]any{"bench": "cd_scale_run", "nodes": r.Nodes, "control_plane_qps": r.ControlPlaneQPS, "node_nice": r.NodeNice,
		"node_monitor_grace": r.NodeMonitorGrace,
		"window_s":           r.Window.Seconds(), "running_s": r.Running.Seconds(), "requests": r.Audit.byClient,
		"requests_by_kind": r.Audit.byVerb, "cpu_s": r.CPU, "stages": stageMap(r.Stages), "load": r.LoadAvg}
	if r.FloorRan {
		run["floor"] = map[string]any{"window_s": r.Floor.Window.Seconds(), "running_s": r.Floor.Running.Seconds(),
			"requests": r.Floor.Audit.byClient, "requests_by_kind": r.Floor.Audit.byVerb, "cpu_s": r.Floor.CPU,
			"stages": stageMap(r.Floor.Stages), "first": r.FloorFirst}
	}
	line, _ := json.Marshal(run)
	fmt.Fprintln(f, string(line))
}

// stageMap is the stages' median and last times (s), by stage name.
func stageMap(stages []stageFigure) map[string]map[string]float64 {
	out := map[string]map[string]float64{}
	for _, st := range stages {
		if st.Nodes > 0 {
			out[st.Stage] = map[string]float64{"p50_s": st.P50.Seconds(), "last_s": st.Last.Seconds(), "nodes": float64(st.Nodes)}
		}
	}
	return out
}

// cpuByProgram sums user+system CPU time (s) of every process on this
// machine by its program (argv[0]'s base name, else the kernel's name);
// "<program> children" is the time of the exited children it waited for
// (short-lived probes and helpers it ran).
func cpuByProgram() map[string]float64 {
	out := map[string]float64{}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return out
	}
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		data, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		text := string(data)
		open, close := strings.IndexByte(text, '('), strings.LastIndexByte(text, ')')
		if open < 0 || close < open {
			continue
		}
		fields := strings.Fields(text[close+1:])
		// After the name: state(0) ... utime(11) stime(12) cutime(13) cstime(14), in clock ticks.
		if len(fields) < 15 {
			continue
		}
		name := text[open+1 : close]
		if cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline")); err == nil && len(cmdline) > 0 {
			if argv0, _, _ := strings.Cut(string(cmdline), "\x00"); argv0 != "" {
				name = filepath.Base(argv0)
			}
		}
		ticks := func(i, j int) float64 {
			a, _ := strconv.ParseFloat(fields[i], 64)
			b, _ := strconv.ParseFloat(fields[j], 64)
			return (a + b) / 100 // USER_HZ
		}
		out[name] += ticks(11, 12)
		out[name+" children"] += ticks(13, 14)
	}
	return out
}

// cpuSince is after - before per program, the programs that used any.
func cpuSince(before, after map[string]float64) map[string]float64 {
	out := map[string]float64{}
	for p, v := range after {
		if d := v - before[p]; d > 0.005 {
			out[p] = d
		}
	}
	return out
}
