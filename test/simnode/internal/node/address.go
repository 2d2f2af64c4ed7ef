package node

import (
	"context"
	"encoding/json"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	clientset "k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"
	"k8s.io/klog/v2"
)

// keepInternalIP makes the node's loopback address its only address, for as
// long as ctx lives. The kubelet refuses a loopback --node-ip ("nodeIP can't
// be loopback address", logged at every status update) and then leaves
// status.addresses alone, so what we write here stays. No Hostname address:
// the API server would try to resolve it before the InternalIP.
func keepInternalIP(ctx context.Context, client clientset.Interface, nodeName, ip string) {
	logger := klog.FromContext(ctx)
	selector := fields.OneTermEqualSelector("metadata.name", nodeName).String()
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.FieldSelector = selector
			return client.CoreV1().Nodes().List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector = selector
			return client.CoreV1().Nodes().Watch(ctx, o)
		},
	}
	want := []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: ip}}
	patch, _ := json.Marshal(map[string]any{"status": map[string]any{"addresses": want}})
	_, err := watchtools.UntilWithSync(ctx, lw, &corev1.Node{}, nil, func(e watch.Event) (bool, error) {
		n, ok := e.Object.(*corev1.Node)
		if !ok || e.Type == watch.Deleted || hasOnly(n.Status.Addresses, want[0]) {
			return false, nil
		}
		if _, err := client.CoreV1().Nodes().PatchStatus(ctx, nodeName, patch); err != nil {
			// The next event (the kubelet updates status every few seconds)
			// retries.
			logger.Error(err, "Setting the node's InternalIP failed", "ip", ip)
		}
		return false, nil
	})
	if err != nil && ctx.Err() == nil {
		logger.Error(fmt.Errorf("watch own node: %w", err), "InternalIP no longer maintained")
	}
}

func hasOnly(addrs []corev1.NodeAddress, want corev1.NodeAddress) bool {
	return len(addrs) == 1 && addrs[0] == want
}
