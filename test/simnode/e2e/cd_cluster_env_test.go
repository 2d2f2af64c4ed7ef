package e2e

// The ComputeDomain cluster: simulated GB200 tray nodes split into NVLink
// cliques, with OUR Helm chart installed by `helm install` (chart_env_test.go),
// so that everything a ComputeDomain needs runs as the chart's pods through
// the real kubelet path: the compute-domain-controller (Deployment), the
// compute-domain kubelet plugin (DaemonSet), and the per-domain IMEX daemons
// the controller creates, running the simulated nvidia-imex from each node's
// driver root. Unlike cdEnvironment (computedomain_env_test.go), nothing here
// plays the controller. Shared by the seed, fault and benchmark tests.
//
// Usage:
//
//	c := startCDCluster(ctx, t, cdClusterOptions{Cliques: []int{2, 2}})
//	cd := c.CreateComputeDomain(ctx, t, cdSpec{Namespace: "ns", Name: "cd", NumNodes: 2})
//	c.createWorker(ctx, t, "ns", "w0", c.NodesOfClique(0)[0], cd.channelTemplate)
//	c.createWorker(ctx, t, "ns", "w1", c.NodesOfClique(0)[1], cd.channelTemplate)
//	c.WaitForCDReady(ctx, t, cd, c.NodesOfClique(0))

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	watchtools "k8s.io/client-go/tools/watch"

	"nvdra.local/test/simnode/harness"
)

const (
	// The gb200-tray profile's fabric cluster UUID and clique id; clique i of
	// a cdCluster gets clique id gb200CliqueBase+i (clique 0 is gb200Clique).
	gb200ClusterUUID = "9f2c41e7-58a3-4b6d-8e0a-3c5d7f1b2a94"
	gb200CliqueBase  = 32766
	// The chart's controller Deployment.
	cdControllerDeployment = chartName + "-controller"
)

// cdClusterValues adapt the chart to the ComputeDomain cluster beyond
// chartValues: the clique label on nodes (as the old env's plugin had it).
const cdClusterValues = `
kubeletPlugin:
  containers:
    computeDomains:
      gpuCliqueLabelEnabled: true
`

// cdClusterOptions say which cluster to start.
type cdClusterOptions struct {
	// Cliques gives the nodes per NVLink clique; total nodes = sum. Nodes are
	// named sim-node-0.. in clique order.
	Cliques []int
	// GPUPlugin also runs the GPU kubelet plugin (resources.gpus.enabled).
	GPUPlugin bool
	// Webhook also runs the chart's admission webhook (webhook.enabled).
	Webhook bool
	// HelmSet are extra `--set k=v` for helm install (after the test's
	// values, so they win).
	HelmSet []string
	// ValuesFiles come before the test bed's values (which adapt the chart
	// to simulated nodes and so win), e.g. an upstream user's values file.
	ValuesFiles []string
	// BeforeInstall runs once the nodes are up, before helm install (e.g.
	// to leave CRDs that helm install then keeps).
	BeforeInstall func(c *cdCluster)
	// TestDriver makes the test driver's image (simnode-test-driver, see
	// installTestDriver) runnable on the nodes.
	TestDriver bool
	// NodeNice is the node processes' nice value (harness.Options.Nice).
	NodeNice int
}

// cdCluster is a started cluster with the chart installed and every
// component ready. The embedded cdEnvironment brings the old env's helpers
// (createWorker, waitForDaemonPods, checkDaemonView, checkWorkerView,
// workerClaim, claimUID, waitForPluginLog, node); its fabric is every node,
// its plain "". Not safe for concurrent use by several goroutines.
type cdCluster struct {
	*cdEnvironment
	Env       *environment
	Client    kubernetes.Interface
	Dyn       dynamic.Interface
	Namespace string // the driver's (chart's) namespace
	// Helm runs helm against this cluster (e.g. "upgrade", chartRelease,
	// c.Chart, "--namespace", c.Namespace, "--reuse-values", "--set", ...).
	Helm  func(args ...string)
	Chart string // the chart's folder
	// ValuesFile is the values file helm install was given.
	ValuesFile string

	cliques   [][]string // node names per clique
	cliqueIDs []string   // "<clusterUUID>.<cliqueId>" per clique
}

