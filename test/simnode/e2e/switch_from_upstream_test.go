package e2e

// TestSwitchFromUpstreamChart: issue #25 point 4, switching a cluster from
// the Go driver's chart to ours. The Go driver itself cannot run here (its
// module is not served by the module proxy this machine reaches), so the
// "before" cluster is what it leaves behind that our components must take
// over: its CRDs (ours without our additions, as upstream's are; Helm's
// install then keeps them, as it never touches an existing CRD), a release
// installed from an upstream user's values file (test/chart/values-upstream.yaml),
// a ComputeDomain Ready with workers and a GPU claim prepared, and node
// checkpoints that upstream's own read path accepts (cmd/checkpoint-fixtures
// -verify). Then the documented switch (docs/install.md): our CRDs applied
// server-side, `helm upgrade` to our values. The domain stays Ready
// throughout, the CRDs have our schema, and the claims prepared before the
// switch unprepare cleanly through the new plugins.

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/yaml"
)

// upstreamCRDRemovals are our CRDs' additions to upstream's schema
// (docs/differences-from-upstream.md): removing them gives upstream's.
var upstreamCRDRemovals = map[string][][]string{
	"resource.nvidia.com_computedomains.yaml": {
		{"schema", "openAPIV3Schema", "properties", "status", "properties", "imexChannelID"},
		{"schema", "openAPIV3Schema", "properties", "status", "properties", "nodes", "items", "properties", "reason"},
		{"schema", "openAPIV3Schema", "properties", "status", "properties", "nodes", "items", "properties", "message"},
		{"additionalPrinterColumns"},
	},
	"resource.nvidia.com_computedomaincliques.yaml": {
		{"schema", "openAPIV3Schema", "properties", "daemons", "items", "properties", "reason"},
		{"schema", "openAPIV3Schema", "properties", "daemons", "items", "properties", "message"},
		{"additionalPrinterColumns"},
	},
}

// writeUpstreamCRDs writes upstream's CRDs, derived from the chart's, into
// a folder and returns it.
func writeUpstreamCRDs(t *testing.T, chart string) string {
	t.Helper()
	dir := t.TempDir()
	for file, removals := range upstreamCRDRemovals {
		data, err := os.ReadFile(filepath.Join(chart, "crds", file))
		must(t, "CRD "+file, err)
		var crd map[string]any
		for _, doc := range strings.Split(string(data), "\n---\n") {
			var obj map[string]any
			if err := yaml.Unmarshal([]byte(doc), &obj); err == nil && obj["kind"] == "CustomResourceDefinition" {
				crd = obj
			}
		}
		if crd == nil {
			t.Fatalf("%s: no CustomResourceDefinition", file)
		}
		u := unstructured.Unstructured{Object: crd}
		unstructured.RemoveNestedField(u.Object, "spec", "names", "shortNames")
		versions, _, _ := unstructured.NestedSlice(u.Object, "spec", "versions")
		for i := range versions {
			v := versions[i].(map[string]any)
			for _, path := range removals {
				if _, found, _ := unstructured.NestedFieldNoCopy(v, path...); !found {
					t.Fatalf("%s: %s is not in our CRD: upstreamCRDRemovals is out of date", file, strings.Join(path, "."))
				}
				unstructured.RemoveNestedField(v, path...)
			}
		}
		must(t, "versions", unstructured.SetNestedSlice(u.Object, versions, "spec", "versions"))
		out, err := yaml.Marshal(u.Object)
		must(t, "marshal "+file, err)
		must(t, "write "+file, os.WriteFile(filepath.Join(dir, file), out, 0o644))
	}
	return dir
}

// crdHasChannelID reports whether the cluster's ComputeDomain CRD keeps
// status.imexChannelID.
func crdHasChannelID(ctx context.Context, t *testing.T, c *cdCluster) bool {
	t.Helper()
	out := c.Kubectl(ctx, t, "get", "crd", "computedomains.resource.nvidia.com", "-o",
		"jsonpath={.spec.versions[0].schema.openAPIV3Schema.properties.status.properties.imexChannelID.type}")
	return strings.TrimSpace(out) != ""
}

// domainStatusRecorder records every status.status the domain shows from
// now until stop is called, over watches that end when the CRD changes.
type domainStatusRecorder struct {
	mu   sync.Mutex
	seen []string
	stop context.CancelFunc
	done chan struct{}
}

