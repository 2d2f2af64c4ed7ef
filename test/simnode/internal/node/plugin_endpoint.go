package node

import (
	"context"
	"path/filepath"
	"strings"
	"time"

	"k8s.io/kubernetes/pkg/kubelet/pluginmanager/cache"
)

// nodePathHandler maps the endpoint a plugin reports into the node's folder
// before the kubelet's DRA handler sees it. A plugin in a container reports
// its socket by its container path (/var/lib/kubelet/plugins/<driver>/dra.sock),
// which on a real node is also the host path; here the node's "/" is its
// folder, so the kubelet must dial <node dir>/var/lib/kubelet/plugins/....
type nodePathHandler struct {
	cache.PluginHandler
	nodeDir string
}

func (h *nodePathHandler) mapEndpoint(endpoint string) string {
	if !filepath.IsAbs(endpoint) || endpoint == h.nodeDir || strings.HasPrefix(endpoint, h.nodeDir+"/") {
		return endpoint
	}
	return filepath.Join(h.nodeDir, endpoint)
}

func (h *nodePathHandler) ValidatePlugin(ctx context.Context, name, endpoint string, versions []string) error {
	return h.PluginHandler.ValidatePlugin(ctx, name, h.mapEndpoint(endpoint), versions)
}

func (h *nodePathHandler) RegisterPlugin(ctx context.Context, name, endpoint string, versions []string, timeout *time.Duration) error {
	return h.PluginHandler.RegisterPlugin(ctx, name, h.mapEndpoint(endpoint), versions, timeout)
}

func (h *nodePathHandler) DeRegisterPlugin(ctx context.Context, name, endpoint string) {
	h.PluginHandler.DeRegisterPlugin(ctx, name, h.mapEndpoint(endpoint))
}