// startCDCluster starts the nodes (a gb200-tray profile per clique, with its
// own clique id), lays out the IMEX capability and simulated nvidia-imex in
// each driver root, installs the chart with helm, and waits until the
// compute-domain plugin runs and publishes on every node and the controller
// Deployment is available (and the GPU plugin and webhook when asked for).
// Skips when a binary is missing. Everything stops with the test.
func startCDCluster(ctx context.Context, t *testing.T, opts cdClusterOptions) *cdCluster {
	t.Helper()
	if len(opts.Cliques) == 0 {
		t.Fatalf("cdClusterOptions.Cliques is empty: give the nodes per clique, e.g. []int{2}")
	}
	simimex, why := findBuilt(envSimIMEXDir, "test/simimex/bin", "simimex_nvidia_imex and simimex_nvidia_imex_ctl")
	if simimex == "" {
		t.Skip(why)
	}
	if !fileExists(filepath.Join(simimex, "nvidia-imex")) || !fileExists(filepath.Join(simimex, "nvidia-imex-ctl")) {
		t.Skipf("%s lacks nvidia-imex or nvidia-imex-ctl (build targets simimex_nvidia_imex, simimex_nvidia_imex_ctl)", simimex)
	}
	// make-driver-root (run by the harness) copies the simulated IMEX into
	// each driver root's usr/bin when this is set.
	t.Setenv(envSimIMEXDir, simimex)
	setup := prepareChart(t)

	c := &cdCluster{Namespace: chartNamespace, Chart: setup.chart}
	hopts := harness.Options{
		Images:      map[string]string{chartImage: setup.image},
		GPUProfiles: map[string]string{},
		Nice:        opts.NodeNice,
	}
	if opts.TestDriver {
		driver, err := harness.DefaultBinary("simnode-test-driver")
		must(t, "test driver", err)
		hopts.Images[driverImage] = driver
	}
	for i, count := range opts.Cliques {
		if count <= 0 {
			t.Fatalf("cdClusterOptions.Cliques[%d] = %d: every clique needs at least one node", i, count)
		}
		profile := cliqueProfile(t, i)
		c.cliqueIDs = append(c.cliqueIDs, fmt.Sprintf("%s.%d", gb200ClusterUUID, gb200CliqueBase+i))
		var names []string
		for j := 0; j < count; j++ {
			name := fmt.Sprintf("sim-node-%d", hopts.Nodes)
			hopts.GPUProfiles[name] = profile
			names = append(names, name)
			hopts.Nodes++
		}
		c.cliques = append(c.cliques, names)
	}
	env := startEnvironmentWith(t, hopts)
	c.Env, c.Client = env, env.nodes.Client()
	restConfig, err := clientcmd.BuildConfigFromFlags("", env.cp.Kubeconfig)
	must(t, "rest config", err)
	c.Dyn, err = dynamic.NewForConfig(restConfig)
	must(t, "dynamic client", err)
	c.cdEnvironment = &cdEnvironment{environment: env, client: c.Client, dyn: c.Dyn, fabric: c.Nodes()}
	setup.nodeFiles(t, env)
	for _, n := range env.nodes.Nodes {
		if !fileExists(filepath.Join(n.Config.DriverRoot(), "usr", "bin", "nvidia-imex")) {
			t.Fatalf("node %s: no simulated nvidia-imex in its driver root", n.Config.Name)
		}
	}

	c.ValuesFile = chartValuesFile(t, env)
	extra := writeValues(t, cdClusterValues)
	c.Helm = setup.runner(ctx, t, env.cp.Kubeconfig)
	if opts.BeforeInstall != nil {
		opts.BeforeInstall(c)
	}
	args := []string{"install", chartRelease, setup.chart, "--namespace", chartNamespace, "--create-namespace"}
	for _, f := range opts.ValuesFiles {
		args = append(args, "-f", f)
	}
	args = append(args, "-f", c.ValuesFile, "-f", extra,
		"--set", fmt.Sprintf("resources.gpus.enabled=%t", opts.GPUPlugin),
		"--set", fmt.Sprintf("webhook.enabled=%t", opts.Webhook))
	for _, s := range opts.HelmSet {
		args = append(args, "--set", s)
	}
	start := time.Now()
	c.Helm(args...)
	// Three minutes up to 72 nodes; beyond, 2.5 s more per node: on the
	// 2-core CI machine 256 nodes started 55 plugin pods in the first three.
	waitCtx, cancel := context.WithTimeout(ctx, max(3*time.Minute, time.Duration(len(env.nodes.Nodes))*2500*time.Millisecond))
	defer cancel()
	c.pluginPods = waitForChartPlugins(waitCtx, t, c.Client, len(env.nodes.Nodes), func(*corev1.Pod) bool { return true })
	c.waitForCDSlices(waitCtx, t, c.pluginPods)
	if opts.GPUPlugin {
		waitForDriverSlices(waitCtx, t, c.Client, gpuDriverName, len(env.nodes.Nodes))
	}
	waitForDeploymentAvailable(waitCtx, t, c.Client, cdControllerDeployment)
	if opts.Webhook {
		waitForDeploymentAvailable(waitCtx, t, c.Client, chartName+"-webhook")
	}
	t.Logf("ComputeDomain cluster: %d nodes in cliques %v, helm install to plugins publishing and controller available: %.1f s",
		len(env.nodes.Nodes), opts.Cliques, time.Since(start).Seconds())
	return c
}

