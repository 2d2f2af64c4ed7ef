package e2e

// TestComputeDomainManyBench is issue 27's "many domains" benchmark (point
// 5), printed, not asserted except for leftovers: the ComputeDomain cluster
// of cd_cluster_env_test.go (our chart, the real controller, the CD kubelet
// plugin and the IMEX daemons as pods) running many domains rather than one
// large one (that is TestComputeDomainScaleBench). Two modes, each on a
// fresh cluster of its own, each skipped unless its variable is set:
//
//   - SIMNODE_CD_MANY_CONCURRENT=DxS (scripts/bench: 8x9): D domains of S
//     nodes each, all submitted at once (each domain, then its S worker pods,
//     one per node, each with a channel claim from the domain's template),
//     on D*S nodes in cliques of min(18, 2*S) nodes, two domains per clique
//     on disjoint nodes (one per clique when 2*S > 18). Per domain: from its
//     submission to all its workers Running and to the domain Ready; overall
//     from the first submission to the last of these; the controller's failed
//     reconciles in that window, and the 409 (conflict) and 429 (throttled)
//     answers the API server gave the driver's components (audit log).
//   - SIMNODE_CD_MANY_SERIAL=K (scripts/bench: 100): on
//     SIMNODE_CD_MANY_SERIAL_NODES nodes (default 18, one clique), K domains
//     one after another, each over every node with a worker per node: from
//     the submission to the workers Running and the domain Ready ("up"), then
//     from deleting the workers and the domain to nothing of it left
//     ("down": CheckCDCleanedUp's checks, and the workers' and daemons'
//     ResourceClaims gone). The medians of the first and last 10 domains, and
//     the least-squares slope over the domain index: a driver that leaks or
//     slows down with the domains it has seen shows a slope. Anything left
//     behind fails the test (and stops the run).
//
// Writes JSON lines {"bench":"cd_many","mode","shape","name","value","unit"}
// to SIMNODE_CD_MANY_OUT when set (bench/collect.py: cd_many.<mode>.<name>).

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"

	"nvdra.local/test/simnode/harness"
)

const (
	// Every namespace of this test's workloads starts with this.
	cdManyNamespacePrefix = "cd-many-"
	cdManyUserAgent       = "cd-many-bench"
)

// cdManyDriverClients are the audit client groups (auditClient) of the driver's
// own components.
var cdManyDriverClients = []string{"controller", "cd-plugin", "cd-daemon", "gpu-plugin", "webhook"}

func TestComputeDomainManyBench(t *testing.T) {
	concurrent := os.Getenv("SIMNODE_CD_MANY_CONCURRENT")
	serial := os.Getenv("SIMNODE_CD_MANY_SERIAL")
	if (concurrent == "" || concurrent == "0") && (serial == "" || serial == "0") {
		t.Skip("set SIMNODE_CD_MANY_CONCURRENT=8x9 (domains x nodes, submitted at once) and/or " +
			"SIMNODE_CD_MANY_SERIAL=100 (domains one after another) to time many ComputeDomains")
	}
	var domains, size, count int
	if concurrent != "" && concurrent != "0" {
		d, s, ok := strings.Cut(concurrent, "x")
		var errD, errS error
		domains, errD = strconv.Atoi(d)
		size, errS = strconv.Atoi(s)
		if !ok || errD != nil || errS != nil || domains <= 0 || size <= 0 || size > maxNodesPerIMEXDomain {
			t.Fatalf("SIMNODE_CD_MANY_CONCURRENT=%q: want <domains>x<nodes per domain>, at most %d nodes, e.g. 8x9",
				concurrent, maxNodesPerIMEXDomain)
		}
	}
	serialNodes := maxNodesPerIMEXDomain
	if serial != "" && serial != "0" {
		n, err := strconv.Atoi(serial)
		if err != nil || n <= 0 {
			t.Fatalf("SIMNODE_CD_MANY_SERIAL=%q: want a number of domains, e.g. 100", serial)
		}
		count = n
		if v := os.Getenv("SIMNODE_CD_MANY_SERIAL_NODES"); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n <= 0 {
				t.Fatalf("SIMNODE_CD_MANY_SERIAL_NODES=%q: want a node count, e.g. 18", v)
			}
			serialNodes = n
		}
	}
	// Inherited by each mode's cluster-launcher: the audit log says who got
	// which 409 and 429.
	t.Setenv(harness.EnvAuditLog, "1")
	if domains > 0 {
		t.Run("concurrent", func(t *testing.T) { runCDManyConcurrent(t, domains, size) })
	}
	if count > 0 {
		t.Run("serial", func(t *testing.T) { runCDManySerial(t, count, serialNodes) })
	}
}

