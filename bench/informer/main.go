// Command informer-go is the client-go side of the informer benchmark
// (bench/informer/run): it loads the API server with ResourceSlices, runs a
// client-go informer over them, and drives updates, so that our C++ informer
// is measured against client-go on the same cluster in the same run.
//
//	informer-go load     --kubeconfig K --slices 10000 --devices 8
//	informer-go informer --kubeconfig K --slices 10000 --updates 1000
//	informer-go update   --kubeconfig K --updates 1000
//
// The informer prints one JSON line when synced ({"event":"synced",...}) and
// one when it has seen every update ({"event":"done",...}); the runner waits
// for those lines instead of sleeping.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
)

const (
	driverName  = "bench.nvdra.example.com"
	updateLabel = "bench.nvdra.example.com/generation"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: informer-go load|informer|update [flags]")
		os.Exit(2)
	}
	fs := flag.NewFlagSet(os.Args[1], flag.ExitOnError)
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig of the cluster")
	slices := fs.Int("slices", 10000, "ResourceSlices to create / expect")
	devices := fs.Int("devices", 8, "devices per ResourceSlice")
	updates := fs.Int("updates", 1000, "updates to make / wait for")
	concurrency := fs.Int("concurrency", 32, "parallel requests when loading or updating")
	_ = fs.Parse(os.Args[2:])

	cfg, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		fail("kubeconfig: %v", err)
	}
	// Loading 10,000 objects at client-go's default 5 QPS would take half an
	// hour; the API server, not the client, is the limit here.
	cfg.QPS, cfg.Burst = 2000, 4000
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		fail("client: %v", err)
	}
	switch os.Args[1] {
	case "load":
		load(client, *slices, *devices, *concurrency)
	case "informer":
		runInformer(client, *slices, *updates)
	case "update":
		update(client, *updates, *concurrency)
	default:
		fail("unknown command %q", os.Args[1])
	}
}

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "informer-go: "+format+"\n", args...)
	os.Exit(1)
}

func sliceName(i int) string { return fmt.Sprintf("bench-slice-%05d", i) }

// newSlice is a realistic GPU-plugin slice: devices with the attributes and
// capacity the driver publishes.
func newSlice(i, devices int) *resourcev1.ResourceSlice {
	slice := &resourcev1.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: sliceName(i)},
		Spec: resourcev1.ResourceSliceSpec{
			Driver:   driverName,
			Pool:     resourcev1.ResourcePool{Name: fmt.Sprintf("node-%05d", i), ResourceSliceCount: 1},
			AllNodes: boolPtr(true),
		},
	}
	for d := 0; d < devices; d++ {
		uuid := fmt.Sprintf("GPU-%08x-0000-4000-8000-%012x", i, d)
		slice.Spec.Devices = append(slice.Spec.Devices, resourcev1.Device{
			Name: fmt.Sprintf("gpu-%d", d),
			Attributes: map[resourcev1.QualifiedName]resourcev1.DeviceAttribute{
				"type":                  {StringValue: strPtr("gpu")},
				"uuid":                  {StringValue: &uuid},
				"productName":           {StringValue: strPtr("NVIDIA H100 80GB HBM3")},
				"architecture":          {StringValue: strPtr("Hopper")},
				"cudaComputeCapability": {VersionValue: strPtr("9.0.0")},
				"driverVersion":         {VersionValue: strPtr("580.159.4")},
			},
			Capacity: map[resourcev1.QualifiedName]resourcev1.DeviceCapacity{
				"memory": {Value: resource.MustParse("81559Mi")},
			},
		})
	}
	return slice
}

func strPtr(s string) *string { return &s }
func boolPtr(b bool) *bool     { return &b }

// parallel runs fn(0..n-1) on `workers` goroutines and stops at the first error.
func parallel(n, workers int, fn func(i int) error) {
	var next atomic.Int64
	var wg sync.WaitGroup
	var once sync.Once
	var firstErr error
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				if err := fn(i); err != nil {
					once.Do(func() { firstErr = err })
					return
				}
			}
		}()
	}
	wg.Wait()
	if firstErr != nil {
		fail("%v", firstErr)
	}
}

func load(client kubernetes.Interface, slices, devices, workers int) {
	start := time.Now()
	parallel(slices, workers, func(i int) error {
		_, err := client.ResourceV1().ResourceSlices().Create(context.Background(), newSlice(i, devices), metav1.CreateOptions{})
		if err != nil && !strings.Contains(err.Error(), "already exists") {
			return fmt.Errorf("create %s: %w", sliceName(i), err)
		}
		return nil
	})
	emit(map[string]any{"event": "loaded", "slices": slices, "seconds": time.Since(start).Seconds()})
}

// update changes a label on `updates` distinct slices (one MODIFIED event each).
func update(client kubernetes.Interface, updates, workers int) {
	generation := strconv.FormatInt(time.Now().UnixNano(), 10)
	patch := []byte(fmt.Sprintf(`{"metadata":{"labels":{%q:%q}}}`, updateLabel, generation))
	start := time.Now()
	parallel(updates, workers, func(i int) error {
		_, err := client.ResourceV1().ResourceSlices().Patch(context.Background(), sliceName(i),
			types.MergePatchType, patch, metav1.PatchOptions{})
		if err != nil {
			return fmt.Errorf("patch %s: %w", sliceName(i), err)
		}
		return nil
	})
	emit(map[string]any{"event": "updated", "updates": updates, "seconds": time.Since(start).Seconds()})
}

func runInformer(client kubernetes.Interface, slices, updates int) {
	start := time.Now()
	factory := informers.NewSharedInformerFactory(client, 0)
	informer := factory.Resource().V1().ResourceSlices().Informer()
	var updatesSeen atomic.Int64
	done := make(chan struct{})
	var closeOnce sync.Once
	_, err := informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		UpdateFunc: func(oldObj, newObj any) {
			if updatesSeen.Add(1) == int64(updates) {
				closeOnce.Do(func() { close(done) })
			}
		},
	})
	if err != nil {
		fail("handler: %v", err)
	}
	stop := make(chan struct{})
	factory.Start(stop)
	if !cache.WaitForCacheSync(stop, informer.HasSynced) {
		fail("cache did not sync")
	}
	syncSeconds := time.Since(start).Seconds()
	if n := len(informer.GetStore().ListKeys()); n < slices {
		fail("synced with %d slices, want %d", n, slices)
	}
	cpuAtSync := cpuSeconds()
	emit(map[string]any{"event": "synced", "sync_seconds": syncSeconds, "rss_bytes": rssBytes(),
		"objects": len(informer.GetStore().ListKeys())})
	<-done
	cpu := cpuSeconds() - cpuAtSync
	emit(map[string]any{"event": "done", "updates": updates, "cpu_seconds": cpu,
		"cpu_seconds_per_1000_updates": cpu * 1000 / float64(updates), "rss_bytes": rssBytes()})
	close(stop)
	factory.Shutdown()
}

func emit(v map[string]any) {
	b, _ := json.Marshal(v)
	fmt.Println(string(b))
}

// rssBytes is VmRSS from /proc/self/status.
func rssBytes() int64 {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return -1
	}
	for _, line := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(line, "VmRSS:") {
			fields := strings.Fields(line)
			kb, _ := strconv.ParseInt(fields[1], 10, 64)
			return kb * 1024
		}
	}
	return -1
}

func cpuSeconds() float64 {
	var usage syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &usage); err != nil {
		return -1
	}
	tv := func(t syscall.Timeval) float64 { return float64(t.Sec) + float64(t.Usec)/1e6 }
	return tv(usage.Utime) + tv(usage.Stime)
}