// cliqueProfile writes the gb200-tray profile with clique id
// gb200CliqueBase+i to a folder of its own, under the profile's own file
// name (so the node label nvdra.test/gpu-profile stays gb200-tray).
func cliqueProfile(t *testing.T, i int) string {
	t.Helper()
	src, err := harness.ProfilePath("gb200-tray")
	must(t, "gb200-tray profile", err)
	data, err := os.ReadFile(src)
	must(t, "read "+src, err)
	const field = `"cliqueId": 32766`
	if !strings.Contains(string(data), field) {
		t.Fatalf("%s has no %s: the clique split needs it", src, field)
	}
	dir := filepath.Join(t.TempDir(), fmt.Sprintf("clique-%d", i))
	must(t, "profile folder", os.MkdirAll(dir, 0o755))
	path := filepath.Join(dir, "gb200-tray.json")
	text := strings.Replace(string(data), field, fmt.Sprintf(`"cliqueId": %d`, gb200CliqueBase+i), 1)
	must(t, "write "+path, os.WriteFile(path, []byte(text), 0o644))
	return path
}

// Nodes returns every node name, in clique order.
func (c *cdCluster) Nodes() []string {
	var out []string
	for _, names := range c.cliques {
		out = append(out, names...)
	}
	return out
}

// NodesOfClique returns the node names of clique i.
func (c *cdCluster) NodesOfClique(i int) []string { return append([]string(nil), c.cliques[i]...) }

// CliqueID returns clique i's id as the plugin and daemons report it
// ("<clusterUUID>.<cliqueId>").
func (c *cdCluster) CliqueID(i int) string { return c.cliqueIDs[i] }

// CliqueOfNode returns the clique id of a node ("" when unknown).
func (c *cdCluster) CliqueOfNode(node string) string {
	for i, names := range c.cliques {
		for _, n := range names {
			if n == node {
				return c.cliqueIDs[i]
			}
		}
	}
	return ""
}

// ControllerPod returns the running controller pod (fails without one).
func (c *cdCluster) ControllerPod(ctx context.Context, t *testing.T) *corev1.Pod {
	t.Helper()
	pods, err := c.Client.CoreV1().Pods(c.Namespace).List(ctx, metav1.ListOptions{LabelSelector: chartComponentLabel + "=controller"})
	must(t, "controller pods", err)
	for i := range pods.Items {
		p := &pods.Items[i]
		if p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning {
			return p
		}
	}
	t.Fatalf("no running controller pod in %s (%d pods)", c.Namespace, len(pods.Items))
	return nil
}

