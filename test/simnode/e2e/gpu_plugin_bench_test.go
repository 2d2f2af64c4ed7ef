package e2e

// NodePrepareResources / NodeUnprepareResources latency of our
// gpu-kubelet-plugin as the real kubelet sees it: one h100-sxm simulated
// node running the plugin as a DaemonSet (gpu_plugin_env_test.go), then N
// pods created and deleted one after another, each with a one-GPU claim from
// a template. Printed, not asserted (a benchmark, not a test); runs only with
// SIMNODE_GPU_BENCH_PODS=N, and writes its figures as JSON to
// SIMNODE_GPU_BENCH_OUT when set (bench/collect.py reads it).
//
// The figures are the kubelet's own: its metrics endpoint (the node's kubelet
// on <ip>:10250, anonymous access) serves the histogram
// dra_grpc_operations_duration_seconds{driver_name,method_name,grpc_status_code},
// observed by a client interceptor around each gRPC call to the plugin
// (pkg/kubelet/cm/dra/plugin/dra_plugin.go), and
// dra_operations_duration_seconds{operation_name,is_error}, the DRA manager's
// whole PrepareResources / UnprepareResources of a pod (claim lookups,
// checkpoint, the gRPC call). Their buckets start at 0.1 s, far too coarse
// for a few milliseconds, but _sum is exact: pods go one at a time, so the
// change of _sum over one pod, divided by the change of _count (1), is that
// pod's call.

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

const (
	draPrepareMethod   = "/k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin/NodePrepareResources"
	draUnprepareMethod = "/k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin/NodeUnprepareResources"
)

func TestGPUPluginKubeletPrepareLatency(t *testing.T) {
	pods, _ := strconv.Atoi(os.Getenv("SIMNODE_GPU_BENCH_PODS"))
	if pods <= 0 {
		t.Skip("set SIMNODE_GPU_BENCH_PODS=N to time N one-GPU pods through the kubelet")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 9*time.Minute)
	defer cancel()
	env := startGPUEnvironment(ctx, t, h100Profile)
	node := env.nodes.Nodes[0]
	metrics := kubeletMetrics{url: fmt.Sprintf("https://%s:%d/metrics", node.Config.IP, node.Config.KubeletPort),
		client: &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
			// The node's self-signed serving certificate, on loopback.
			TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}}

	s := env.scenario(ctx, t, "gpu-bench")
	s.claimTemplate("single-gpu", deviceRequest("gpu", gpuClass))
	var grpcPrepare, grpcUnprepare, podPrepare, podUnprepare []float64
	extraCalls := 0
	before := metrics.scrape(t)
	for i := 0; i < pods; i++ {
		pod := s.runPod(fmt.Sprintf("pod-%d", i), []string{"ctr"}, templateClaim("gpu", "single-gpu"))
		after := metrics.waitFor(ctx, t, before, grpcKey(draPrepareMethod), managerKey("PrepareResources"))
		grpcPrepare = append(grpcPrepare, after.delta(before, grpcKey(draPrepareMethod), &extraCalls))
		podPrepare = append(podPrepare, after.delta(before, managerKey("PrepareResources"), &extraCalls))
		before = after

		must(t, "delete pod", s.client.CoreV1().Pods(s.ns).Delete(ctx, pod.Name, metav1.DeleteOptions{}))
		// The manager's histogram is observed after the gRPC call returns.
		after = metrics.waitFor(ctx, t, before, grpcKey(draUnprepareMethod), managerKey("UnprepareResources"))
		grpcUnprepare = append(grpcUnprepare, after.delta(before, grpcKey(draUnprepareMethod), &extraCalls))
		podUnprepare = append(podUnprepare, after.delta(before, managerKey("UnprepareResources"), &extraCalls))
		waitForPodGone(ctx, t, s.client, s.ns, pod.Name)
		before = metrics.scrape(t)
	}
	if extraCalls > 0 {
		t.Logf("%d pods needed more than one call (retries): their figure is the mean of their calls", extraCalls)
	}

	out := map[string]any{
		"pods":                pods,
		"extra_calls":         extraCalls,
		"grpc_prepare":        percentiles(grpcPrepare),
		"grpc_unprepare":      percentiles(grpcUnprepare),
		"manager_prepare":     percentiles(podPrepare),
		"manager_unprepare":   percentiles(podUnprepare),
		"grpc_prepare_all_ms": roundAll(grpcPrepare),
	}
	for _, row := range []struct{ name, key string }{
		{"kubelet gRPC NodePrepareResources", "grpc_prepare"},
		{"kubelet gRPC NodeUnprepareResources", "grpc_unprepare"},
		{"kubelet DRA manager PrepareResources", "manager_prepare"},
		{"kubelet DRA manager UnprepareResources", "manager_unprepare"},
	} {
		p := out[row.key].(map[string]float64)
		fmt.Printf("%-40s p50 %7.3f ms  p99 %7.3f ms  max %7.3f ms  mean %7.3f ms  (%d pods)\n",
			row.name, p["p50_ms"], p["p99_ms"], p["max_ms"], p["mean_ms"], pods)
	}
	if path := os.Getenv("SIMNODE_GPU_BENCH_OUT"); path != "" {
		data, err := json.MarshalIndent(out, "", "  ")
		must(t, "json", err)
		must(t, "write "+path, os.WriteFile(path, append(data, '\n'), 0o644))
	}
}

