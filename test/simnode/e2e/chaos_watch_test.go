package e2e

// The chaos run's view of the cluster (chaos_test.go): shared informers on
// what its invariants read (pods, ResourceClaims and their templates, Nodes,
// ResourceSlices, the driver namespace's DaemonSets, ComputeDomains and
// ComputeDomainCliques), one broadcast channel closed at every event so
// that a wait re-evaluates its condition on events (await), and a check of
// device exclusivity run on every ResourceClaim event, so that a device
// allocated to two claims is seen however briefly it lasts.

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
)

// chaosWatch is safe for concurrent use: the stores are the informers'
// (thread-safe), the rest is guarded by mu.
type chaosWatch struct {
	pods, claims, templates, nodes, slices, daemonSets cache.Store
	domains, cliques                                   cache.Store

	mu      sync.Mutex
	changed chan struct{} // closed and replaced at every event
	ran     map[string]bool
	// shared: device-exclusivity violations seen by the claim handler, by
	// device key, not yet taken by the run.
	shared map[string]string
	seen   map[string]bool
}

func startChaosWatch(t *testing.T, c *cdCluster) *chaosWatch {
	t.Helper()
	w := &chaosWatch{changed: make(chan struct{}), ran: map[string]bool{}, shared: map[string]string{}, seen: map[string]bool{}}
	all := informers.NewSharedInformerFactory(c.Client, 0)
	driverNS := informers.NewSharedInformerFactoryWithOptions(c.Client, 0, informers.WithNamespace(c.Namespace))
	dyn := dynamicinformer.NewDynamicSharedInformerFactory(c.Dyn, 0)
	dynDriverNS := dynamicinformer.NewFilteredDynamicSharedInformerFactory(c.Dyn, 0, c.Namespace, nil)
	notify := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { w.notify() },
		UpdateFunc: func(_, _ any) { w.notify() },
		DeleteFunc: func(any) { w.notify() },
	}
	add := func(inf cache.SharedIndexInformer, h cache.ResourceEventHandler) cache.Store {
		_, err := inf.AddEventHandler(h)
		must(t, "informer handler", err)
		return inf.GetStore()
	}
	w.pods = add(all.Core().V1().Pods().Informer(), cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { w.onPod(obj) },
		UpdateFunc: func(_, obj any) { w.onPod(obj) },
		DeleteFunc: func(any) { w.notify() },
	})
	w.claims = add(all.Resource().V1().ResourceClaims().Informer(), cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { w.onClaims() },
		UpdateFunc: func(_, _ any) { w.onClaims() },
		DeleteFunc: func(any) { w.onClaims() },
	})
	w.templates = add(all.Resource().V1().ResourceClaimTemplates().Informer(), notify)
	w.nodes = add(all.Core().V1().Nodes().Informer(), notify)
	w.slices = add(all.Resource().V1().ResourceSlices().Informer(), notify)
	w.daemonSets = add(driverNS.Apps().V1().DaemonSets().Informer(), notify)
	w.domains = add(dyn.ForResource(cdGVR).Informer(), notify)
	w.cliques = add(dynDriverNS.ForResource(cliqueGVR).Informer(), notify)
	stop := make(chan struct{})
	t.Cleanup(func() { close(stop) })
	for _, f := range []interface {
		Start(<-chan struct{})
	}{all, driverNS, dyn, dynDriverNS} {
		f.Start(stop)
	}
	if !cache.WaitForCacheSync(stop, all.Core().V1().Pods().Informer().HasSynced, all.Resource().V1().ResourceClaims().Informer().HasSynced,
		all.Resource().V1().ResourceClaimTemplates().Informer().HasSynced, all.Core().V1().Nodes().Informer().HasSynced,
		all.Resource().V1().ResourceSlices().Informer().HasSynced, driverNS.Apps().V1().DaemonSets().Informer().HasSynced,
		dyn.ForResource(cdGVR).Informer().HasSynced, dynDriverNS.ForResource(cliqueGVR).Informer().HasSynced) {
		t.Fatal("chaos informers did not sync")
	}
	return w
}

