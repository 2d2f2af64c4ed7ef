// Package cri is the simulated container runtime of a simulated node: a CRI
// gRPC server that keeps sandbox and container bookkeeping in the kubelet's
// own fake runtime (k8s.io/cri-client/pkg/fake) and adds what the fake lacks:
// CDI resolution with the reference library, a recorded container view,
// container processes in private mount namespaces, CRI-format logs, exit codes
// and ExecSync.
package cri

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/cri-client/pkg/fake"
	"k8s.io/klog/v2"

	"nvdra.local/test/simnode/internal/proc"
)

// Options configure one node's runtime.
type Options struct {
	NodeName string
	// NodeDir plays the node's "/" for hostPath volumes.
	NodeDir       string
	NodeIP        string
	PodIPPrefix   string // three octets; pods get PodIPPrefix.2, .3, ...
	CDIDirs       []string
	ContainersDir string
	// Images maps image names (no tag) to programs on this machine.
	Images map[string]string
	// APIServer (host:port) replaces the kubernetes Service address in
	// containers' environment, so in-cluster clients reach the API server.
	APIServer string
	// BootIDFile, when set, is bind-mounted over /proc/sys/kernel/random/boot_id
	// in every container, so programs see the node's boot id, not this
	// machine's (nodeconfig.BootIDHostPath).
	BootIDFile string
}

// Runtime serves CRI on a unix socket. Thread-safe: gRPC calls arrive
// concurrently; mu guards containers and nextPodIP, the fake guards its own
// maps with its own mutex, and mu is never held while calling the fake.
type Runtime struct {
	*fake.RemoteRuntime
	opts     Options
	self     string // this executable, re-executed as container-init
	spawner  *proc.Spawner
	viewsDir string
	server   *grpc.Server

	mu         sync.Mutex
	containers map[string]*container
	nextPodIP  int
}

// NewRuntime prepares a runtime; Serve starts it.
func NewRuntime(opts Options) (*Runtime, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("runtime: own executable: %w", err)
	}
	r := &Runtime{
		RemoteRuntime: fake.NewFakeRemoteRuntime(),
		opts:          opts,
		self:          self,
		spawner:       proc.NewSpawner(),
		viewsDir:      filepath.Join(opts.NodeDir, "views"),
		containers:    map[string]*container{},
		nextPodIP:     2,
	}
	// The kubelet rejects images without a size.
	r.ImageService.FakeImageSize = 100 << 20
	r.RuntimeService.FakeStatus = &runtimeapi.RuntimeStatus{Conditions: []*runtimeapi.RuntimeCondition{
		{Type: runtimeapi.RuntimeReady, Status: true},
		{Type: runtimeapi.NetworkReady, Status: true},
	}}
	return r, nil
}

// Serve listens on socket and serves in the background.
func (r *Runtime) Serve(socket string) error {
	if err := os.Remove(socket); err != nil && !os.IsNotExist(err) {
		return fmt.Errorf("runtime: remove stale socket: %w", err)
	}
	l, err := net.Listen("unix", socket)
	if err != nil {
		return fmt.Errorf("runtime: listen on %s: %w", socket, err)
	}
	r.server = grpc.NewServer(grpc.ChainUnaryInterceptor(r.forgetCalls))
	runtimeapi.RegisterRuntimeServiceServer(r.server, r)
	runtimeapi.RegisterImageServiceServer(r.server, r)
	go func() { _ = r.server.Serve(l) }()
	return nil
}

// Stop ends the server and kills every container process.
func (r *Runtime) Stop() {
	if r.server != nil {
		r.server.Stop()
	}
	r.mu.Lock()
	all := make([]*container, 0, len(r.containers))
	for _, c := range r.containers {
		all = append(all, c)
	}
	r.mu.Unlock()
	for _, c := range all {
		c.kill()
	}
}

// forgetCalls drops the fake's record of calls, which would otherwise grow by
// a few entries a second for the life of the node (PLEG relists every second).
func (r *Runtime) forgetCalls(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	resp, err := handler(ctx, req)
	r.RuntimeService.Lock()
	r.RuntimeService.Called = r.RuntimeService.Called[:0]
	r.RuntimeService.Unlock()
	r.ImageService.Lock()
	r.ImageService.Called = r.ImageService.Called[:0]
	r.ImageService.Unlock()
	return resp, err
}

func (r *Runtime) RunPodSandbox(ctx context.Context, req *runtimeapi.RunPodSandboxRequest) (*runtimeapi.RunPodSandboxResponse, error) {
	if dir := req.GetConfig().GetLogDirectory(); dir != "" {
		// The kubelet's OS interface is kubemark's fake, which creates nothing.
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, status.Errorf(codes.Internal, "pod log directory: %v", err)
		}
	}
	resp, err := r.RemoteRuntime.RunPodSandbox(ctx, req)
	if err != nil {
		return nil, err
	}
	ip := r.opts.NodeIP
	if req.GetConfig().GetLinux().GetSecurityContext().GetNamespaceOptions().GetNetwork() != runtimeapi.NamespaceMode_NODE {
		r.mu.Lock()
		ip = fmt.Sprintf("%s.%d", r.opts.PodIPPrefix, r.nextPodIP)
		r.nextPodIP = r.nextPodIP%253 + 2 // 2..254, wrapping
		r.mu.Unlock()
	}
	r.RuntimeService.Lock()
	if s, ok := r.RuntimeService.Sandboxes[resp.PodSandboxId]; ok {
		s.Network = &runtimeapi.PodSandboxNetworkStatus{Ip: ip}
	}
	r.RuntimeService.Unlock()
	return resp, nil
}

