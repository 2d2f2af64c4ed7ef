package e2e

// The debug bundle (deployments/debug-bundle/nvidia-dra-debug-bundle, issue
// #25 point 6; docs/debug-bundle.md), run against the chart's cluster of
// TestHelmChartOnSimulatedNodes (no cluster of its own): with a GPU claim
// prepared on sim-node-0 and a ComputeDomain whose channel claim is prepared
// on sim-node-1, the cluster mode's archive holds the slices, claims,
// domain, clique, events and the logs of the plugin pods, and no Secret
// data; `--node` narrows the node-level parts; the node mode, pointed at a
// simulated node's folder (its `/`), holds each plugin's checkpoint, the
// prepared claims' CDI specs and the kubelet's DRA checkpoint. Bad input
// (an unknown flag, a node that does not exist) fails with a message and
// no archive.

import (
	"bytes"
	"context"
	"encoding/base64"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"nvdra.local/test/simnode/harness"
)

const debugBundleScript = "deployments/debug-bundle/nvidia-dra-debug-bundle"

// bundleRun is one run of the bundle command.
type bundleRun struct {
	code           int
	stdout, stderr string
}

func runDebugBundle(ctx context.Context, t *testing.T, kubectl string, args ...string) bundleRun {
	t.Helper()
	script, err := harness.FindCheckoutPath(debugBundleScript)
	must(t, "debug bundle script", err)
	cmd := exec.CommandContext(ctx, script, args...)
	cmd.Env = append(os.Environ(), "KUBECTL="+kubectl)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	err = cmd.Run()
	r := bundleRun{stdout: stdout.String(), stderr: stderr.String()}
	if ee, ok := err.(*exec.ExitError); ok {
		r.code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("run %s: %v", script, err)
	}
	t.Logf("nvidia-dra-debug-bundle %s: exit %d in %.1f s", strings.Join(args, " "), r.code, time.Since(start).Seconds())
	return r
}

// untarBundle unpacks archive into a folder of its own and returns the
// bundle's top folder (the archive holds exactly one).
func untarBundle(t *testing.T, archive string) string {
	t.Helper()
	dir := t.TempDir()
	if out, err := exec.Command("tar", "-xzf", archive, "-C", dir).CombinedOutput(); err != nil {
		t.Fatalf("untar %s: %v\n%s", archive, err, out)
	}
	entries, err := os.ReadDir(dir)
	must(t, "read "+dir, err)
	if len(entries) != 1 || !entries[0].IsDir() || !strings.HasPrefix(entries[0].Name(), "nvidia-dra-debug-bundle-") {
		t.Fatalf("archive %s: want one top folder nvidia-dra-debug-bundle-*, got %v", archive, entries)
	}
	return filepath.Join(dir, entries[0].Name())
}

// bundleFile reads a file of the bundle, failing the test (with the
// bundle's FAILURES.txt) when it is absent.
func bundleFile(t *testing.T, top, rel string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(top, rel))
	if err != nil {
		failures, _ := os.ReadFile(filepath.Join(top, "FAILURES.txt"))
		t.Fatalf("bundle has no %s (%v); its FAILURES.txt:\n%s", rel, err, failures)
	}
	return string(data)
}

func wantIn(t *testing.T, what, text string, wants ...string) {
	t.Helper()
	for _, w := range wants {
		if !strings.Contains(text, w) {
			t.Errorf("%s: no %q in it", what, w)
		}
	}
}

