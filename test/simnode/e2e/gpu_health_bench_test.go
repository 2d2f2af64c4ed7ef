package e2e

// Device health latency (gate NVMLDeviceHealthCheck) on one simulated
// h100-sxm node (gpu_health_test.go's environment): a pod holds GPU x, then
// N times: XID 79 on x, timed to the taint in the ResourceSlice and to the
// pod's allocatedResourcesStatus Unhealthy, both as watches of the API
// server see them; then the operator's reset annotation, timed to the taint
// gone and the pod Healthy again. Printed, not asserted (a benchmark);
// runs only with SIMNODE_HEALTH_BENCH_OUT=<file>, where it writes its
// figures as JSON for bench/collect.py; SIMNODE_HEALTH_BENCH_INJECTIONS=N
// (default 50) sets the number of cycles.
//
// The clocks: an XID starts when the test appends it to the mock NVML's
// events file (the plugin wakes on inotify); a reset when the test's PATCH
// of the Node returns. The ends are when the test's informers (one on the
// node's slices, one on the pod) get the changed object, so each figure
// includes the API server's watch delivery.

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"

	"nvdra.local/test/simnode/harness"
)

func TestGPUDeviceHealthLatency(t *testing.T) {
	out := os.Getenv("SIMNODE_HEALTH_BENCH_OUT")
	if out == "" {
		t.Skip("set SIMNODE_HEALTH_BENCH_OUT=<file> to time XID -> taint and XID -> pod status on a simulated node")
	}
	injections := 50
	if v := os.Getenv("SIMNODE_HEALTH_BENCH_INJECTIONS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			t.Fatalf("SIMNODE_HEALTH_BENCH_INJECTIONS=%q: want a positive number", v)
		}
		injections = n
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	h := startHealthEnvironment(ctx, t)
	s := h.scenario(ctx, t, "gpu-health-bench")
	s.claimTemplate("one-gpu", deviceRequest("gpu", gpuClass))
	pod := s.runPod("holder", []string{"ctr"}, templateClaim("gpu", "one-gpu"))
	x := s.allocations(pod)[0].device
	xUUID := h.uuidOf(t, x)
	h.waitRegistration(ctx, t, xUUID)

	const (
		tainted = "tainted"
		clean   = "clean"
	)
	sliceStates := observe(ctx, t, h.sliceListWatch(), &resourceapi.ResourceSlice{}, func(slice *resourceapi.ResourceSlice) string {
		taints, ok := taintsByDevice([]resourceapi.ResourceSlice{*slice})[x]
		switch {
		case !ok:
			return "" // another slice
		case hasTaint(taintKeyXid, "79", resourceapi.DeviceTaintEffectNoSchedule)(taints):
			return tainted
		}
		return clean
	})
	podStates := observe(ctx, t, podListWatch(h.client, s.ns, ""), &corev1.Pod{}, func(p *corev1.Pod) string {
		if p.Name != pod.Name {
			return ""
		}
		health, _ := deviceHealthOf(p)
		return string(health)
	})
	// Where it starts: x clean, the pod's device reported Healthy.
	waitState(ctx, t, sliceStates, clean)
	waitState(ctx, t, podStates, string(corev1.ResourceHealthStatusHealthy))

	var toTaint, toUnhealthy, toCleared, toHealthy []float64
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	for range injections {
		injected := time.Now()
		must(t, "inject", h.nodes.InjectNVMLEvent(h.node, xUUID, harness.NVMLEventXid, 79))
		toTaint = append(toTaint, ms(waitState(ctx, t, sliceStates, tainted).Sub(injected)))
		toUnhealthy = append(toUnhealthy, ms(waitState(ctx, t, podStates, string(corev1.ResourceHealthStatusUnhealthy)).Sub(injected)))

		h.annotateReset(ctx, t, x)
		reset := time.Now()
		toCleared = append(toCleared, ms(waitState(ctx, t, sliceStates, clean).Sub(reset)))
		toHealthy = append(toHealthy, ms(waitState(ctx, t, podStates, string(corev1.ResourceHealthStatusHealthy)).Sub(reset)))
		// The same value again is no change: the next reset needs the
		// plugin to have removed this one.
		h.waitResetAnnotationGone(ctx, t)
	}

	results := map[string]any{
		"injections":                  injections,
		"xid_to_slice_taint":          percentiles(toTaint),
		"xid_to_pod_unhealthy":        percentiles(toUnhealthy),
		"reset_to_slice_cleared":      percentiles(toCleared),
		"reset_to_pod_healthy":        percentiles(toHealthy),
		"xid_to_slice_taint_all_ms":   roundAll(toTaint),
		"xid_to_pod_unhealthy_all_ms": roundAll(toUnhealthy),
	}
	for _, row := range []struct{ name, key string }{
		{"XID -> taint in the slice", "xid_to_slice_taint"},
		{"XID -> pod status Unhealthy", "xid_to_pod_unhealthy"},
		{"reset annotation -> taint gone", "reset_to_slice_cleared"},
		{"reset annotation -> pod status Healthy", "reset_to_pod_healthy"},
	} {
		p := results[row.key].(map[string]float64)
		fmt.Printf("gpu health: %-40s p50 %8.3f ms  p99 %8.3f ms  max %8.3f ms  mean %8.3f ms  (%d injections)\n",
			row.name, p["p50_ms"], p["p99_ms"], p["max_ms"], p["mean_ms"], injections)
	}
	data, err := json.MarshalIndent(results, "", "  ")
	must(t, "json", err)
	must(t, "write "+out, os.WriteFile(out, append(data, '\n'), 0o644))
}