// metricKey names one series' _sum and _count.
type metricKey struct{ name, labels string }

// grpcKey is the kubelet's gRPC histogram for one method of our driver,
// successful calls.
func grpcKey(method string) metricKey {
	return metricKey{"dra_grpc_operations_duration_seconds",
		fmt.Sprintf(`driver_name="%s",grpc_status_code="OK",method_name="%s"`, gpuDriverName, method)}
}

// managerKey is the DRA manager's histogram of one pod's operation, success.
func managerKey(operation string) metricKey {
	return metricKey{"dra_operations_duration_seconds", fmt.Sprintf(`is_error="false",operation_name="%s"`, operation)}
}

// sample is one scrape: series ("name{labels}" with labels sorted, as the
// kubelet writes them) -> value, for _sum and _count lines.
type sample map[string]float64

func (s sample) sum(k metricKey) float64   { return s[k.name+"_sum{"+k.labels+"}"] }
func (s sample) count(k metricKey) float64 { return s[k.name+"_count{"+k.labels+"}"] }

// delta is the mean duration in ms of the observations of k between
// `before` and s; calls beyond one are added to *extra.
func (s sample) delta(before sample, k metricKey, extra *int) float64 {
	n := s.count(k) - before.count(k)
	if n <= 0 {
		return math.NaN()
	}
	*extra += int(n) - 1
	return (s.sum(k) - before.sum(k)) / n * 1000
}

type kubeletMetrics struct {
	url    string
	client *http.Client
}

func (m kubeletMetrics) scrape(t *testing.T) sample {
	t.Helper()
	resp, err := m.client.Get(m.url)
	if err != nil {
		t.Fatalf("kubelet metrics: %v", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("kubelet metrics: %s", resp.Status)
	}
	out := sample{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "dra_") || !(strings.Contains(line, "_sum{") || strings.Contains(line, "_count{")) {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("kubelet metrics line %q: %v", line, err)
		}
		out[line[:i]] = v
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("kubelet metrics: %v", err)
	}
	return out
}

// waitFor scrapes until the count of every key has grown past before's.
// The kubelet offers no event for a metric, so this polls, every 20 ms,
// bounded by 2 min.
func (m kubeletMetrics) waitFor(ctx context.Context, t *testing.T, before sample, keys ...metricKey) sample {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	for {
		s := m.scrape(t)
		grown := true
		for _, k := range keys {
			grown = grown && s.count(k) > before.count(k)
		}
		if grown {
			return s
		}
		select {
		case <-ctx.Done():
			var seen []string
			for series := range s {
				seen = append(seen, series)
			}
			sort.Strings(seen)
			t.Fatalf("kubelet metrics %v did not all grow past %v (series seen: %v): %v", keys, before, seen, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// percentiles gives nearest-rank p50 and p99, max and mean, in ms.
func percentiles(ms []float64) map[string]float64 {
	sorted := append([]float64(nil), ms...)
	sort.Float64s(sorted)
	rank := func(p float64) float64 {
		i := int(math.Ceil(p * float64(len(sorted))))
		return sorted[min(max(i, 1), len(sorted))-1]
	}
	mean := 0.0
	for _, v := range sorted {
		mean += v
	}
	mean /= float64(len(sorted))
	r := func(v float64) float64 { return math.Round(v*1000) / 1000 }
	return map[string]float64{"p50_ms": r(rank(0.5)), "p99_ms": r(rank(0.99)), "max_ms": r(sorted[len(sorted)-1]), "mean_ms": r(mean)}
}

func roundAll(ms []float64) []float64 {
	out := make([]float64, len(ms))
	for i, v := range ms {
		out[i] = math.Round(v*1000) / 1000
	}
	return out
}
