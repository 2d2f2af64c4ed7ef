package e2e

// docs/computedomains.md's worked example on the seeds' cluster
// (TestComputeDomainSeeds): applied from the Markdown with kubectl, the two
// Job workers run on two trays, each with the domain's IMEX channel and the
// four GPUs of its tray, and the domain is Ready on their nodes; `kubectl
// delete -f` of the same block leaves nothing of the domain.

import (
	"context"
	"regexp"
	"sort"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
)

func seedDocsWorkedExample(ctx context.Context, t *testing.T, c *cdCluster) {
	const ns, workers = "mnnvl-demo", 2
	example := docsExample(t, docsPath("computedomains.md"), "computedomains-worked-example")
	c.Kubectl(ctx, t, "apply", "-f", example)
	cd := c.ComputeDomainOf(ctx, t, ns, "nvbandwidth-cd")

	// The Job's pods, Running.
	const selector = "app=nvbandwidth-worker"
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.LabelSelector = selector
			return c.Client.CoreV1().Pods(ns).List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.LabelSelector = selector
			return c.Client.CoreV1().Pods(ns).Watch(ctx, o)
		},
	}
	store, err := untilWithStore(ctx, lw, &corev1.Pod{}, func(s cache.Store) (bool, error) {
		running := 0
		for _, o := range s.List() {
			if o.(*corev1.Pod).Status.Phase == corev1.PodRunning {
				running++
			}
		}
		return running == workers, nil
	})
	if err != nil {
		// What the pods and the namespace's Events say, for the failure.
		out, _ := c.kubectl(context.Background(), "get", "pods,resourceclaims,jobs", "-n", ns, "-o", "wide")
		events, _ := c.kubectl(context.Background(), "get", "events", "-n", ns)
		for _, o := range store.List() {
			p := o.(*corev1.Pod)
			logs, _ := c.kubectl(context.Background(), "logs", "-n", ns, p.Name, "--tail=20")
			t.Logf("pod %s on %q: %+v\nlog:\n%s", p.Name, p.Spec.NodeName, p.Status, logs)
		}
		t.Fatalf("%d workers of the docs' Job Running: %v\n%s\n%s", workers, err, out, events)
	}
	var pods []*corev1.Pod
	var nodes []string
	for _, o := range store.List() {
		p := o.(*corev1.Pod)
		pods = append(pods, p)
		nodes = append(nodes, p.Spec.NodeName)
	}
	sort.Strings(nodes)
	if nodes[0] == nodes[1] {
		t.Fatalf("both workers on %s, want two nodes (the example's anti-affinity)", nodes[0])
	}
	c.WaitForCDReady(ctx, t, cd, nodes)
	daemons := c.waitForDaemonPods(ctx, t, cd, nodes)

	// Each worker: channel0 and its tray's four GPUs, nothing else.
	gpuNode := regexp.MustCompile(`^/dev/nvidia\d+$`)
	for _, p := range pods {
		view, err := readContainerView(c.node(t, p.Spec.NodeName), ns, p.Name, "worker")
		must(t, "view of "+p.Name, err)
		channels, gpus := 0, 0
		var all []string
		for _, d := range view.Devices {
			all = append(all, d.Path)
			switch {
			case d.Path == imexChannelDevice:
				channels++
			case gpuNode.MatchString(d.Path):
				gpus++
			}
		}
		t.Logf("%s on %s: device nodes %v", p.Name, p.Spec.NodeName, all)
		if channels != 1 || gpus != 4 {
			t.Errorf("%s on %s: %d IMEX channel0 and %d GPU device nodes (%v), want 1 and 4", p.Name, p.Spec.NodeName, channels, gpus, all)
		}
	}

	// kubectl delete -f of the same block: the domain, its objects and the
	// workers' and daemons' claims go.
	claims := c.ClaimsOfPods(ctx, t, append(pods, podList(daemons)...)...)
	c.Kubectl(ctx, t, "delete", "-f", example, "--wait=false")
	c.WaitForCD(ctx, t, cd, "gone after kubectl delete", func(s cdStatus) bool { return !s.Exists })
	for _, p := range pods {
		waitForPodGone(ctx, t, c.Client, ns, p.Name)
	}
	c.CheckCDCleanedUp(ctx, t, cd, claims)
}
