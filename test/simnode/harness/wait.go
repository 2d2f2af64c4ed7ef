package harness

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"
)

func isNotFound(err error) bool { return apierrors.IsNotFound(err) }

// WaitReady waits, on a watch of Node objects, until every node is Ready and
// has no taints (the node lifecycle controller removes not-ready taints).
// It fails early when a node process exits.
func (c *Cluster) WaitReady(ctx context.Context) error {
	want := map[string]bool{}
	var live []*Node
	for _, n := range c.Nodes {
		if !n.deleted {
			want[n.Config.Name] = true
			live = append(live, n)
		}
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for _, n := range live {
		go func(exited <-chan struct{}) {
			select {
			case <-exited:
				cancel()
			case <-ctx.Done():
			}
		}(n.exited)
	}
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			return c.client.CoreV1().Nodes().List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			return c.client.CoreV1().Nodes().Watch(ctx, o)
		},
	}
	ready := map[string]bool{}
	last := map[string]*corev1.Node{} // what the watch last said of each node, for the error
	_, err := watchtools.UntilWithSync(ctx, lw, &corev1.Node{}, nil, func(e watch.Event) (bool, error) {
		if n, ok := e.Object.(*corev1.Node); ok && want[n.Name] {
			ready[n.Name] = nodeReady(n) && len(n.Spec.Taints) == 0
			last[n.Name] = n
		}
		count := 0
		for _, r := range ready {
			if r {
				count++
			}
		}
		return count == len(want), nil
	})
	if err != nil {
		if n := c.Exited(); n != nil {
			return fmt.Errorf("node %s exited before it was Ready (log: %s)", n.Config.Name, n.LogPath())
		}
		return fmt.Errorf("waiting for %d nodes to be Ready: %w; not Ready: %s", len(want), err,
			notReadyNodes(live, ready, last))
	}
	return nil
}

// notReadyNodes says why each node of nodes is not in ready: its Ready
// condition and taints as last seen, or that no Node object was seen.
func notReadyNodes(nodes []*Node, ready map[string]bool, last map[string]*corev1.Node) string {
	var out []string
	for _, n := range nodes {
		name := n.Config.Name
		if ready[name] {
			continue
		}
		obj := last[name]
		if obj == nil {
			out = append(out, fmt.Sprintf("%s (no Node object; log: %s)", name, n.LogPath()))
			continue
		}
		why := "no Ready condition"
		for _, cond := range obj.Status.Conditions {
			if cond.Type == corev1.NodeReady {
				why = fmt.Sprintf("Ready=%s %s: %s (since %s)", cond.Status, cond.Reason, cond.Message,
					cond.LastTransitionTime.Format("15:04:05"))
			}
		}
		var taints []string
		for _, taint := range obj.Spec.Taints {
			taints = append(taints, taint.Key+":"+string(taint.Effect))
		}
		out = append(out, fmt.Sprintf("%s (%s; taints [%s]; log: %s)", name, why, strings.Join(taints, " "), n.LogPath()))
	}
	return strings.Join(out, ", ")
}

// DefaultBinary finds a tool built by test/cluster/build-tools: in
// $NVDRA_CLUSTER_BIN, else in .cache/cluster-bin of the enclosing checkout.
func DefaultBinary(name string) (string, error) {
	if dir := os.Getenv("NVDRA_CLUSTER_BIN"); dir != "" {
		return filepath.Join(dir, name), nil
	}
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for dir := wd; ; dir = filepath.Dir(dir) {
		candidate := filepath.Join(dir, ".cache", "cluster-bin", name)
		if _, err := os.Stat(candidate); err == nil {
			return candidate, nil
		}
		if dir == filepath.Dir(dir) {
			return "", errors.New(name + " not found: build it with test/cluster/build-tools or set NVDRA_CLUSTER_BIN")
		}
	}
}
