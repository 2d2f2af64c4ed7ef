package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"nvdra.local/test/simnode/harness"
	"nvdra.local/test/simnode/nodeconfig"
)

// TestCLI drives the simnode command as scripts will: `up` (with its own
// control plane) returns with the nodes Ready and leaves them running,
// `fault` reaches the running supervisor, `down` stops every process.
func TestCLI(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("simulated containers need mount namespaces: run as root")
	}
	simnode, err := harness.DefaultBinary("simnode")
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "snc")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	sim := func(args ...string) (string, error) {
		out, err := exec.Command(simnode, args...).CombinedOutput()
		return string(out), err
	}
	t.Cleanup(func() { _, _ = sim("down", "--dir", dir) })

	out, err := sim("up", "--dir", dir, "--nodes", "2")
	if err != nil {
		log, _ := os.ReadFile(filepath.Join(dir, "simnode.log"))
		t.Fatalf("simnode up: %v\n%s\nlog:\n%s", err, out, log)
	}
	t.Logf("up: %s", out)
	supervisor := readPid(t, filepath.Join(dir, "run.pid"))
	nodePids := []int{readPid(t, filepath.Join(dir, "pids", "sim-node-0.pid")), readPid(t, filepath.Join(dir, "pids", "sim-node-1.pid"))}

	config, err := clientcmd.BuildConfigFromFlags("", filepath.Join(dir, "kubeconfig"))
	if err != nil {
		t.Fatal(err)
	}
	client, err := kubernetes.NewForConfig(config)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	nodes, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil || len(nodes.Items) != 2 {
		t.Fatalf("nodes after up: %v (%d)", err, len(nodes.Items))
	}
	for i := range nodes.Items {
		if c := nodeCondition(&nodes.Items[i], "Ready"); c == nil || c.Status != "True" {
			t.Errorf("node %s not Ready after up: %+v", nodes.Items[i].Name, c)
		}
	}

	node1 := nodeconfig.Config{Name: "sim-node-1", Dir: filepath.Join(dir, "sim-node-1")}
	bootBefore, err := node1.BootID()
	if err != nil {
		t.Fatal(err)
	}
	if out, err := sim("fault", "--dir", dir, "reboot", "sim-node-1"); err != nil || strings.TrimSpace(out) != "rebooted" {
		t.Fatalf("fault reboot: %v %q", err, out)
	}
	if after, _ := node1.BootID(); after == bootBefore {
		t.Errorf("boot id of sim-node-1 unchanged by reboot (%s)", after)
	}
	if pid := readPid(t, filepath.Join(dir, "pids", "sim-node-1.pid")); pid == nodePids[1] {
		t.Errorf("sim-node-1 has the same pid %d after reboot", pid)
	} else {
		nodePids[1] = pid
	}
	waitForNode(ctx, t, client, "sim-node-1", func(n *corev1.Node) bool {
		return n.Status.NodeInfo.BootID != bootBefore
	})
	if out, err := sim("fault", "--dir", dir, "no-such-fault", "sim-node-0"); err == nil {
		t.Errorf("an unknown fault succeeded: %q", out)
	}
	if out, err := sim("fault", "--dir", dir, "partition", "sim-node-9"); err == nil {
		t.Errorf("a fault on an unknown node succeeded: %q", out)
	}

	if out, err := sim("down", "--dir", dir); err != nil {
		t.Fatalf("simnode down: %v\n%s", err, out)
	}
	for _, pid := range append([]int{supervisor}, nodePids...) {
		// A zombie has ended; reaping it is init's business (ours is slow).
		if f := procStatFields(pid); syscall.Kill(pid, 0) == nil && len(f) > 0 && f[0] != "Z" {
			t.Errorf("process %d still runs after down (state %s)", pid, f[0])
		}
	}
}

func readPid(t *testing.T, path string) int {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return pid
}