// manyCluster is a started ComputeDomain cluster with this test's fast
// clients: no client-side limit (client-go's default of 5 per second would
// pace the submission) and a user agent of their own.
type manyCluster struct {
	*cdCluster // its Client, Dyn and cdEnvironment are the fast ones
	slow       *cdCluster
	rec        *manyRecorder
	auditPath  string
}

func startManyCluster(ctx context.Context, t *testing.T, cliques []int) *manyCluster {
	t.Helper()
	start := time.Now()
	c := startCDCluster(ctx, t, cdClusterOptions{Cliques: cliques})
	t.Logf("%d nodes in cliques %v: cluster up in %.1f s", len(c.Nodes()), cliques, time.Since(start).Seconds())
	checkPluginWatchers(t, c.Env)
	restConfig, err := clientcmd.BuildConfigFromFlags("", c.Env.cp.Kubeconfig)
	must(t, "rest config", err)
	restConfig.QPS, restConfig.Burst, restConfig.UserAgent = 1000, 1000, cdManyUserAgent
	client, err := kubernetes.NewForConfig(restConfig)
	must(t, "client", err)
	dyn, err := dynamic.NewForConfig(restConfig)
	must(t, "dynamic client", err)
	fast := *c
	env := *c.cdEnvironment
	env.client, env.dyn = client, dyn
	fast.cdEnvironment, fast.Client, fast.Dyn = &env, client, dyn
	return &manyCluster{cdCluster: &fast, slow: c, rec: startManyRecorder(t, client, dyn), auditPath: c.Env.cp.AuditLogPath()}
}

// manyDomain is one domain of the workload and its figures.
type manyDomain struct {
	namespace, name string
	clique          int
	nodes           []string
	workers         []string // pod names, one per node, in nodes' order
	cd              *computeDomain
	submitted       time.Time // the domain's create call
	running, ready  time.Time // its last worker Running; the domain Ready
}

func (d *manyDomain) key() string { return d.namespace + "/" + d.name }

// submit creates the domain, then its workers (one per node).
func (m *manyCluster) submit(ctx context.Context, t *testing.T, d *manyDomain) {
	t.Helper()
	m.rec.expect(d)
	d.submitted = time.Now()
	d.cd = m.CreateComputeDomain(ctx, t, cdSpec{Namespace: d.namespace, Name: d.name, NumNodes: len(d.nodes)})
	d.workers = nil
	for j, node := range d.nodes {
		name := fmt.Sprintf("%s-w%d", d.name, j)
		m.createWorker(ctx, t, d.namespace, name, node, d.cd.channelTemplate)
		d.workers = append(d.workers, name)
	}
}

