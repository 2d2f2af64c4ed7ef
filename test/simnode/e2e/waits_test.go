package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fsnotify/fsnotify"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"
)

type creator[T runtime.Object] interface {
	Create(ctx context.Context, obj T, opts metav1.CreateOptions) (T, error)
}

// create creates obj; an object that already exists is not an error.
func create[T runtime.Object](ctx context.Context, c creator[T], obj T) error {
	_, err := c.Create(ctx, obj, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	return err
}

// until watches objects from lw until cond holds for one of them.
func until(ctx context.Context, lw cache.ListerWatcher, obj runtime.Object, cond func(watch.Event) (bool, error)) (*watch.Event, error) {
	return watchtools.UntilWithSync(ctx, lw, obj, nil, cond)
}

func waitForPod(ctx context.Context, t *testing.T, client kubernetes.Interface, name string, cond func(*corev1.Pod) bool) *corev1.Pod {
	t.Helper()
	return waitForPodIn(ctx, t, client, namespace, name, cond)
}

// waitForPodIn waits, on a watch, until cond holds for pod ns/name.
func waitForPodIn(ctx context.Context, t *testing.T, client kubernetes.Interface, namespace, name string, cond func(*corev1.Pod) bool) *corev1.Pod {
	t.Helper()
	selector := fields.OneTermEqualSelector("metadata.name", name).String()
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.FieldSelector = selector
			return client.CoreV1().Pods(namespace).List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector = selector
			return client.CoreV1().Pods(namespace).Watch(ctx, o)
		},
	}
	var last *corev1.Pod
	ev, err := until(ctx, lw, &corev1.Pod{}, func(e watch.Event) (bool, error) {
		p, ok := e.Object.(*corev1.Pod)
		if !ok {
			return false, nil
		}
		last = p
		return cond(p), nil
	})
	if err != nil {
		t.Fatalf("waiting for pod %s: %v; last seen: %+v", name, err, statusOf(last))
	}
	return ev.Object.(*corev1.Pod)
}

func statusOf(p *corev1.Pod) any {
	if p == nil {
		return nil
	}
	return p.Status
}

// waitForLog reads the container log through the API server until it holds
// want. The kubelet serves what is already written; the process writes its
// line right after it starts, so a few reads on file changes suffice.
func waitForLog(ctx context.Context, t *testing.T, client kubernetes.Interface, pod, want string) string {
	t.Helper()
	var last string
	for ctx.Err() == nil {
		data, err := client.CoreV1().Pods(namespace).GetLogs(pod, &corev1.PodLogOptions{Follow: true}).Stream(ctx)
		if err != nil {
			// The kubelet may not have the container yet; retry gently.
			last = err.Error()
			select {
			case <-ctx.Done():
			case <-time.After(200 * time.Millisecond):
			}
			continue
		}
		buf := make([]byte, 4096)
		n, _ := data.Read(buf)
		data.Close()
		last = string(buf[:n])
		if strings.Contains(last, want) {
			return last
		}
	}
	t.Fatalf("log of %s never held %q; last: %q", pod, want, last)
	return ""
}

// waitForPodGone waits, on a watch, until pod ns/name no longer exists.
func waitForPodGone(ctx context.Context, t *testing.T, client kubernetes.Interface, namespace, name string) {
	t.Helper()
	selector := fields.OneTermEqualSelector("metadata.name", name).String()
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.FieldSelector = selector
			return client.CoreV1().Pods(namespace).List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector = selector
			return client.CoreV1().Pods(namespace).Watch(ctx, o)
		},
	}
	gone := func(store cache.Store) (bool, error) {
		_, exists, err := store.GetByKey(namespace + "/" + name)
		return !exists, err
	}
	_, err := watchtools.UntilWithSync(ctx, lw, &corev1.Pod{}, gone, func(e watch.Event) (bool, error) {
		return e.Type == watch.Deleted, nil
	})
	if err != nil {
		t.Fatalf("waiting for pod %s/%s to be deleted: %v", namespace, name, err)
	}
}

// waitForFileGone waits, on inotify events of its folder, until path does
// not exist.
func waitForFileGone(ctx context.Context, path string) error {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return err
	}
	defer w.Close()
	if err := w.Add(filepath.Dir(path)); err != nil {
		if os.IsNotExist(err) {
			return nil
		}
		return fmt.Errorf("watch %s: %w", filepath.Dir(path), err)
	}
	for {
		if _, err := os.Stat(path); os.IsNotExist(err) {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case err := <-w.Errors:
			return errors.Join(errors.New("watch failed"), err)
		case <-w.Events:
		}
	}
}

// waitForFile waits, on inotify events of its folder, until cond holds for
// the file's content.
func waitForFile(ctx context.Context, path string, cond func([]byte) bool) error {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return err
	}
	defer w.Close()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	if err := w.Add(filepath.Dir(path)); err != nil {
		return fmt.Errorf("watch %s: %w", filepath.Dir(path), err)
	}
	for {
		if data, err := os.ReadFile(path); err == nil && cond(data) {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case err := <-w.Errors:
			return errors.Join(errors.New("watch failed"), err)
		case <-w.Events:
		}
	}
}

// waitForEventAbout waits, on a watch, for an Event of `reason` in `ns`
// about the object `kind`/`name` whose note holds every one of `texts`.
func waitForEventAbout(ctx context.Context, t *testing.T, client kubernetes.Interface, ns, kind, name, reason string, texts ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	selector := fields.Set{"regarding.name": name, "reason": reason}.String()
	events := client.EventsV1().Events(ns)
	waitForObject(ctx, t, fmt.Sprintf("%s Event %s on %s with %q", kind, reason, name, texts), func(ctx context.Context) (bool, error) {
		list, err := events.List(ctx, metav1.ListOptions{FieldSelector: selector})
		if err != nil {
			return false, err
		}
		for _, e := range list.Items {
			if e.Regarding.Kind != kind {
				continue
			}
			if !slices.ContainsFunc(texts, func(s string) bool { return !strings.Contains(e.Note, s) }) {
				t.Logf("Event on %s %s: %s %s: %s", kind, name, e.Type, e.Reason, e.Note)
				return true, nil
			}
		}
		return false, nil
	}, func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
		o.FieldSelector = selector
		return events.Watch(ctx, o)
	})
}