func checkDebugBundle(ctx context.Context, t *testing.T, env *environment, client kubernetes.Interface) {
	t.Helper()
	start := time.Now()
	kubectl, err := harness.DefaultBinary("kubectl")
	must(t, "kubectl", err)
	restConfig, err := clientcmd.BuildConfigFromFlags("", env.cp.Kubeconfig)
	must(t, "rest config", err)
	dyn, err := dynamic.NewForConfig(restConfig)
	must(t, "dynamic client", err)
	const ns, domain, gpuClaim = "bundle-e2e", "bundle-domain", "bundle-gpu"
	gpuNode, cdNode := env.nodes.Nodes[0].Config.Name, env.nodes.Nodes[1].Config.Name
	must(t, "namespace", create(ctx, client.CoreV1().Namespaces(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))

	// A ComputeDomain with a worker on cdNode (its channel claim prepared by
	// the compute-domain plugin, its clique made by the IMEX daemon) and a
	// one-GPU claim prepared on gpuNode.
	cd, err := dyn.Resource(cdGVR).Namespace(ns).Create(ctx, &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "resource.nvidia.com/v1beta1",
		"kind":       "ComputeDomain",
		"metadata":   map[string]any{"name": domain, "namespace": ns},
		"spec": map[string]any{
			"numNodes": int64(1),
			"channel":  map[string]any{"resourceClaimTemplate": map[string]any{"name": domain + "-channel"}},
		},
	}}, metav1.CreateOptions{})
	must(t, "ComputeDomain", err)
	waitForObject(ctx, t, "workload claim template", func(ctx context.Context) (bool, error) {
		_, err := client.ResourceV1().ResourceClaimTemplates(ns).Get(ctx, domain+"-channel", metav1.GetOptions{})
		return err == nil, ignoreNotFound(err)
	}, client.ResourceV1().ResourceClaimTemplates(ns).Watch)
	cdEnv := &cdEnvironment{environment: env, client: client, dyn: dyn}
	cdEnv.createWorker(ctx, t, ns, "bundle-worker", cdNode, domain+"-channel")
	_, err = client.ResourceV1().ResourceClaims(ns).Create(ctx, &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Name: gpuClaim},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{
			Name: "gpu", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: gpuClass}}}}},
	}, metav1.CreateOptions{})
	must(t, "GPU claim", err)
	_, err = client.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "bundle-gpu-pod"},
		Spec: corev1.PodSpec{
			TerminationGracePeriodSeconds: ptr(int64(5)),
			NodeSelector:                  map[string]string{"kubernetes.io/hostname": gpuNode},
			ResourceClaims:                []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimName: ptr(gpuClaim)}},
			Tolerations:                   []corev1.Toleration{{Key: "nvidia.com/gpu", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}},
			Containers: []corev1.Container{{
				Name: "ctr", Image: workImage, Command: []string{"sh", "-c", "trap 'exit 0' TERM; sleep 9999 & wait"},
				Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "gpu"}}},
			}},
		},
	}, metav1.CreateOptions{})
	must(t, "GPU pod", err)
	running := func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodRunning }
	waitForPodIn(ctx, t, client, ns, "bundle-gpu-pod", running)
	waitForPodIn(ctx, t, client, ns, "bundle-worker", running)
	gpuUID := cdEnv.claimUID(ctx, t, ns, gpuClaim)
	channelClaim := cdEnv.workerClaim(ctx, t, ns, "bundle-worker")
	channelUID := cdEnv.claimUID(ctx, t, ns, channelClaim)
	cliques, err := dyn.Resource(cliqueGVR).Namespace(chartNamespace).List(ctx, metav1.ListOptions{LabelSelector: cdLabelKey + "=" + string(cd.GetUID())})
	must(t, "cliques", err)
	plugins, err := client.CoreV1().Pods(chartNamespace).List(ctx, metav1.ListOptions{LabelSelector: chartComponentLabel + "=kubelet-plugin"})
	must(t, "plugin pods", err)
	pluginOn := map[string]string{}
	for _, p := range plugins.Items {
		pluginOn[p.Spec.NodeName] = p.Name
	}
	t.Logf("debug bundle: GPU claim %s on %s, channel claim %s on %s, %d cliques: %.1f s",
		gpuUID, gpuNode, channelUID, cdNode, len(cliques.Items), time.Since(start).Seconds())

	out := t.TempDir()

	// Cluster mode.
	archive := filepath.Join(out, "cluster.tar.gz")
	r := runDebugBundle(ctx, t, kubectl, "--kubeconfig", env.cp.Kubeconfig, "--output", archive)
	if r.code != 0 {
		t.Fatalf("cluster mode: exit %d\n%s", r.code, r.stderr)
	}
	top := untarBundle(t, archive)
	for _, f := range []string{"SUMMARY.txt", "INDEX.txt", "FAILURES.txt"} {
		bundleFile(t, top, f)
	}
	index := bundleFile(t, top, "INDEX.txt")
	slices := bundleFile(t, top, "cluster/resourceslices.yaml")
	wantIn(t, "cluster/resourceslices.yaml", slices, "driver: "+gpuDriverName, "driver: "+cdDriverName,
		"nodeName: "+gpuNode, "nodeName: "+cdNode)
	wantIn(t, "cluster/resourceclaims.yaml", bundleFile(t, top, "cluster/resourceclaims.yaml"),
		"name: "+gpuClaim, "uid: "+gpuUID, "name: "+channelClaim, "uid: "+channelUID)
	wantIn(t, "cluster/resourceclaimtemplates.yaml", bundleFile(t, top, "cluster/resourceclaimtemplates.yaml"), "name: "+domain+"-channel")
	wantIn(t, "cluster/deviceclasses.yaml", bundleFile(t, top, "cluster/deviceclasses.yaml"), "name: "+gpuClass)
	wantIn(t, "cluster/computedomains.yaml", bundleFile(t, top, "cluster/computedomains.yaml"), "name: "+domain, "uid: "+string(cd.GetUID()))
	cliqueFile := bundleFile(t, top, "cluster/computedomaincliques.yaml")
	for _, c := range cliques.Items {
		wantIn(t, "cluster/computedomaincliques.yaml", cliqueFile, "name: "+c.GetName())
	}
	wantIn(t, "cluster/crds.yaml", bundleFile(t, top, "cluster/crds.yaml"), "name: computedomains.resource.nvidia.com")
	wantIn(t, "cluster/events.yaml", bundleFile(t, top, "cluster/events.yaml"), "name: bundle-gpu-pod", "name: bundle-worker")
	wantIn(t, "namespace/pods.yaml", bundleFile(t, top, "namespace/pods.yaml"), "name: "+pluginOn[gpuNode], "name: "+pluginOn[cdNode])
	wantIn(t, "namespace/daemonsets.yaml", bundleFile(t, top, "namespace/daemonsets.yaml"), "name: "+chartName+"-kubelet-plugin",
		"name: computedomain-daemon-"+string(cd.GetUID()))
	wantIn(t, "namespace/deployments.yaml", bundleFile(t, top, "namespace/deployments.yaml"), "name: "+chartName+"-controller")
	for _, node := range []string{gpuNode, cdNode} {
		pod := pluginOn[node]
		for _, c := range []string{"gpus", "compute-domains", "init-container"} {
			log := bundleFile(t, top, filepath.Join("logs", pod, c+".log"))
			if strings.TrimSpace(log) == "" {
				t.Errorf("logs/%s/%s.log is empty", pod, c)
			}
			wantIn(t, "INDEX.txt", index, "logs/"+pod+"/"+c+".log")
		}
	}
	// The plugins' checkpoints through kubectl exec, or (simulated nodes
	// have no streaming server) a note that says to use node mode.
	for node, uid := range map[string]string{gpuNode: gpuUID, cdNode: channelUID} {
		checkpoint := filepath.Join("nodes", node, "files", "var", "lib", "kubelet", "plugins", gpuDriverName, "checkpoint.json")
		if node == cdNode {
			checkpoint = filepath.Join("nodes", node, "files", "var", "lib", "kubelet", "plugins", cdDriverName, "checkpoint.json")
		}
		if _, err := os.Stat(filepath.Join(top, checkpoint)); err == nil {
			wantIn(t, checkpoint, bundleFile(t, top, checkpoint), uid)
			continue
		}
		missing := bundleFile(t, top, filepath.Join("nodes", node, "NODE-FILES-MISSING.txt"))
		wantIn(t, "nodes/"+node+"/NODE-FILES-MISSING.txt", missing, "--node-root / --node "+node, "docs/debug-bundle.md#node-mode")
		wantIn(t, "FAILURES.txt", bundleFile(t, top, "FAILURES.txt"), "checkpoint and CDI specs on node "+node)
	}
	// No Secret data: the webhook's certificate Secret's key is nowhere.
	secret, err := client.CoreV1().Secrets(chartNamespace).Get(ctx, chartName+"-webhook-cert", metav1.GetOptions{})
	must(t, "webhook secret", err)
	key := secret.Data["tls.key"]
	if len(key) == 0 {
		t.Fatalf("secret %s has no tls.key", secret.Name)
	}
	for _, needle := range []string{base64.StdEncoding.EncodeToString(key), strings.TrimSpace(strings.Split(string(key), "\n")[1])} {
		must(t, "walk bundle", filepath.WalkDir(top, func(path string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			data, err := os.ReadFile(path)
			if err == nil && bytes.Contains(data, []byte(needle)) {
				t.Errorf("%s holds the webhook Secret's tls.key", path)
			}
			return err
		}))
	}
	t.Logf("cluster bundle: %s", strings.TrimSpace(bundleFile(t, top, "SUMMARY.txt")))

	// Cluster mode for one node: the other node's slices and plugin pod logs
	// stay out; Events of the namespace asked for only; no exec.
	archive = filepath.Join(out, "one-node.tar.gz")
	r = runDebugBundle(ctx, t, kubectl, "--kubeconfig", env.cp.Kubeconfig, "--node", gpuNode, "-o", archive,
		"--event-namespaces", ns, "--no-exec")
	if r.code != 0 {
		t.Fatalf("cluster mode --node %s: exit %d\n%s", gpuNode, r.code, r.stderr)
	}
	top = untarBundle(t, archive)
	slices = bundleFile(t, top, "cluster/resourceslices.yaml")
	wantIn(t, "--node: cluster/resourceslices.yaml", slices, "nodeName: "+gpuNode)
	if strings.Contains(slices, "nodeName: "+cdNode) {
		t.Errorf("--node %s: resourceslices.yaml holds %s's slices", gpuNode, cdNode)
	}
	bundleFile(t, top, filepath.Join("logs", pluginOn[gpuNode], "gpus.log"))
	if _, err := os.Stat(filepath.Join(top, "logs", pluginOn[cdNode])); err == nil {
		t.Errorf("--node %s: the bundle holds the logs of %s's plugin pod %s", gpuNode, cdNode, pluginOn[cdNode])
	}
	bundleFile(t, top, filepath.Join("logs", waitForDeploymentPod(ctx, t, client, chartName+"-controller"), "compute-domain.log"))
	wantIn(t, "--event-namespaces: cluster/events-"+ns+".yaml", bundleFile(t, top, "cluster/events-"+ns+".yaml"), "name: bundle-gpu-pod")
	if _, err := os.Stat(filepath.Join(top, "cluster", "events.yaml")); err == nil {
		t.Errorf("--event-namespaces %s: the bundle holds every namespace's events.yaml", ns)
	}
	wantIn(t, "--no-exec: NODE-FILES-MISSING.txt", bundleFile(t, top, filepath.Join("nodes", gpuNode, "NODE-FILES-MISSING.txt")), "--no-exec")
	if _, err := os.Stat(filepath.Join(top, "nodes", cdNode)); err == nil {
		t.Errorf("--node %s: the bundle has a folder for %s", gpuNode, cdNode)
	}

	// Node mode on each node's folder: the plugins' checkpoints with the
	// prepared claim, its CDI spec, the kubelet's DRA checkpoint, the plugin
	// pod's logs.
	for node, want := range map[string]struct{ driver, uid string }{gpuNode: {gpuDriverName, gpuUID}, cdNode: {cdDriverName, channelUID}} {
		n := env.node(t, node)
		archive = filepath.Join(out, node+".tar.gz")
		r = runDebugBundle(ctx, t, kubectl, "--node-root", n.Config.Dir, "--node", node, "--output", archive)
		if r.code != 0 {
			t.Fatalf("node mode on %s: exit %d\n%s", node, r.code, r.stderr)
		}
		top = untarBundle(t, archive)
		files := filepath.Join("nodes", node, "files")
		for _, driver := range []string{gpuDriverName, cdDriverName} {
			checkpoint := bundleFile(t, top, filepath.Join(files, "var", "lib", "kubelet", "plugins", driver, "checkpoint.json"))
			if driver == want.driver {
				wantIn(t, node+": "+driver+" checkpoint.json", checkpoint, want.uid)
			}
		}
		spec := filepath.Join(files, pluginCDIRoot, "k8s."+want.driver+"-claim_"+want.uid+".yaml")
		wantIn(t, node+": the claim's CDI spec", bundleFile(t, top, spec), want.uid)
		wantIn(t, node+": the kubelet's DRA checkpoint", bundleFile(t, top, filepath.Join(files, "var", "lib", "kubelet", "dra_manager_state")), want.uid)
		if _, err := os.Stat(filepath.Join(top, files, "var", "lib", "kubelet", "plugins", gpuDriverName, "nvidia-cdi-hook")); err == nil {
			t.Errorf("%s: node mode copied the nvidia-cdi-hook binary", node)
		}
		logs, _ := filepath.Glob(filepath.Join(top, files, "var", "log", "pods", chartNamespace+"_"+pluginOn[node]+"_*", "gpus", "*.log"))
		if len(logs) == 0 {
			t.Errorf("%s: node mode has no log of %s's gpus container", node, pluginOn[node])
		}
		wantIn(t, node+": listing.txt", bundleFile(t, top, filepath.Join("nodes", node, "listing.txt")), "dra.sock")
		if failures := bundleFile(t, top, "FAILURES.txt"); strings.TrimSpace(failures) != "" {
			t.Errorf("node mode on %s recorded failures:\n%s", node, failures)
		}
	}

	// Node mode writing the archive to stdout (for ssh and kubectl debug).
	r = runDebugBundle(ctx, t, kubectl, "--node-root", env.node(t, gpuNode).Config.Dir+"/", "--node", gpuNode, "-o", "-")
	if r.code != 0 {
		t.Fatalf("node mode to stdout: exit %d\n%s", r.code, r.stderr)
	}
	archive = filepath.Join(out, "stdout.tar.gz")
	must(t, "write stdout", os.WriteFile(archive, []byte(r.stdout), 0o644))
	top = untarBundle(t, archive)
	wantIn(t, "node mode to stdout: checkpoint.json", bundleFile(t, top,
		filepath.Join("nodes", gpuNode, "files", "var", "lib", "kubelet", "plugins", gpuDriverName, "checkpoint.json")), gpuUID)

	// Bad input: a message naming the problem, and no archive.
	for _, bad := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--no-such-flag"}, 2, "unknown argument '--no-such-flag'"},
		{[]string{"--node"}, 2, "--node needs a value"},
		{[]string{"--kubeconfig", env.cp.Kubeconfig, "--node", "no-such-node"}, 1, `nodes "no-such-node" not found`},
		{[]string{"--node-root", filepath.Join(out, "no-such-folder")}, 1, "is not a folder"},
	} {
		archive = filepath.Join(out, "bad.tar.gz")
		r = runDebugBundle(ctx, t, kubectl, append(bad.args, "--output", archive)...)
		if r.code != bad.code || !strings.Contains(r.stderr, bad.want) {
			t.Errorf("%v: exit %d, stderr %q; want exit %d and %q", bad.args, r.code, r.stderr, bad.code, bad.want)
		}
		if _, err := os.Stat(archive); err == nil {
			t.Errorf("%v: wrote %s", bad.args, archive)
		}
	}

	// Clean up for the rest of the chart test (upgrade, uninstall).
	for _, p := range []string{"bundle-gpu-pod", "bundle-worker"} {
		must(t, "delete pod "+p, client.CoreV1().Pods(ns).Delete(ctx, p, metav1.DeleteOptions{}))
	}
	for _, p := range []string{"bundle-gpu-pod", "bundle-worker"} {
		waitForPodGone(ctx, t, client, ns, p)
	}
	must(t, "delete GPU claim", client.ResourceV1().ResourceClaims(ns).Delete(ctx, gpuClaim, metav1.DeleteOptions{}))
	must(t, "delete ComputeDomain", dyn.Resource(cdGVR).Namespace(ns).Delete(ctx, domain, metav1.DeleteOptions{}))
	waitForObject(ctx, t, "ComputeDomain "+domain+" gone", func(ctx context.Context) (bool, error) {
		_, err := dyn.Resource(cdGVR).Namespace(ns).Get(ctx, domain, metav1.GetOptions{})
		return apierrors.IsNotFound(err), ignoreNotFound(err)
	}, dyn.Resource(cdGVR).Namespace(ns).Watch)
	t.Logf("debug bundle checks: %.1f s", time.Since(start).Seconds())
}

// waitForDeploymentPod returns the name of a pod of the chart's Deployment
// name (by the chart's component label).
func waitForDeploymentPod(ctx context.Context, t *testing.T, client kubernetes.Interface, name string) string {
	t.Helper()
	component := strings.TrimPrefix(name, chartName+"-")
	pods, err := client.CoreV1().Pods(chartNamespace).List(ctx, metav1.ListOptions{LabelSelector: chartComponentLabel + "=" + component})
	must(t, "pods of "+name, err)
	if len(pods.Items) == 0 {
		t.Fatalf("no pod of %s", name)
	}
	return pods.Items[0].Name
}