// sliceListWatch lists and watches the node's gpu.nvidia.com slices.
func (h *healthEnvironment) sliceListWatch() cache.ListerWatcher {
	selector := h.sliceSelector()
	return &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.FieldSelector = selector
			return h.client.ResourceV1().ResourceSlices().List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector = selector
			return h.client.ResourceV1().ResourceSlices().Watch(ctx, o)
		},
	}
}

// stateAt is a state an observed object entered, and when the informer got
// it.
type stateAt struct {
	state string
	at    time.Time
}

// observe runs an informer on lw until the test ends and sends each change
// of state(object) ("" for objects that do not count), stamped when the
// informer's handler ran.
func observe[T runtime.Object](ctx context.Context, t *testing.T, lw cache.ListerWatcher, obj T, state func(T) string) <-chan stateAt {
	t.Helper()
	ctx, cancel := context.WithCancel(ctx)
	t.Cleanup(cancel)
	out := make(chan stateAt, 4096)
	last := ""
	// Handlers run one at a time on the informer's goroutine.
	on := func(o any) {
		typed, ok := o.(T)
		if !ok {
			return
		}
		if s := state(typed); s != "" && s != last {
			last = s
			out <- stateAt{state: s, at: time.Now()}
		}
	}
	_, informer := cache.NewInformerWithOptions(cache.InformerOptions{
		ListerWatcher: lw,
		ObjectType:    obj,
		Handler: cache.ResourceEventHandlerFuncs{
			AddFunc:    func(o any) { on(o) },
			UpdateFunc: func(_, o any) { on(o) },
		},
	})
	go informer.RunWithContext(ctx)
	if !cache.WaitForCacheSync(ctx.Done(), informer.HasSynced) {
		t.Fatalf("informer did not sync: %v", ctx.Err())
	}
	return out
}

// waitState reads states until `want` and returns when it was entered.
func waitState(ctx context.Context, t *testing.T, states <-chan stateAt, want string) time.Time {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	var seen []string
	for {
		select {
		case s := <-states:
			if s.state == want {
				return s.at
			}
			seen = append(seen, s.state)
		case <-ctx.Done():
			t.Fatalf("waiting for state %q (saw %v): %v", want, seen, ctx.Err())
		}
	}
}
