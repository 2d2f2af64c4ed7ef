package e2e

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"nvdra.local/test/simnode/harness"
)

// environment is one control plane and its simulated nodes, torn down by the
// test's cleanup (and, should the test process die, by the death signals).
type environment struct {
	cp    *harness.ControlPlane
	nodes *harness.Cluster
}

func startEnvironment(t *testing.T, nodes int) *environment {
	t.Helper()
	driver, err := harness.DefaultBinary("simnode-test-driver")
	if err != nil {
		t.Fatal(err)
	}
	return startEnvironmentWith(t, harness.Options{Nodes: nodes, Images: map[string]string{driverImage: driver}})
}

// startEnvironmentWith starts a control plane and opts.Nodes nodes; opts.Dir
// and opts.Kubeconfig are filled in here.
func startEnvironmentWith(t *testing.T, opts harness.Options) *environment {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("simulated containers need mount namespaces: run as root")
	}
	// Short folders: kubelet plugin sockets live below them and unix socket
	// paths are limited to 108 bytes (t.TempDir's names are too long).
	root, err := os.MkdirTemp("", "sn")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if keep := os.Getenv("SIMNODE_KEEP"); keep == "always" || (t.Failed() && keep != "") {
			t.Logf("kept %s", root)
			return
		}
		_ = os.RemoveAll(root)
	})
	cp, err := harness.StartControlPlane(filepath.Join(root, "cp"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cp.Stop)
	opts.Dir, opts.Kubeconfig = root, cp.Kubeconfig
	cluster, err := harness.Start(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cluster.Stop()
		if t.Failed() {
			for _, n := range cluster.Nodes {
				t.Logf("node %s log: %s", n.Config.Name, n.LogPath())
			}
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := cluster.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	return &environment{cp: cp, nodes: cluster}
}

func (e *environment) node(t *testing.T, name string) *harness.Node {
	t.Helper()
	for _, n := range e.nodes.Nodes {
		if n.Config.Name == name {
			return n
		}
	}
	t.Fatalf("pod on unknown node %q", name)
	return nil
}