func runCDManyConcurrent(t *testing.T, domains, size int) {
	perCliqueDomains := 2
	if 2*size > maxNodesPerIMEXDomain {
		perCliqueDomains = 1
	}
	var cliques []int
	for left := domains; left > 0; left -= perCliqueDomains {
		cliques = append(cliques, min(left, perCliqueDomains)*size)
	}
	nodes := domains * size
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute+time.Duration(nodes)*5*time.Second)
	defer cancel()
	m := startManyCluster(ctx, t, cliques)

	var ds []*manyDomain
	for i := 0; i < domains; i++ {
		q, slot := i/perCliqueDomains, i%perCliqueDomains
		d := &manyDomain{namespace: fmt.Sprintf("%s%d", cdManyNamespacePrefix, i), name: fmt.Sprintf("cd-%d", i), clique: q,
			nodes: m.NodesOfClique(q)[slot*size : (slot+1)*size]}
		must(t, "namespace "+d.namespace, create(ctx, m.Client.CoreV1().Namespaces(),
			&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: d.namespace}}))
		ds = append(ds, d)
	}
	t0 := time.Now()
	for _, d := range ds {
		m.submit(ctx, t, d)
	}
	submitted := time.Since(t0)
	var done time.Time
	for _, d := range ds {
		d.running, d.ready = m.rec.wait(ctx, t, d)
		done = manyLatest(done, d.running, d.ready)
	}
	retries, errs := m.controllerRetries(ctx, t, t0, done)
	audit := countAudit(t, m.auditPath, t0, done)
	conflicts, throttled, failedText := manyDriverFailures(audit)

	out := newManyOut(t, "concurrent", fmt.Sprintf("%dx%d", domains, size))
	defer out.close()
	s := func(d time.Duration) float64 { return float64(d.Milliseconds()) / 1000 }
	fmt.Printf("cd many concurrent: %d domains of %d nodes on %d nodes (cliques %v), all submitted within %.2f s:\n",
		domains, size, nodes, cliques, s(submitted))
	fmt.Printf("  | %-18s %6s %-28s %12s %12s\n", "domain", "clique", "nodes", "running s", "ready s")
	var running, ready []float64
	var lastRunning, lastReady time.Time
	for i, d := range ds {
		r, y := s(d.running.Sub(d.submitted)), s(d.ready.Sub(d.submitted))
		fmt.Printf("  | %-18s %6d %-28s %12.2f %12.2f\n", d.key(), d.clique,
			d.nodes[0]+".."+d.nodes[len(d.nodes)-1], r, y)
		running, ready = append(running, r), append(ready, y)
		lastRunning, lastReady = manyLatest(lastRunning, d.running), manyLatest(lastReady, d.ready)
		out.emit(fmt.Sprintf("domain_%d.submit_to_running_s", i), r, "s")
		out.emit(fmt.Sprintf("domain_%d.submit_to_ready_s", i), y, "s")
	}
	fmt.Printf("  from the first submission: every worker Running %.2f s, every domain Ready %.2f s; "+
		"per domain from its own submission: Running median %.2f s max %.2f s, Ready median %.2f s max %.2f s\n",
		s(lastRunning.Sub(t0)), s(lastReady.Sub(t0)), manyMedian(running), manyMax(running), manyMedian(ready), manyMax(ready))
	fmt.Printf("  controller: %d failed reconciles in the window %s\n", retries, errs)
	fmt.Printf("  driver components' API answers in the window: %d x 409, %d x 429 %s; requests in all %d, controller %d\n",
		conflicts, throttled, failedText, audit.total(), audit.byClient["controller"])
	out.emit("submit_span_s", s(submitted), "s")
	out.emit("all_running_s", s(lastRunning.Sub(t0)), "s")
	out.emit("all_ready_s", s(lastReady.Sub(t0)), "s")
	out.emit("domain_running_p50_s", manyMedian(running), "s")
	out.emit("domain_ready_p50_s", manyMedian(ready), "s")
	out.emit("domain_ready_max_s", manyMax(ready), "s")
	out.emit("controller_failed_reconciles", float64(retries), "reconciles")
	out.emit("driver_409", float64(conflicts), "answers")
	out.emit("driver_429", float64(throttled), "answers")
}

// manySerialFigure is one domain of the serial run.
type manySerialFigure struct {
	up, down time.Duration // submission to Running and Ready; delete to nothing left
	from, to time.Time
}

