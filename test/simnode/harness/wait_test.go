package harness

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"nvdra.local/test/simnode/nodeconfig"
)

// WaitReady's error names each node that is not Ready and why: its Ready
// condition and taints as last seen, or that it never registered.
func TestNotReadyNodesSaysWhy(t *testing.T) {
	node := func(name string) *Node { return &Node{Config: nodeconfig.Config{Name: name, Dir: "/tmp/sn1/" + name}} }
	nodes := []*Node{node("sim-node-0"), node("sim-node-1"), node("sim-node-2")}
	since := metav1.NewTime(time.Date(2026, 11, 28, 14, 5, 6, 0, time.UTC))
	tainted := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "sim-node-1"},
		Spec:       corev1.NodeSpec{Taints: []corev1.Taint{{Key: "node.kubernetes.io/not-ready", Effect: corev1.TaintEffectNoSchedule}}},
		Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{
			Type: corev1.NodeReady, Status: corev1.ConditionFalse, Reason: "KubeletNotReady",
			Message: "container runtime network not ready", LastTransitionTime: since,
		}}},
	}
	got := notReadyNodes(nodes,
		map[string]bool{"sim-node-0": true, "sim-node-1": false},
		map[string]*corev1.Node{"sim-node-1": tainted})
	for _, want := range []string{
		"sim-node-1 (Ready=False KubeletNotReady: container runtime network not ready (since 14:05:06); " +
			"taints [node.kubernetes.io/not-ready:NoSchedule]; log: /tmp/sn1/sim-node-1/node.log)",
		"sim-node-2 (no Node object; log: /tmp/sn1/sim-node-2/node.log)",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("notReadyNodes = %q, want it to contain %q", got, want)
		}
	}
	if strings.Contains(got, "sim-node-0") {
		t.Errorf("notReadyNodes = %q names sim-node-0, which is Ready", got)
	}
}
