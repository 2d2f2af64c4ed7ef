package node

import (
	"context"
	"fmt"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	clientset "k8s.io/client-go/kubernetes"
	internalapi "k8s.io/cri-api/pkg/apis"
	"k8s.io/klog/v2"
	pluginwatcherapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
	"k8s.io/kubernetes/pkg/kubelet/cm"
	"k8s.io/kubernetes/pkg/kubelet/cm/dra"
	"k8s.io/kubernetes/pkg/kubelet/cm/resourceupdates"
	"k8s.io/kubernetes/pkg/kubelet/config"
	kubecontainer "k8s.io/kubernetes/pkg/kubelet/container"
	"k8s.io/kubernetes/pkg/kubelet/pluginmanager/cache"
	"k8s.io/kubernetes/pkg/kubelet/status"
)

// draContainerManager is kubemark's stub container manager (no cgroups, no
// device plugins, no CPU or memory pinning) with the kubelet's real DRA
// manager added, wired the way pkg/kubelet/cm/container_manager_linux.go wires
// it. Everything DRA-related the kubelet does (plugin registration, v1/v1beta1
// negotiation, NodePrepare/NodeUnprepare, health streams, slice clean-up when a
// plugin goes away) is therefore the kubelet's own code, not ours.
//
// Thread-safety: as the kubelet's ContainerManager; the DRA manager is
// thread-safe, the embedded stub is stateless after Start.
type draContainerManager struct {
	cm.ContainerManager
	draManager *dra.Manager
	nodeDir    string
}

var _ cm.ContainerManager = &draContainerManager{}

// newDRAContainerManager creates the DRA manager with its checkpoint under
// rootDir, as the real kubelet does with its root directory.
func newDRAContainerManager(logger klog.Logger, client clientset.Interface, rootDir, nodeDir string) (*draContainerManager, error) {
	m, err := dra.NewManager(logger, client, rootDir)
	if err != nil {
		return nil, fmt.Errorf("create DRA manager in %s: %w", rootDir, err)
	}
	return &draContainerManager{ContainerManager: cm.NewStubContainerManager(), draManager: m, nodeDir: nodeDir}, nil
}

func (c *draContainerManager) Start(ctx context.Context, node *v1.Node, activePods cm.ActivePodsFunc, getNode cm.GetNodeFunc,
	sourcesReady config.SourcesReady, podStatusProvider status.PodStatusProvider, runtimeService internalapi.RuntimeService,
	localStorageCapacityIsolation bool) error {
	if err := c.ContainerManager.Start(ctx, node, activePods, getNode, sourcesReady, podStatusProvider, runtimeService, localStorageCapacityIsolation); err != nil {
		return err
	}
	if err := c.draManager.Start(ctx, dra.ActivePodsFunc(activePods), dra.GetNodeFunc(getNode), sourcesReady); err != nil {
		return fmt.Errorf("start DRA manager: %w", err)
	}
	return nil
}

func (c *draContainerManager) GetPluginRegistrationHandlers() map[string]cache.PluginHandler {
	handlers := c.ContainerManager.GetPluginRegistrationHandlers()
	if handlers == nil {
		handlers = map[string]cache.PluginHandler{}
	}
	handlers[pluginwatcherapi.DRAPlugin] = &nodePathHandler{PluginHandler: c.draManager.GetWatcherHandler(), nodeDir: c.nodeDir}
	return handlers
}

// GetResources adds the CDI device names of the container's prepared claims;
// the kubelet passes them to the runtime in ContainerConfig.CDIDevices.
func (c *draContainerManager) GetResources(ctx context.Context, pod *v1.Pod, container *v1.Container) (*kubecontainer.RunContainerOptions, error) {
	opts, err := c.ContainerManager.GetResources(ctx, pod, container)
	if err != nil {
		return nil, err
	}
	info, err := c.draManager.GetResources(pod, container)
	if err != nil {
		return nil, err
	}
	opts.CDIDevices = append(opts.CDIDevices, info.CDIDevices...)
	return opts, nil
}

func (c *draContainerManager) PrepareDynamicResources(ctx context.Context, pod *v1.Pod) error {
	return c.draManager.PrepareResources(ctx, pod)
}

func (c *draContainerManager) UnprepareDynamicResources(ctx context.Context, pod *v1.Pod) error {
	return c.draManager.UnprepareResources(ctx, pod)
}

func (c *draContainerManager) PodMightNeedToUnprepareResources(uid types.UID) bool {
	return c.draManager.PodMightNeedToUnprepareResources(uid)
}

// UpdateAllocatedResourcesStatus and Updates carry device health (the
// ResourceHealthStatus gate, beta and on in 1.37) from the plugins' health
// streams into pod status.
func (c *draContainerManager) UpdateAllocatedResourcesStatus(logger klog.Logger, pod *v1.Pod, status *v1.PodStatus) {
	c.draManager.UpdateAllocatedResourcesStatus(logger, pod, status)
}

func (c *draContainerManager) Updates() <-chan resourceupdates.Update {
	return c.draManager.Updates()
}