func runCDManySerial(t *testing.T, count, nodes int) {
	var cliques []int
	for left := nodes; left > 0; left -= maxNodesPerIMEXDomain {
		cliques = append(cliques, min(left, maxNodesPerIMEXDomain))
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	m := startManyCluster(ctx, t, cliques)
	ns := cdManyNamespacePrefix + "serial"
	must(t, "namespace "+ns, create(ctx, m.Client.CoreV1().Namespaces(),
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))
	all := m.Nodes()
	fmt.Printf("cd many serial: %d domains one after another, each on all %d nodes (cliques %v)\n", count, nodes, cliques)
	var figs []manySerialFigure
	var leftover string
	for i := 0; i < count; i++ {
		// Each domain has its own limit, so that a stuck one says which.
		dctx, dcancel := context.WithTimeout(ctx, 5*time.Minute+time.Duration(nodes)*5*time.Second)
		f, left := m.serialDomain(dctx, t, &manyDomain{namespace: ns, name: fmt.Sprintf("serial-%03d", i), nodes: all})
		dcancel()
		figs = append(figs, f)
		load := ""
		if data, err := os.ReadFile("/proc/loadavg"); err == nil {
			load = strings.Join(strings.Fields(string(data))[:3], " ")
		}
		fmt.Printf("cd many serial: domain %3d/%d: up %6.2f s, down %6.2f s, load %s\n", i+1, count,
			f.up.Seconds(), f.down.Seconds(), load)
		if left != "" {
			fmt.Printf("cd many serial: domain %d LEFT BEHIND: %s\n", i+1, left)
			leftover = fmt.Sprintf("domain %d (serial-%03d): %s", i, i, left)
			break
		}
	}
	retries, errs := m.controllerRetries(ctx, t, figs[0].from, figs[len(figs)-1].to)
	audit := countAudit(t, m.auditPath, figs[0].from, figs[len(figs)-1].to)
	conflicts, throttled, failedText := manyDriverFailures(audit)

	out := newManyOut(t, "serial", fmt.Sprintf("%dx%d", count, nodes))
	defer out.close()
	series := map[string][]float64{}
	for _, f := range figs {
		series["up"] = append(series["up"], f.up.Seconds())
		series["down"] = append(series["down"], f.down.Seconds())
		series["cycle"] = append(series["cycle"], f.to.Sub(f.from).Seconds())
	}
	k := min(10, len(figs))
	fmt.Printf("cd many serial: %d domains on %d nodes (%s in all):\n", len(figs), nodes,
		figs[len(figs)-1].to.Sub(figs[0].from).Round(time.Second))
	for _, name := range []string{"up", "down", "cycle"} {
		v := series[name]
		first, last, slope := manyMedian(v[:k]), manyMedian(v[len(v)-k:]), manySlope(v)
		fmt.Printf("  %-5s first %d median %.2f s, last %d median %.2f s, slope %+.4f s per domain, max %.2f s\n",
			name, k, first, k, last, slope, manyMax(v))
		out.emit(name+"_first10_p50_s", first, "s")
		out.emit(name+"_last10_p50_s", last, "s")
		out.emit(name+"_slope_s_per_domain", slope, "s")
	}
	fmt.Printf("  controller: %d failed reconciles over the run %s\n", retries, errs)
	fmt.Printf("  driver components' API answers over the run: %d x 409, %d x 429 %s; requests in all %d, controller %d\n",
		conflicts, throttled, failedText, audit.total(), audit.byClient["controller"])
	out.emit("controller_failed_reconciles", float64(retries), "reconciles")
	out.emit("driver_409", float64(conflicts), "answers")
	out.emit("driver_429", float64(throttled), "answers")
	if leftover != "" {
		out.emit("domains_left_behind", 1, "domains")
		t.Fatalf("left behind after %s", leftover)
	}
	out.emit("domains_left_behind", 0, "domains")
}

// serialDomain runs one domain of the serial mode: submit, wait, delete,
// check; returns its figures and what was left behind ("" when nothing).
func (m *manyCluster) serialDomain(ctx context.Context, t *testing.T, d *manyDomain) (manySerialFigure, string) {
	t.Helper()
	m.submit(ctx, t, d)
	d.running, d.ready = m.rec.wait(ctx, t, d)
	f := manySerialFigure{from: d.submitted, up: manyLatest(d.running, d.ready).Sub(d.submitted)}

	// What must be gone afterwards: the workers' and daemons' claims.
	pods, err := m.Client.CoreV1().Pods(d.namespace).List(ctx, metav1.ListOptions{})
	must(t, "worker pods", err)
	mine := map[string]bool{}
	for _, w := range d.workers {
		mine[w] = true
	}
	var owned []*corev1.Pod
	for i := range pods.Items {
		if mine[pods.Items[i].Name] {
			owned = append(owned, &pods.Items[i])
		}
	}
	owned = append(owned, podList(m.DaemonPods(ctx, t, d.cd))...)
	claims := m.ClaimsOfPods(ctx, t, owned...)

	wasFailed := t.Failed()
	start := time.Now()
	for _, w := range d.workers {
		must(t, "delete "+w, m.Client.CoreV1().Pods(d.namespace).Delete(ctx, w, metav1.DeleteOptions{}))
	}
	m.DeleteComputeDomain(ctx, t, d.cd)
	m.waitPodsGone(ctx, t, d.namespace, d.workers)
	m.CheckCDCleanedUp(ctx, t, d.cd, claims)
	left := m.waitClaimsGone(ctx, t, claims)
	f.to = time.Now()
	f.down = f.to.Sub(start)
	if left == "" && t.Failed() && !wasFailed {
		left = "see the errors above"
	}
	return f, left
}

// waitPodsGone waits, on a watch of the namespace's pods, until none of
// names is there.
func (m *manyCluster) waitPodsGone(ctx context.Context, t *testing.T, ns string, names []string) {
	t.Helper()
	var left []string
	_, err := untilWithStore(ctx, podListWatch(m.Client, ns, ""), &corev1.Pod{}, func(s cache.Store) (bool, error) {
		left = left[:0]
		for _, n := range names {
			if _, ok, _ := s.GetByKey(ns + "/" + n); ok {
				left = append(left, n)
			}
		}
		return len(left) == 0, nil
	})
	if err != nil {
		t.Fatalf("worker pods of %s left: %v: %v", ns, left, err)
	}
}

// waitClaimsGone waits, on watches of their namespaces, until none of the
// claims (by UID) exists; returns what is left after two minutes ("" when
// nothing).
func (m *manyCluster) waitClaimsGone(ctx context.Context, t *testing.T, claims []podClaim) string {
	t.Helper()
	waitCtx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	byNS := map[string]map[string]string{} // namespace -> UID -> name
	for _, c := range claims {
		if byNS[c.Namespace] == nil {
			byNS[c.Namespace] = map[string]string{}
		}
		byNS[c.Namespace][c.UID] = c.Name
	}
	var left []string
	for ns, uids := range byNS {
		claimsOf := m.Client.ResourceV1().ResourceClaims(ns)
		lw := &cache.ListWatch{
			ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
				return claimsOf.List(ctx, o)
			},
			WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
				return claimsOf.Watch(ctx, o)
			},
		}
		var here []string
		_, err := untilWithStore(waitCtx, lw, &resourceapi.ResourceClaim{}, func(s cache.Store) (bool, error) {
			here = here[:0]
			for _, obj := range s.List() {
				if c, ok := obj.(*resourceapi.ResourceClaim); ok && uids[string(c.UID)] != "" {
					here = append(here, ns+"/"+c.Name)
				}
			}
			return len(here) == 0, nil
		})
		if err != nil {
			left = append(left, here...)
		}
	}
	if len(left) > 0 {
		sort.Strings(left)
		t.Errorf("ResourceClaims left after their pods were deleted: %v", left)
		return fmt.Sprintf("claims %v", left)
	}
	return ""
}