func (w *chaosWatch) notify() {
	w.mu.Lock()
	close(w.changed)
	w.changed = make(chan struct{})
	w.mu.Unlock()
}

func (w *chaosWatch) onPod(obj any) {
	if p, ok := obj.(*corev1.Pod); ok && p.Status.Phase == corev1.PodRunning {
		w.mu.Lock()
		w.ran[p.Namespace+"/"+p.Name] = true
		w.mu.Unlock()
	}
	w.notify()
}

// onClaims runs the exclusivity check on the claims as the store holds
// them after this event: one watch stream in resourceVersion order, so the
// store is a state the API server really had (a device released by one
// claim and taken by another is never seen in both).
func (w *chaosWatch) onClaims() {
	w.record(sharedDevices(w.claimList(), w.pods))
	w.notify()
}

// record keeps exclusivity violations not seen before for takeShared.
func (w *chaosWatch) record(found map[string]string) {
	w.mu.Lock()
	for key, what := range found {
		if !w.seen[key] {
			w.seen[key] = true
			w.shared[key] = what
		}
	}
	w.mu.Unlock()
}

// takeShared returns the exclusivity violations the handler found since
// the last call.
func (w *chaosWatch) takeShared() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []string
	for _, what := range w.shared {
		out = append(out, what)
	}
	w.shared = map[string]string{}
	sort.Strings(out)
	return out
}

// everRan tells whether pod ns/name was ever seen Running.
func (w *chaosWatch) everRan(ns, name string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.ran[ns+"/"+name]
}

// await waits until cond holds, evaluating it now and after every event.
func (w *chaosWatch) await(ctx context.Context, cond func() bool) error {
	for {
		w.mu.Lock()
		ch := w.changed
		w.mu.Unlock()
		if cond() {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-ch:
		}
	}
}

func (w *chaosWatch) claimList() []*resourceapi.ResourceClaim {
	var out []*resourceapi.ResourceClaim
	for _, o := range w.claims.List() {
		if c, ok := o.(*resourceapi.ResourceClaim); ok {
			out = append(out, c)
		}
	}
	return out
}

func (w *chaosWatch) pod(ns, name string) *corev1.Pod {
	o, ok, _ := w.pods.GetByKey(ns + "/" + name)
	if !ok {
		return nil
	}
	return o.(*corev1.Pod)
}

func (w *chaosWatch) claim(ns, name string) *resourceapi.ResourceClaim {
	o, ok, _ := w.claims.GetByKey(ns + "/" + name)
	if !ok {
		return nil
	}
	return o.(*resourceapi.ResourceClaim)
}

func (w *chaosWatch) domain(cd *computeDomain) (cdStatus, bool) {
	o, ok, _ := w.domains.GetByKey(cd.namespace + "/" + cd.name)
	if !ok {
		return cdStatus{}, false
	}
	u := o.(*unstructured.Unstructured)
	if u.GetUID() != cd.uid {
		return cdStatus{}, false
	}
	return parseCDStatus(u), true
}

// podsWhere lists the pods of namespace ("" for all) that match.
func (w *chaosWatch) podsWhere(namespace string, match func(*corev1.Pod) bool) []*corev1.Pod {
	var out []*corev1.Pod
	for _, o := range w.pods.List() {
		p := o.(*corev1.Pod)
		if (namespace == "" || p.Namespace == namespace) && match(p) {
			out = append(out, p)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Namespace+"/"+out[i].Name < out[j].Namespace+"/"+out[j].Name })
	return out
}