func recordDomainStatus(ctx context.Context, c *cdCluster, cd *computeDomain) *domainStatusRecorder {
	ctx, cancel := context.WithCancel(ctx)
	r := &domainStatusRecorder{stop: cancel, done: make(chan struct{})}
	res := c.Dyn.Resource(cdGVR).Namespace(cd.namespace)
	note := func(u *unstructured.Unstructured) string {
		status, _, _ := unstructured.NestedString(u.Object, "status", "status")
		if status != "Ready" {
			nodes, _, _ := unstructured.NestedSlice(u.Object, "status", "nodes")
			status = fmt.Sprintf("%s (at %s, nodes %v, managed %v)", status, time.Now().Format("15:04:05.000"), nodes, managedTimes(u))
		}
		r.mu.Lock()
		defer r.mu.Unlock()
		if len(r.seen) == 0 || r.seen[len(r.seen)-1] != status {
			r.seen = append(r.seen, status)
		}
		return u.GetResourceVersion()
	}
	go func() {
		defer close(r.done)
		// A CRD change can fail a read or a watch: try again after a pause
		// (a retry delay, not a wait for an event), until stopped.
		retry := func() {
			select {
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
		}
		for ctx.Err() == nil {
			u, err := res.Get(ctx, cd.name, metav1.GetOptions{})
			if err != nil {
				retry()
				continue
			}
			w, err := res.Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + cd.name, ResourceVersion: note(u)})
			if err != nil {
				retry()
				continue
			}
			for ev := range w.ResultChan() {
				if obj, ok := ev.Object.(*unstructured.Unstructured); ok && ev.Type != watch.Error {
					note(obj)
				}
			}
			w.Stop()
		}
	}()
	return r
}

func managedTimes(u *unstructured.Unstructured) []string {
	var out []string
	for _, m := range u.GetManagedFields() {
		out = append(out, fmt.Sprintf("%s/%s@%s", m.Manager, m.Subresource, m.Time))
	}
	return out
}

func (r *domainStatusRecorder) Stop() []string {
	r.stop()
	<-r.done
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.seen...)
}