// controllerRetries counts the controller's failed reconciles logged in
// [from, to], with their most common errors.
func (m *manyCluster) controllerRetries(ctx context.Context, t *testing.T, from, to time.Time) (int, string) {
	t.Helper()
	controller := m.ControllerPod(ctx, t)
	n, errs := 0, map[string]int{}
	for _, l := range m.containerLog(ctx, t, chartNamespace, controller.Name, "compute-domain") {
		if !l.at.Before(from) && !l.at.After(to) && strings.Contains(l.text, `"reconcile failed`) {
			n++
			errs[logField(l.text, "err")]++
		}
	}
	return n, topCounts(errs, 3)
}

// manyDriverFailures sums the 409 and 429 answers to the driver's components
// and lists them by client and request.
func manyDriverFailures(a auditCounts) (conflicts, throttled int, text string) {
	all := map[string]int{}
	for _, client := range cdManyDriverClients {
		for what, n := range a.failed[client] {
			switch {
			case strings.HasSuffix(what, " 409"):
				conflicts += n
			case strings.HasSuffix(what, " 429"):
				throttled += n
			default:
				continue
			}
			all[client+": "+what] += n
		}
	}
	if len(all) > 0 {
		text = "(" + topCounts(all, 8) + ")"
	}
	return conflicts, throttled, text
}

// manyRecorder notes, from informers started before any submission, when
// each worker pod was first Running and each domain first Ready on its
// nodes. Safe for concurrent use.
type manyRecorder struct {
	changeNotifier
	running map[string]time.Time
	want    map[string][]string // domain "ns/name" -> its nodes
	ready   map[string]time.Time
	status  map[string]cdStatus // the last seen
}

func startManyRecorder(t *testing.T, client kubernetes.Interface, dyn dynamic.Interface) *manyRecorder {
	t.Helper()
	rec := &manyRecorder{changeNotifier: newChangeNotifier(), running: map[string]time.Time{},
		want: map[string][]string{}, ready: map[string]time.Time{}, status: map[string]cdStatus{}}
	stop := make(chan struct{})
	t.Cleanup(func() { close(stop) })
	factory := informers.NewSharedInformerFactoryWithOptions(client, 0)
	_, err := factory.Core().V1().Pods().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { rec.onPod(obj) },
		UpdateFunc: func(_, obj any) { rec.onPod(obj) },
	})
	must(t, "pod handler", err)
	factory.Start(stop)
	domains := dynamicinformer.NewFilteredDynamicSharedInformerFactory(dyn, 0, metav1.NamespaceAll, nil)
	_, err = domains.ForResource(cdGVR).Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { rec.onDomain(obj) },
		UpdateFunc: func(_, obj any) { rec.onDomain(obj) },
	})
	must(t, "domain handler", err)
	domains.Start(stop)
	waitBenchInformersSynced(t, factory, domains)
	return rec
}