// cdSpec is a ComputeDomain to create.
type cdSpec struct {
	Namespace, Name string
	// NumNodes: spec.numNodes; negative leaves it unset (the CRD's default 0).
	NumNodes int
	// ChannelTemplate: spec.channel.resourceClaimTemplate.name (default
	// <Name>-channel).
	ChannelTemplate string
	// AllocationMode: spec.channel.allocationMode ("" leaves it unset:
	// Single).
	AllocationMode string
}

// CreateComputeDomain creates the namespace (if needed) and the domain;
// the controller does the rest.
func (c *cdCluster) CreateComputeDomain(ctx context.Context, t *testing.T, s cdSpec) *computeDomain {
	t.Helper()
	if s.ChannelTemplate == "" {
		s.ChannelTemplate = s.Name + "-channel"
	}
	must(t, "namespace "+s.Namespace, create(ctx, c.Client.CoreV1().Namespaces(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: s.Namespace}}))
	channel := map[string]any{"resourceClaimTemplate": map[string]any{"name": s.ChannelTemplate}}
	if s.AllocationMode != "" {
		channel["allocationMode"] = s.AllocationMode
	}
	spec := map[string]any{"channel": channel}
	if s.NumNodes >= 0 {
		spec["numNodes"] = int64(s.NumNodes)
	}
	obj := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "resource.nvidia.com/v1beta1",
		"kind":       "ComputeDomain",
		"metadata":   map[string]any{"name": s.Name, "namespace": s.Namespace},
		"spec":       spec,
	}}
	created, err := c.Dyn.Resource(cdGVR).Namespace(s.Namespace).Create(ctx, obj, metav1.CreateOptions{})
	must(t, "ComputeDomain "+s.Namespace+"/"+s.Name, err)
	return &computeDomain{namespace: s.Namespace, name: s.Name, uid: created.GetUID(), channelTemplate: s.ChannelTemplate}
}

// ComputeDomainOf returns the domain ns/name as created (by the test's YAML,
// say), for the helpers that take a *computeDomain.
func (c *cdCluster) ComputeDomainOf(ctx context.Context, t *testing.T, ns, name string) *computeDomain {
	t.Helper()
	u, err := c.Dyn.Resource(cdGVR).Namespace(ns).Get(ctx, name, metav1.GetOptions{})
	must(t, "ComputeDomain "+ns+"/"+name, err)
	tmpl, _, _ := unstructured.NestedString(u.Object, "spec", "channel", "resourceClaimTemplate", "name")
	return &computeDomain{namespace: ns, name: name, uid: u.GetUID(), channelTemplate: tmpl}
}

// cdNodeStatus is one status.nodes entry of a ComputeDomain.
type cdNodeStatus struct {
	Name, IPAddress, CliqueID, Status string
	Index                             *int64
}

func (n cdNodeStatus) String() string {
	index := "none"
	if n.Index != nil {
		index = fmt.Sprint(*n.Index)
	}
	return fmt.Sprintf("{%s %s %s index=%s %s}", n.Name, n.IPAddress, n.CliqueID, index, n.Status)
}

// cdStatus is a ComputeDomain's status as the controller wrote it.
type cdStatus struct {
	Exists bool
	Status string                  // status.status ("" before the first write)
	Nodes  map[string]cdNodeStatus // by node name
}

