package e2e

// The seed workflows of ComputeDomains (issue 9) on simulated GB200 nodes
// with the REAL compute-domain-controller, kubelet plugin and IMEX daemons,
// all installed by our Helm chart (cd_cluster_env_test.go).

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

func TestComputeDomainSeeds(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	c := startCDCluster(ctx, t, cdClusterOptions{Cliques: []int{2, 2}})

	// A domain on two nodes of one clique, two workers.
	start := time.Now()
	cd := c.CreateComputeDomain(ctx, t, cdSpec{Namespace: "seed-simple", Name: "simple", NumNodes: 2})
	nodes := c.NodesOfClique(0)
	for i, node := range nodes {
		c.createWorker(ctx, t, cd.namespace, fmt.Sprintf("worker-%d", i), node, cd.channelTemplate)
	}
	c.WaitForCDReady(ctx, t, cd, nodes)
	for i := range nodes {
		pod := waitForPodIn(ctx, t, c.Client, cd.namespace, fmt.Sprintf("worker-%d", i), func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodRunning })
		c.checkWorkerView(ctx, t, pod, true)
	}
	t.Logf("domain created to Ready with 2 workers Running: %.1f s", time.Since(start).Seconds())
}