// expect registers a domain before its submission.
func (rec *manyRecorder) expect(d *manyDomain) {
	rec.note(func() { rec.want[d.key()] = d.nodes })
}

func (rec *manyRecorder) onPod(obj any) {
	p, ok := obj.(*corev1.Pod)
	if !ok || !strings.HasPrefix(p.Namespace, cdManyNamespacePrefix) || p.Status.Phase != corev1.PodRunning {
		return
	}
	now := time.Now()
	rec.note(func() {
		if key := p.Namespace + "/" + p.Name; rec.running[key].IsZero() {
			rec.running[key] = now
		}
	})
}

func (rec *manyRecorder) onDomain(obj any) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return
	}
	now := time.Now()
	s := parseCDStatus(u)
	key := u.GetNamespace() + "/" + u.GetName()
	rec.note(func() {
		rec.status[key] = s
		if nodes, ok := rec.want[key]; ok && rec.ready[key].IsZero() && readyOn(s, nodes) {
			rec.ready[key] = now
		}
	})
}

// wait waits, on the informers' events, until every worker of d runs and
// d is Ready on its nodes; returns when the last worker was Running and
// when the domain was Ready.
func (rec *manyRecorder) wait(ctx context.Context, t *testing.T, d *manyDomain) (running, ready time.Time) {
	t.Helper()
	for {
		rec.mu.Lock()
		n := 0
		running = time.Time{}
		for _, w := range d.workers {
			if at := rec.running[d.namespace+"/"+w]; !at.IsZero() {
				n++
				running = manyLatest(running, at)
			}
		}
		ready, status, ch := rec.ready[d.key()], rec.status[d.key()], rec.changed
		rec.mu.Unlock()
		if n == len(d.workers) && !ready.IsZero() {
			return running, ready
		}
		select {
		case <-ctx.Done():
			t.Fatalf("domain %s on %d nodes: %d of %d workers Running, status %q with nodes %v: %v",
				d.key(), len(d.nodes), n, len(d.workers), status.Status, status.NodeNames(), ctx.Err())
		case <-ch:
		}
	}
}

// manyOut appends JSON lines to SIMNODE_CD_MANY_OUT (nothing when unset).
type manyOut struct {
	t           *testing.T
	f           *os.File
	mode, shape string
}

func newManyOut(t *testing.T, mode, shape string) *manyOut {
	o := &manyOut{t: t, mode: mode, shape: shape}
	if path := os.Getenv("SIMNODE_CD_MANY_OUT"); path != "" {
		f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
		must(t, "open "+path, err)
		o.f = f
	}
	return o
}

func (o *manyOut) emit(name string, value float64, unit string) {
	if o.f == nil {
		return
	}
	line, _ := json.Marshal(map[string]any{"bench": "cd_many", "mode": o.mode, "shape": o.shape, "name": name,
		"value": math.Round(value*1e4) / 1e4, "unit": unit})
	if _, err := fmt.Fprintln(o.f, string(line)); err != nil {
		o.t.Errorf("write %s: %v", o.f.Name(), err)
	}
}

func (o *manyOut) close() {
	if o.f != nil {
		_ = o.f.Close()
	}
}

func manyLatest(ts ...time.Time) time.Time {
	var out time.Time
	for _, at := range ts {
		if at.After(out) {
			out = at
		}
	}
	return out
}

func manyMedian(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func manyMax(v []float64) float64 {
	out := 0.0
	for _, x := range v {
		out = max(out, x)
	}
	return out
}

// manySlope is the least-squares slope of v over its index (0 with fewer
// than two values).
func manySlope(v []float64) float64 {
	n := float64(len(v))
	if len(v) < 2 {
		return 0
	}
	var sx, sy float64
	for i, y := range v {
		sx += float64(i)
		sy += y
	}
	mx, my := sx/n, sy/n
	var num, den float64
	for i, y := range v {
		num += (float64(i) - mx) * (y - my)
		den += (float64(i) - mx) * (float64(i) - mx)
	}
	return num / den
}