// NodeNames returns the status' node names, sorted.
func (s cdStatus) NodeNames() []string {
	var out []string
	for n := range s.Nodes {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

func parseCDStatus(u *unstructured.Unstructured) cdStatus {
	s := cdStatus{Exists: true, Nodes: map[string]cdNodeStatus{}}
	s.Status, _, _ = unstructured.NestedString(u.Object, "status", "status")
	list, _, _ := unstructured.NestedSlice(u.Object, "status", "nodes")
	for _, item := range list {
		m, ok := item.(map[string]any)
		if !ok {
			continue
		}
		n := cdNodeStatus{}
		n.Name, _ = m["name"].(string)
		n.IPAddress, _ = m["ipAddress"].(string)
		n.CliqueID, _ = m["cliqueID"].(string)
		n.Status, _ = m["status"].(string)
		if i, ok := m["index"].(int64); ok {
			n.Index = &i
		}
		s.Nodes[n.Name] = n
	}
	return s
}

// WaitForCD waits, on a watch of the domain, until cond holds for its
// status (Exists false once it is gone); fails with the last one seen.
func (c *cdCluster) WaitForCD(ctx context.Context, t *testing.T, cd *computeDomain, what string, cond func(cdStatus) bool) cdStatus {
	t.Helper()
	selector := fields.OneTermEqualSelector("metadata.name", cd.name).String()
	res := c.Dyn.Resource(cdGVR).Namespace(cd.namespace)
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.FieldSelector = selector
			return res.List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector = selector
			return res.Watch(ctx, o)
		},
	}
	last := cdStatus{}
	check := func(store cache.Store) (bool, error) {
		items := store.List()
		last = cdStatus{}
		if len(items) == 1 {
			if u, ok := items[0].(*unstructured.Unstructured); ok {
				last = parseCDStatus(u)
			}
		}
		return cond(last), nil
	}
	_, err := untilWithStore(ctx, lw, &unstructured.Unstructured{}, check)
	if err != nil {
		t.Fatalf("ComputeDomain %s/%s: %s: %v; last status %s %v", cd.namespace, cd.name, what, err, last.Status, last.Nodes)
	}
	return last
}

// WaitForCDReady waits until the domain is Ready with exactly nodes in
// status.nodes, each Ready.
func (c *cdCluster) WaitForCDReady(ctx context.Context, t *testing.T, cd *computeDomain, nodes []string) cdStatus {
	t.Helper()
	want := append([]string(nil), nodes...)
	sort.Strings(want)
	return c.WaitForCD(ctx, t, cd, fmt.Sprintf("Ready on %v", want), func(s cdStatus) bool { return readyOn(s, nodes) })
}

// DaemonPods lists the domain's daemon pods (not being deleted) by node.
func (c *cdCluster) DaemonPods(ctx context.Context, t *testing.T, cd *computeDomain) map[string]*corev1.Pod {
	t.Helper()
	pods, err := c.Client.CoreV1().Pods(c.Namespace).List(ctx, metav1.ListOptions{LabelSelector: cdLabelKey + "=" + string(cd.uid)})
	must(t, "daemon pods", err)
	out := map[string]*corev1.Pod{}
	for i := range pods.Items {
		p := &pods.Items[i]
		if p.DeletionTimestamp == nil && p.Spec.NodeName != "" {
			out[p.Spec.NodeName] = p
		}
	}
	return out
}

// Cliques reads the domain's ComputeDomainCliques: clique id -> node ->
// entry.
func (c *cdCluster) Cliques(ctx context.Context, t *testing.T, cd *computeDomain) map[string]map[string]cliqueEntry {
	t.Helper()
	list, err := c.Dyn.Resource(cliqueGVR).Namespace(c.Namespace).List(ctx, metav1.ListOptions{LabelSelector: cdLabelKey + "=" + string(cd.uid)})
	must(t, "cliques", err)
	out := map[string]map[string]cliqueEntry{}
	for i := range list.Items {
		u := &list.Items[i]
		out[cliqueIDOfObject(u)] = cliqueEntries(u)
	}
	return out
}

// cliqueIDOfObject is a clique object's clique id: its label, else what
// follows "<cdUID>." in its name.
func cliqueIDOfObject(u *unstructured.Unstructured) string {
	if id := u.GetLabels()[cdCliqueLabelKey]; id != "" {
		return id
	}
	_, id, _ := strings.Cut(u.GetName(), ".")
	return id
}

