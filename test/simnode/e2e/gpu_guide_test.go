package e2e

// docs/gpus.md on the cluster of TestGPUPluginScenarios: each YAML block of
// the guide, read from the Markdown and applied with kubectl, runs as the
// guide says: the pods get the GPUs their claims ask for (on the node the
// selector picks), the nvidia.com/gpu extended resource is turned into a
// claim our plugin prepares, a request for too many GPUs stays Pending, and
// the CRDs' short names and -o wide columns are the ones the guide lists.

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"nvdra.local/test/simnode/harness"
)

const (
	gpuGuideNamespace = "gpu-guide"
	gpuGuideDoc       = "gpus.md"
)

func (e *gpuEnvironment) checkGPUGuide(ctx context.Context, t *testing.T) {
	t.Cleanup(func() {
		_ = e.client.CoreV1().Namespaces().Delete(context.Background(), gpuGuideNamespace, metav1.DeleteOptions{})
	})
	s := &scenario{t: t, ctx: ctx, env: e, client: e.client, ns: gpuGuideNamespace}
	apply := func(example string) {
		t.Helper()
		e.Kubectl(ctx, t, "apply", "-f", docsExample(t, docsPath(gpuGuideDoc), example))
	}
	running := func(name string) *corev1.Pod {
		t.Helper()
		ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		defer cancel()
		return waitForPodIn(ctx, t, e.client, gpuGuideNamespace, name, func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodRunning })
	}

	// Claims from templates, and the extended resource: each pod runs with
	// that many GPUs of its node, its container seeing exactly their device
	// nodes.
	var pods []*corev1.Pod
	for _, c := range []struct {
		example, pod string
		devices      int
		profile      string // the node profile the selector must pick; "" any
	}{
		{"gpus-one", "one-gpu", 1, ""},
		{"gpus-several", "two-gpus", 2, ""},
		{"gpus-by-product", "h100", 1, h100Profile},
		{"gpus-by-memory", "at-least-60gi", 1, h100Profile},
		{"gpus-extended-resource", "extended-resource", 1, ""},
	} {
		apply(c.example)
		pod := running(c.pod)
		got := s.checkContainers(pod, c.devices, 0, "ctr")
		if c.profile != "" {
			if profile := e.nodeProfile(t, pod.Spec.NodeName); profile != c.profile {
				t.Errorf("example %s: pod ran on %s (%s), want a %s node", c.example, pod.Spec.NodeName, profile, c.profile)
			}
		}
		t.Logf("example %s: pod %s on %s got %v", c.example, pod.Name, pod.Spec.NodeName, got)
		pods = append(pods, pod)
	}

	// The extended-resource pod names no claim; the scheduler made one and
	// mapped the container's nvidia.com/gpu to its request.
	ext := pods[len(pods)-1]
	if len(ext.Spec.ResourceClaims) != 0 {
		t.Errorf("pod %s: spec.resourceClaims %v, want none (the example uses limits only)", ext.Name, ext.Spec.ResourceClaims)
	}
	status := ext.Status.ExtendedResourceClaimStatus
	if status == nil || len(status.RequestMappings) != 1 ||
		status.RequestMappings[0].ContainerName != "ctr" || status.RequestMappings[0].ResourceName != "nvidia.com/gpu" {
		t.Errorf("pod %s: extendedResourceClaimStatus %+v, want one mapping of ctr's nvidia.com/gpu", ext.Name, status)
	}

	// More GPUs than any node has, as an extended resource: Pending.
	apply("gpus-extended-resource-too-many")
	pending := waitForPodIn(ctx, t, e.client, gpuGuideNamespace, "too-many-gpus", func(p *corev1.Pod) bool {
		c := podCondition(p, corev1.PodScheduled)
		return c != nil && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable
	})
	c := podCondition(pending, corev1.PodScheduled)
	t.Logf("too-many-gpus: PodScheduled %s: %s", c.Reason, c.Message)
	if pending.Status.Phase != corev1.PodPending || pending.Spec.NodeName != "" {
		t.Errorf("too-many-gpus is %s on %q, want Pending and unbound", pending.Status.Phase, pending.Spec.NodeName)
	}
	if !strings.Contains(c.Message, "cannot allocate all claims") {
		t.Errorf("too-many-gpus: PodScheduled message %q does not give the DRA reason", c.Message)
	}
	s.deletePods(pods...)

	// The chart's CRDs: short names and the guide's columns.
	crds, err := harness.FindCheckoutPath(filepath.Join("deployments", "helm", "dra-driver-nvidia-gpu", "crds"))
	must(t, "chart CRDs", err)
	e.Kubectl(ctx, t, "apply", "--server-side", "-f", crds)
	e.Kubectl(ctx, t, "wait", "--for=condition=Established", "--timeout=60s",
		"crd/computedomains.resource.nvidia.com", "crd/computedomaincliques.resource.nvidia.com")
	apply("gpus-computedomain")
	checkColumns(t, e.Kubectl(ctx, t, "get", "cd", "-n", gpuGuideNamespace),
		[]string{"NAME", "NODES", "STATUS", "AGE"}, "guide-domain")
	checkColumns(t, e.Kubectl(ctx, t, "get", "cd", "-n", gpuGuideNamespace, "-o", "wide"),
		[]string{"NAME", "NODES", "STATUS", "AGE", "MODE", "TEMPLATE", "CHANNEL", "MEMBERS"},
		"guide-domain", "Single", "guide-domain-channel")
	// A clique as a daemon writes it (there is no controller or daemon here).
	clique := filepath.Join(t.TempDir(), "clique.yaml")
	must(t, "clique", os.WriteFile(clique, []byte(`apiVersion: resource.nvidia.com/v1beta1
kind: ComputeDomainClique
metadata:
  namespace: `+gpuGuideNamespace+`
  name: guide-domain-uid.clique-0
  labels:
    resource.nvidia.com/computeDomain: guide-domain-uid
    resource.nvidia.com/computeDomain.cliqueID: clique-0
daemons:
- nodeName: sim-node-0
  ipAddress: 10.0.0.1
  cliqueID: clique-0
  status: Ready
`), 0o644))
	e.Kubectl(ctx, t, "apply", "-f", clique)
	checkColumns(t, e.Kubectl(ctx, t, "get", "cdclique", "-n", gpuGuideNamespace),
		[]string{"NAME", "DOMAIN", "CLIQUE", "AGE"}, "guide-domain-uid.clique-0", "guide-domain-uid", "clique-0")
	checkColumns(t, e.Kubectl(ctx, t, "get", "cdclique", "-n", gpuGuideNamespace, "-o", "wide"),
		[]string{"NAME", "DOMAIN", "CLIQUE", "AGE", "DAEMONS", "STATES"}, "sim-node-0", "Ready")
}

// checkColumns checks kubectl's table: the header is exactly `header`, and
// the first row holds every word of `row`.
func checkColumns(t *testing.T, table string, header []string, row ...string) {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(table), "\n")
	if len(lines) < 2 {
		t.Errorf("kubectl printed %q, want a header and a row", table)
		return
	}
	if got := strings.Fields(lines[0]); strings.Join(got, " ") != strings.Join(header, " ") {
		t.Errorf("columns %v, want %v\n%s", got, header, table)
	}
	fields := map[string]bool{}
	for _, f := range strings.Fields(lines[1]) {
		fields[f] = true
	}
	for _, w := range row {
		if !fields[w] {
			t.Errorf("row %q has no %q\n%s", lines[1], w, table)
		}
	}
}