// sharedDevices returns, by device key, every device that two or more
// distinct claims hold allocated at once, with the claims and their Running
// pods. Shares of a device that allows several allocations (ShareID) are
// keys of their own.
func sharedDevices(claims []*resourceapi.ResourceClaim, pods cache.Store) map[string]string {
	holders := map[string][]*resourceapi.ResourceClaim{}
	for _, c := range claims {
		if c.Status.Allocation == nil {
			continue
		}
		for _, r := range c.Status.Allocation.Devices.Results {
			key := r.Driver + "/" + r.Pool + "/" + r.Device
			if r.ShareID != nil {
				key += "#" + string(*r.ShareID)
			}
			holders[key] = append(holders[key], c)
		}
	}
	out := map[string]string{}
	for key, list := range holders {
		if len(list) < 2 {
			continue
		}
		var who []string
		for _, c := range list {
			var running []string
			for _, ref := range c.Status.ReservedFor {
				if ref.Resource != "pods" {
					continue
				}
				if o, ok, _ := pods.GetByKey(c.Namespace + "/" + ref.Name); ok && o.(*corev1.Pod).Status.Phase == corev1.PodRunning {
					running = append(running, ref.Name)
				}
			}
			who = append(who, fmt.Sprintf("%s/%s (uid %s, running pods %v)", c.Namespace, c.Name, c.UID, running))
		}
		sort.Strings(who)
		out[key+" "+strings.Join(who, ",")] = fmt.Sprintf("device %s allocated to %d claims at once: %s", key, len(list), strings.Join(who, "; "))
	}
	return out
}

// TestChaosSharedDevices checks the exclusivity check itself (no cluster):
// a device in two claims' allocations is found, with the claims' Running
// pods; shares (ShareID) and distinct devices are not.
func TestChaosSharedDevices(t *testing.T) {
	pods := cache.NewStore(cache.MetaNamespaceKeyFunc)
	for _, p := range []struct {
		name  string
		phase corev1.PodPhase
	}{{"a", corev1.PodRunning}, {"b", corev1.PodRunning}, {"c", corev1.PodPending}} {
		must(t, "pod", pods.Add(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: p.name}, Status: corev1.PodStatus{Phase: p.phase}}))
	}
	claim := func(name, pod, device string, share *types.UID) *resourceapi.ResourceClaim {
		return &resourceapi.ResourceClaim{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID("uid-" + name)},
			Status: resourceapi.ResourceClaimStatus{
				Allocation: &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{
					{Request: "gpu", Driver: gpuDriverName, Pool: "node-0", Device: device, ShareID: share},
				}}},
				ReservedFor: []resourceapi.ResourceClaimConsumerReference{{Resource: "pods", Name: pod}},
			},
		}
	}
	s1, s2 := types.UID("s1"), types.UID("s2")
	cases := []struct {
		name   string
		claims []*resourceapi.ResourceClaim
		want   []string // parts of the one finding; none: no finding
	}{
		{"distinct devices", []*resourceapi.ResourceClaim{claim("x", "a", "gpu-0", nil), claim("y", "b", "gpu-1", nil)}, nil},
		{"one device twice", []*resourceapi.ResourceClaim{claim("x", "a", "gpu-0", nil), claim("y", "b", "gpu-0", nil)},
			[]string{"gpu.nvidia.com/node-0/gpu-0", "ns/x", "ns/y", "running pods [a]", "running pods [b]"}},
		{"twice, one pod pending", []*resourceapi.ResourceClaim{claim("x", "a", "gpu-0", nil), claim("y", "c", "gpu-0", nil)},
			[]string{"ns/y (uid uid-y, running pods [])"}},
		{"two shares", []*resourceapi.ResourceClaim{claim("x", "a", "gpu-0", &s1), claim("y", "b", "gpu-0", &s2)}, nil},
	}
	for _, tc := range cases {
		got := sharedDevices(tc.claims, pods)
		if len(tc.want) == 0 {
			if len(got) != 0 {
				t.Errorf("%s: found %v, want nothing", tc.name, got)
			}
			continue
		}
		if len(got) != 1 {
			t.Errorf("%s: found %v, want one finding", tc.name, got)
			continue
		}
		for _, what := range got {
			for _, part := range tc.want {
				if !strings.Contains(what, part) {
					t.Errorf("%s: %q lacks %q", tc.name, what, part)
				}
			}
		}
	}
}