// WaitForCliques waits, on a watch of the driver namespace's cliques, until
// cond holds for the domain's cliques (clique id -> node -> entry).
func (c *cdCluster) WaitForCliques(ctx context.Context, t *testing.T, cd *computeDomain, what string,
	cond func(map[string]map[string]cliqueEntry) bool) map[string]map[string]cliqueEntry {
	t.Helper()
	selector := cdLabelKey + "=" + string(cd.uid)
	res := c.Dyn.Resource(cliqueGVR).Namespace(c.Namespace)
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.LabelSelector = selector
			return res.List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.LabelSelector = selector
			return res.Watch(ctx, o)
		},
	}
	var last map[string]map[string]cliqueEntry
	_, err := untilWithStore(ctx, lw, &unstructured.Unstructured{}, func(store cache.Store) (bool, error) {
		last = map[string]map[string]cliqueEntry{}
		for _, item := range store.List() {
			if u, ok := item.(*unstructured.Unstructured); ok {
				last[cliqueIDOfObject(u)] = cliqueEntries(u)
			}
		}
		return cond(last), nil
	})
	if err != nil {
		t.Fatalf("cliques of %s/%s: %s: %v; last %v", cd.namespace, cd.name, what, err, last)
	}
	return last
}

// DeleteComputeDomain deletes the domain and waits until it is gone (the
// controller's cascade ran and released the finalizer).
func (c *cdCluster) DeleteComputeDomain(ctx context.Context, t *testing.T, cd *computeDomain) {
	t.Helper()
	err := c.Dyn.Resource(cdGVR).Namespace(cd.namespace).Delete(ctx, cd.name, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		t.Fatalf("delete ComputeDomain %s/%s: %v", cd.namespace, cd.name, err)
	}
	c.WaitForCD(ctx, t, cd, "gone (finalizer released)", func(s cdStatus) bool { return !s.Exists })
}

// untilWithStore watches objects from lw and evaluates cond on all of them
// (a store kept from the list and every event since) until it holds.
func untilWithStore(ctx context.Context, lw cache.ListerWatcher, obj runtime.Object, cond func(cache.Store) (bool, error)) (cache.Store, error) {
	store := cache.NewStore(cache.MetaNamespaceKeyFunc)
	synced := func(s cache.Store) (bool, error) {
		for _, item := range s.List() {
			if err := store.Update(item); err != nil {
				return false, err
			}
		}
		return cond(store)
	}
	_, err := watchtools.UntilWithSync(ctx, lw, obj, synced, func(e watch.Event) (bool, error) {
		switch e.Type {
		case watch.Added, watch.Modified:
			if err := store.Update(e.Object); err != nil {
				return false, err
			}
		case watch.Deleted:
			if err := store.Delete(e.Object); err != nil {
				return false, err
			}
		default:
			return false, nil
		}
		return cond(store)
	})
	return store, err
}

// Kubectl runs kubectl against the cluster and returns its output (stdout
// and stderr); a failure fails the test.
func (c *cdCluster) Kubectl(ctx context.Context, t *testing.T, args ...string) string {
	t.Helper()
	return c.Env.Kubectl(ctx, t, args...)
}

func (c *cdCluster) kubectl(ctx context.Context, args ...string) (string, error) {
	return c.Env.kubectl(ctx, args...)
}

// podClaim is one ResourceClaim a pod got, where it was prepared.
type podClaim struct {
	Namespace, Name, UID, Node string
}

// ClaimsOfPods returns the ResourceClaims the pods got (their status'
// claim names), with their UIDs and the pods' nodes: what must be
// unprepared on those nodes once the pods are gone.
func (c *cdCluster) ClaimsOfPods(ctx context.Context, t *testing.T, pods ...*corev1.Pod) []podClaim {
	t.Helper()
	var out []podClaim
	for _, p := range pods {
		for _, s := range p.Status.ResourceClaimStatuses {
			if s.ResourceClaimName == nil {
				continue
			}
			claim, err := c.Client.ResourceV1().ResourceClaims(p.Namespace).Get(ctx, *s.ResourceClaimName, metav1.GetOptions{})
			must(t, "claim "+*s.ResourceClaimName, err)
			out = append(out, podClaim{Namespace: p.Namespace, Name: claim.Name, UID: string(claim.UID), Node: p.Spec.NodeName})
		}
	}
	return out
}