func (r *Runtime) StopPodSandbox(ctx context.Context, req *runtimeapi.StopPodSandboxRequest) (*runtimeapi.StopPodSandboxResponse, error) {
	for _, c := range r.sandboxContainers(req.PodSandboxId) {
		c.kill()
	}
	return r.RemoteRuntime.StopPodSandbox(ctx, req)
}

func (r *Runtime) CreateContainer(ctx context.Context, req *runtimeapi.CreateContainerRequest) (*runtimeapi.CreateContainerResponse, error) {
	config, sandbox := req.GetConfig(), req.GetSandboxConfig()
	resp, err := r.RemoteRuntime.CreateContainer(ctx, req)
	if err != nil {
		return nil, err
	}
	id := resp.ContainerId
	c, err := r.newContainer(id, req.PodSandboxId, sandbox, config)
	if err != nil {
		_, _ = r.RemoteRuntime.RemoveContainer(ctx, &runtimeapi.RemoveContainerRequest{ContainerId: id})
		klog.FromContext(ctx).Error(err, "Container creation failed", "node", r.opts.NodeName, "container", config.GetMetadata().GetName())
		return nil, status.Error(codes.Unknown, err.Error())
	}
	r.RuntimeService.Lock()
	if fc, ok := r.RuntimeService.Containers[id]; ok {
		fc.LogPath = c.logPath
	}
	r.RuntimeService.Unlock()
	r.mu.Lock()
	r.containers[id] = c
	r.mu.Unlock()
	return resp, nil
}

func (r *Runtime) StartContainer(ctx context.Context, req *runtimeapi.StartContainerRequest) (*runtimeapi.StartContainerResponse, error) {
	c := r.container(req.ContainerId)
	if c == nil {
		return nil, status.Errorf(codes.NotFound, "container %s not found", req.ContainerId)
	}
	resp, err := r.RemoteRuntime.StartContainer(ctx, req)
	if err != nil {
		return nil, err
	}
	if err := c.start(r.spawner, r.self, r.markExited); err != nil {
		r.markExited(c.id, 128, "StartError")
		return nil, status.Errorf(codes.Unknown, "start container %s: %v", c.view.Container, err)
	}
	return resp, nil
}

func (r *Runtime) StopContainer(ctx context.Context, req *runtimeapi.StopContainerRequest) (*runtimeapi.StopContainerResponse, error) {
	c := r.container(req.ContainerId)
	if c == nil {
		return r.RemoteRuntime.StopContainer(ctx, req)
	}
	if !c.stop(time.Duration(req.Timeout) * time.Second) {
		// Nothing ran ("run until deleted"): it ends as if it handled TERM.
		if _, err := r.RemoteRuntime.StopContainer(ctx, req); err != nil {
			return nil, err
		}
		r.markExited(c.id, 0, "Completed")
	}
	return &runtimeapi.StopContainerResponse{}, nil
}

func (r *Runtime) RemoveContainer(ctx context.Context, req *runtimeapi.RemoveContainerRequest) (*runtimeapi.RemoveContainerResponse, error) {
	r.mu.Lock()
	c := r.containers[req.ContainerId]
	delete(r.containers, req.ContainerId)
	r.mu.Unlock()
	if c != nil {
		c.kill()
		c.remove()
	}
	return r.RemoteRuntime.RemoveContainer(ctx, req)
}

func (r *Runtime) ExecSync(ctx context.Context, req *runtimeapi.ExecSyncRequest) (*runtimeapi.ExecSyncResponse, error) {
	c := r.container(req.ContainerId)
	if c == nil {
		return nil, status.Errorf(codes.NotFound, "container %s not found", req.ContainerId)
	}
	if req.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, time.Duration(req.Timeout)*time.Second)
		defer cancel()
	}
	stdout, stderr, code, err := c.execSync(ctx, r.spawner, r.self, req.Cmd)
	if err != nil {
		return nil, status.Errorf(codes.Unknown, "exec in %s: %v", c.view.Container, err)
	}
	return &runtimeapi.ExecSyncResponse{Stdout: stdout, Stderr: stderr, ExitCode: code}, nil
}

func (r *Runtime) container(id string) *container {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.containers[id]
}

func (r *Runtime) sandboxContainers(sandboxID string) []*container {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []*container
	for _, c := range r.containers {
		if c.sandboxID == sandboxID {
			out = append(out, c)
		}
	}
	return out
}

// markExited records a container's end where the kubelet's PLEG relist will
// see it.
func (r *Runtime) markExited(id string, code int32, reason string) {
	r.RuntimeService.Lock()
	defer r.RuntimeService.Unlock()
	if fc, ok := r.RuntimeService.Containers[id]; ok {
		fc.State = runtimeapi.ContainerState_CONTAINER_EXITED
		fc.ExitCode = code
		fc.Reason = reason
		fc.FinishedAt = time.Now().UnixNano()
	}
}

// imageName strips the tag and digest from an image reference.
func imageName(ref string) string {
	if i := strings.Index(ref, "@"); i >= 0 {
		ref = ref[:i]
	}
	if i := strings.LastIndex(ref, ":"); i > strings.LastIndex(ref, "/") {
		ref = ref[:i]
	}
	return ref
}