func TestSwitchFromUpstreamChart(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	upstreamValues, err := filepath.Abs(filepath.Join("..", "..", "chart", "values-upstream.yaml"))
	must(t, "upstream values", err)
	var upstreamCRDs string
	c := startCDCluster(ctx, t, cdClusterOptions{
		Cliques:     []int{2},
		GPUPlugin:   true,
		ValuesFiles: []string{upstreamValues},
		BeforeInstall: func(c *cdCluster) {
			upstreamCRDs = writeUpstreamCRDs(t, c.Chart)
			c.Kubectl(ctx, t, "create", "-f", upstreamCRDs)
		},
	})
	if crdHasChannelID(ctx, t, c) {
		t.Fatalf("helm install replaced upstream's CRD: the test no longer shows the switch")
	}

	// Before: a domain Ready on both nodes with a worker each, and a GPU
	// claim prepared on the first.
	const ns = "switch"
	nodes := c.Nodes()
	cd := c.CreateComputeDomain(ctx, t, cdSpec{Namespace: ns, Name: "domain", NumNodes: 2})
	for i, node := range nodes {
		c.createWorker(ctx, t, ns, fmt.Sprintf("worker-%d", i), node, cd.channelTemplate)
	}
	template := &resourceapi.ResourceClaimTemplate{
		ObjectMeta: metav1.ObjectMeta{Name: "one-gpu"},
		Spec: resourceapi.ResourceClaimTemplateSpec{Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{
			Requests: []resourceapi.DeviceRequest{{Name: "gpu", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: gpuClass}}}}}},
	}
	must(t, "GPU claim template", create(ctx, c.Client.ResourceV1().ResourceClaimTemplates(ns), template))
	gpuPod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "gpu-user"},
		Spec: corev1.PodSpec{
			TerminationGracePeriodSeconds: ptr(int64(5)),
			NodeSelector:                  map[string]string{"kubernetes.io/hostname": nodes[0]},
			ResourceClaims:                []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimTemplateName: ptr("one-gpu")}},
			Tolerations:                   []corev1.Toleration{{Key: "nvidia.com/gpu", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}},
			Containers: []corev1.Container{{
				Name: "ctr", Image: workImage, Command: []string{"sh", "-c", "trap 'exit 0' TERM; sleep 9999 & wait"},
				Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "gpu"}}},
			}},
		},
	}
	_, err = c.Client.CoreV1().Pods(ns).Create(ctx, gpuPod, metav1.CreateOptions{})
	must(t, "GPU pod", err)
	var pods []*corev1.Pod
	for i := range nodes {
		pods = append(pods, waitForPodIn(ctx, t, c.Client, ns, fmt.Sprintf("worker-%d", i), podReady))
	}
	gpuUser := waitForPodIn(ctx, t, c.Client, ns, "gpu-user", podReady)
	c.WaitForCDReady(ctx, t, cd, nodes)
	claims := c.ClaimsOfPods(ctx, t, append(pods, gpuUser)...)
	daemons := c.waitForDaemonPods(ctx, t, cd, nodes)
	for _, p := range daemons {
		claims = append(claims, c.ClaimsOfPods(ctx, t, p)...)
	}
	gpuClaims := c.ClaimsOfPods(ctx, t, gpuUser)
	if len(gpuClaims) != 1 {
		t.Fatalf("GPU pod claims: %+v", gpuClaims)
	}

	// The node checkpoints are ones upstream's read path accepts.
	var checkpoints []string
	for _, node := range nodes {
		for _, driver := range []string{cdDriverName, gpuDriverName} {
			path := filepath.Join(c.node(t, node).Config.Dir, pluginsDir, driver, "checkpoint.json")
			if fileExists(path) {
				checkpoints = append(checkpoints, path)
			}
		}
	}
	if len(checkpoints) < len(nodes)+1 {
		t.Fatalf("checkpoints %v: want each node's compute-domain one and the GPU one", checkpoints)
	}
	verify := exec.CommandContext(ctx, "go", append([]string{"run", "-trimpath", "../cmd/checkpoint-fixtures", "-verify"}, checkpoints...)...)
	out, err := verify.CombinedOutput()
	if err != nil {
		t.Fatalf("upstream's read path refuses the node checkpoints: %v\n%s", err, out)
	}
	t.Logf("upstream's read path accepts the node checkpoints:\n%s", out)

	// The switch, as docs/install.md gives it.
	recorder := recordDomainStatus(ctx, c, cd)
	start := time.Now()
	c.Kubectl(ctx, t, "apply", "--server-side", "--force-conflicts", "-f", filepath.Join(c.Chart, "crds"))
	if !crdHasChannelID(ctx, t, c) {
		t.Errorf("after the documented apply the ComputeDomain CRD still lacks status.imexChannelID")
	}
	c.Helm("upgrade", chartRelease, c.Chart, "--namespace", c.Namespace, "--reset-values",
		"-f", c.ValuesFile, "-f", writeValues(t, cdClusterValues),
		"--set", "resources.gpus.enabled=true", "--set", "webhook.enabled=false", "--set", "logVerbosity=5")
	waitForChartPlugins(ctx, t, c.Client, len(nodes), func(p *corev1.Pod) bool {
		if !podReady(p) {
			return false
		}
		for _, ctr := range p.Spec.Containers {
			for _, e := range ctr.Env {
				if e.Name == "LOG_VERBOSITY" && e.Value != "5" {
					return false
				}
			}
		}
		return true
	})
	waitForDeploymentAvailable(ctx, t, c.Client, cdControllerDeployment)
	for _, driver := range []string{gpuDriverName, cdDriverName} {
		waitForDriverSlices(ctx, t, c.Client, driver, len(nodes))
	}
	t.Logf("CRDs applied and helm upgrade to new plugins publishing: %.1f s", time.Since(start).Seconds())
	c.WaitForCDReady(ctx, t, cd, nodes)
	t.Logf("switch started at %s", start.Format("15:04:05.000"))
	// The daemons were not restarted (their DaemonSet is OnDelete): the IMEX
	// domain under the running workers is the one from before.
	for node, p := range c.DaemonPods(ctx, t, cd) {
		if before := daemons[node]; before == nil || before.UID != p.UID {
			t.Errorf("daemon pod on %s replaced by the switch: %s, was %v", node, p.Name, before)
		}
	}
	if seen := recorder.Stop(); len(seen) != 1 || seen[0] != "Ready" {
		t.Errorf("the domain's status through the switch: %v, want Ready throughout", seen)
	}

	// The claims prepared before the switch unprepare cleanly.
	must(t, "delete GPU pod", c.Client.CoreV1().Pods(ns).Delete(ctx, gpuUser.Name, metav1.DeleteOptions{}))
	gpuCheckpoint := filepath.Join(c.node(t, gpuClaims[0].Node).Config.Dir, pluginsDir, gpuDriverName, "checkpoint.json")
	waitCtx, waitCancel := context.WithTimeout(ctx, 2*time.Minute)
	defer waitCancel()
	if err := waitForFile(waitCtx, gpuCheckpoint, func(b []byte) bool { return !strings.Contains(string(b), gpuClaims[0].UID) }); err != nil {
		t.Errorf("GPU claim %s still in %s after its pod was deleted: %v", gpuClaims[0].UID, gpuCheckpoint, err)
	}
	c.DeleteComputeDomain(ctx, t, cd)
	for i := range nodes {
		err := c.Client.CoreV1().Pods(ns).Delete(ctx, fmt.Sprintf("worker-%d", i), metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			t.Fatalf("delete worker-%d: %v", i, err)
		}
	}
	c.CheckCDCleanedUp(ctx, t, cd, claims)
}