// CheckCDCleanedUp checks that nothing of a deleted domain is left: call it
// once DeleteComputeDomain returned and the domain's workload pods were
// deleted. At once (the cascade finishes before the finalizer goes): the
// DaemonSet and the daemon claim template in the driver namespace, the
// workload claim template, the domain's label on every node. Then, waiting
// on watches and file events: the daemon pods, the domain's cliques (a
// daemon that stops after the cascade must not bring one back), and on each
// node of claims (the workers' and daemons' claims, from ClaimsOfPods
// taken while they ran) the claim's CDI spec, its checkpoint entry and the
// domain's folder of the plugin.
func (c *cdCluster) CheckCDCleanedUp(ctx context.Context, t *testing.T, cd *computeDomain, claims []podClaim) {
	t.Helper()
	waitCtx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if _, err := c.Client.AppsV1().DaemonSets(c.Namespace).Get(ctx, cd.daemonSetName(), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("DaemonSet %s left after the domain was deleted (get: %v)", cd.daemonSetName(), err)
	}
	if _, err := c.Client.ResourceV1().ResourceClaimTemplates(c.Namespace).Get(ctx, cd.daemonSetName(), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("daemon claim template %s left (get: %v)", cd.daemonSetName(), err)
	}
	if _, err := c.Client.ResourceV1().ResourceClaimTemplates(cd.namespace).Get(ctx, cd.channelTemplate, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("workload claim template %s/%s left (get: %v)", cd.namespace, cd.channelTemplate, err)
	}
	nodes, err := c.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: cdLabelKey + "=" + string(cd.uid)})
	must(t, "nodes", err)
	for _, n := range nodes.Items {
		t.Errorf("node %s keeps %s=%s after the domain was deleted", n.Name, cdLabelKey, cd.uid)
	}
	selector := cdLabelKey + "=" + string(cd.uid)
	_, err = untilWithStore(waitCtx, podListWatch(c.Client, c.Namespace, selector), &corev1.Pod{}, func(s cache.Store) (bool, error) {
		return len(s.List()) == 0, nil
	})
	if err != nil {
		t.Errorf("daemon pods of %s/%s left: %v", cd.namespace, cd.name, err)
	}
	if left := c.Cliques(ctx, t, cd); len(left) != 0 {
		t.Errorf("cliques of %s/%s left after its daemons stopped: %v", cd.namespace, cd.name, left)
	}
	domainDirs := map[string]bool{}
	for _, claim := range claims {
		n := c.node(t, claim.Node)
		if err := waitForFileGone(waitCtx, cdClaimSpecPath(n, claim.UID)); err != nil {
			t.Errorf("claim %s/%s: CDI spec left on %s: %v", claim.Namespace, claim.Name, claim.Node, err)
		}
		path := filepath.Join(n.Config.Dir, pluginsDir, cdDriverName, "checkpoint.json")
		var state string
		if err := waitForFile(waitCtx, path, func([]byte) bool {
			state = cdCheckpointState(t, n, claim.UID)
			return state == ""
		}); err != nil {
			t.Errorf("claim %s/%s: checkpoint entry left on %s (%q): %v", claim.Namespace, claim.Name, claim.Node, state, err)
		}
		domainDirs[claim.Node] = true
	}
	for node := range domainDirs {
		dir := filepath.Join(c.node(t, node).Config.Dir, cdPluginDomainsPath, string(cd.uid))
		if err := waitForFileGone(waitCtx, dir); err != nil {
			t.Errorf("node %s: the domain's folder %s left: %v", node, dir, err)
		}
	}
}
