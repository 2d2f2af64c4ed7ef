// Command fake-gpu-plugin stands in for our C++ gpu-kubelet-plugin so that
// the scenarios of e2e/gpu_plugin_test.go can be checked before the real
// plugin publishes anything. It is not built by build-simnode; run the
// scenarios against it with
//
//	go build -o /tmp/fgp/gpu-kubelet-plugin ./cmd/fake-gpu-plugin
//	NVDRA_GPU_KUBELET_PLUGIN=/tmp/fgp/gpu-kubelet-plugin test/simnode/run-go-tests -run TestGPUPluginScenarios -v
//
// On the reference kubeletplugin helper, it reads the node's mock NVML
// profile (<container-driver-root>/mock-nvml/profile.json), publishes
// gpu-<minor> devices (type gpu, productName, capacity memory) and, for GPUs
// in MIG mode, their static MIG devices (type mig, profile), named as
// upstream names them; prepare writes <cdi-root>/k8s.gpu.nvidia.com-claim_<uid>.yaml
// with /dev/nvidia<minor> (host path under --nvidia-driver-root), two
// nvidia-caps nodes per MIG device and NVIDIA_VISIBLE_DEVICES=void;
// unprepare removes it. Nothing else of the real plugin is imitated.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	"k8s.io/klog/v2"
	cdispec "tags.cncf.io/container-device-interface/specs-go"
)

const driverName = "gpu.nvidia.com"

type flags struct {
	nodeName, cdiRoot, driverRoot, containerDriverRoot, registrar, plugins, imageName, namespace string
}

type profile struct {
	Defaults device   `json:"deviceDefaults"`
	Devices  []device `json:"devices"`
}

type device struct {
	Minor  *int    `json:"minor"`
	Name   *string `json:"name"`
	Memory *struct {
		Total int64 `json:"total"`
	} `json:"memory"`
	Mig *struct {
		Mode struct {
			Current int `json:"current"`
		} `json:"mode"`
		Profiles []struct {
			ID   int    `json:"id"`
			Name string `json:"name"`
		} `json:"gpuInstanceProfiles"`
		Instances []struct {
			ProfileID int `json:"profileId"`
			Start     int `json:"start"`
		} `json:"gpuInstances"`
	} `json:"mig"`
}

type plugin struct {
	f      flags
	minors map[string]int // device name -> (parent) minor
	mig    map[string]bool
}

func main() {
	var f flags
	flag.StringVar(&f.nodeName, "node-name", os.Getenv("NODE_NAME"), "")
	flag.StringVar(&f.cdiRoot, "cdi-root", "/etc/cdi", "")
	flag.StringVar(&f.driverRoot, "nvidia-driver-root", "/", "")
	flag.StringVar(&f.containerDriverRoot, "container-driver-root", "/driver-root", "")
	flag.StringVar(&f.registrar, "kubelet-registrar-directory-path", kubeletplugin.KubeletRegistryDir, "")
	flag.StringVar(&f.plugins, "kubelet-plugins-directory-path", kubeletplugin.KubeletPluginsDir, "")
	flag.StringVar(&f.imageName, "image-name", "", "")
	flag.StringVar(&f.namespace, "namespace", os.Getenv("NAMESPACE"), "")
	klog.InitFlags(nil)
	flag.Parse()
	if err := run(f); err != nil {
		fmt.Fprintf(os.Stderr, "fake-gpu-plugin: %v\n", err)
		os.Exit(1)
	}
}

func run(f flags) error {
	data, err := os.ReadFile(filepath.Join(f.containerDriverRoot, "mock-nvml", "profile.json"))
	if err != nil {
		return err
	}
	var prof profile
	if err := json.Unmarshal(data, &prof); err != nil {
		return err
	}
	p := &plugin{f: f, minors: map[string]int{}, mig: map[string]bool{}}
	var devices []resourceapi.Device
	for _, d := range prof.Devices {
		minor := *d.Minor
		name, mem, mig := prof.Defaults.Name, prof.Defaults.Memory, prof.Defaults.Mig
		if d.Name != nil {
			name = d.Name
		}
		if d.Memory != nil {
			mem = d.Memory
		}
		if d.Mig != nil {
			mig = d.Mig
		}
		if mig != nil && mig.Mode.Current == 1 {
			if d.Mig == nil {
				continue // MIG mode without static devices: nothing to offer
			}
			for _, gi := range d.Mig.Instances {
				profName := ""
				for _, pr := range mig.Profiles {
					if pr.ID == gi.ProfileID {
						profName = strings.TrimPrefix(pr.Name, "MIG ")
					}
				}
				dn := fmt.Sprintf("gpu-%d-mig-%s-%d-%d", minor, strings.ReplaceAll(profName, ".", ""), gi.ProfileID, gi.Start)
				p.minors[dn], p.mig[dn] = minor, true
				devices = append(devices, resourceapi.Device{Name: dn, Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
					"type": {StringValue: ptr("mig")}, "profile": {StringValue: ptr(profName)}, "productName": {StringValue: name},
				}})
			}
			continue
		}
		dn := fmt.Sprintf("gpu-%d", minor)
		p.minors[dn] = minor
		devices = append(devices, resourceapi.Device{
			Name: dn,
			Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
				"type": {StringValue: ptr("gpu")}, "productName": {StringValue: name},
			},
			Capacity: map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{
				"memory": {Value: *resource.NewQuantity(mem.Total, resource.BinarySI)},
			},
		})
	}
	restConfig, err := rest.InClusterConfig()
	if err != nil {
		return err
	}
	client, err := kubernetes.NewForConfig(restConfig)
	if err != nil {
		return err
	}
	pluginDir := filepath.Join(f.plugins, driverName)
	for _, d := range []string{pluginDir, f.cdiRoot, f.registrar} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	helper, err := kubeletplugin.Start(ctx, p,
		kubeletplugin.DriverName(driverName), kubeletplugin.NodeName(f.nodeName), kubeletplugin.KubeClient(client),
		kubeletplugin.PluginDataDirectoryPath(pluginDir), kubeletplugin.RegistrarDirectoryPath(f.registrar),
		kubeletplugin.HealthService(false))
	if err != nil {
		return err
	}
	defer helper.Stop()
	res := resourceslice.DriverResources{Pools: map[string]resourceslice.Pool{
		f.nodeName: {Slices: []resourceslice.Slice{{Devices: devices}}},
	}}
	if err := helper.PublishResources(ctx, res); err != nil {
		return err
	}
	klog.Info("fake gpu plugin running", "devices", len(devices))
	<-ctx.Done()
	return nil
}

func (p *plugin) specPath(uid types.UID) string {
	return filepath.Join(p.f.cdiRoot, fmt.Sprintf("k8s.%s-claim_%s.yaml", driverName, uid))
}

func (p *plugin) PrepareResourceClaims(ctx context.Context, claims []*resourceapi.ResourceClaim) (map[types.UID]kubeletplugin.PrepareResult, error) {
	out := map[types.UID]kubeletplugin.PrepareResult{}
	for _, claim := range claims {
		spec := cdispec.Spec{Version: "0.6.0", Kind: "k8s." + driverName + "/claim",
			ContainerEdits: cdispec.ContainerEdits{Env: []string{"NVIDIA_VISIBLE_DEVICES=void"},
				DeviceNodes: []*cdispec.DeviceNode{{Path: "/dev/nvidiactl", HostPath: filepath.Join(p.f.driverRoot, "dev/nvidiactl")}}}}
		var result kubeletplugin.PrepareResult
		for _, r := range claim.Status.Allocation.Devices.Results {
			if r.Driver != driverName {
				continue
			}
			minor := p.minors[r.Device]
			nodes := []*cdispec.DeviceNode{{Path: fmt.Sprintf("/dev/nvidia%d", minor), HostPath: filepath.Join(p.f.driverRoot, fmt.Sprintf("dev/nvidia%d", minor))}}
			if p.mig[r.Device] {
				for i := 1; i <= 2; i++ {
					nodes = append(nodes, &cdispec.DeviceNode{Path: fmt.Sprintf("/dev/nvidia-caps/nvidia-cap%d", 3+minor*135+i), Type: "c", Major: 508, Minor: int64(3 + minor*135 + i)})
				}
			}
			name := fmt.Sprintf("%s-%s", claim.UID, r.Device)
			spec.Devices = append(spec.Devices, cdispec.Device{Name: name, ContainerEdits: cdispec.ContainerEdits{DeviceNodes: nodes}})
			result.Devices = append(result.Devices, kubeletplugin.Device{Requests: []string{r.Request}, PoolName: r.Pool, DeviceName: r.Device, CDIDeviceIDs: []string{spec.Kind + "=" + name}})
		}
		data, err := json.Marshal(spec)
		if err == nil {
			err = os.WriteFile(p.specPath(claim.UID), data, 0o644)
		}
		if err != nil {
			result = kubeletplugin.PrepareResult{Err: err}
		}
		out[claim.UID] = result
	}
	return out, nil
}

func (p *plugin) UnprepareResourceClaims(ctx context.Context, claims []kubeletplugin.NamespacedObject) (map[types.UID]error, error) {
	out := map[types.UID]error{}
	for _, c := range claims {
		err := os.Remove(p.specPath(c.UID))
		if os.IsNotExist(err) {
			err = nil
		}
		out[c.UID] = err
	}
	return out, nil
}

func (p *plugin) HandleError(ctx context.Context, err error, msg string) {
	klog.FromContext(ctx).Error(err, msg)
}

func ptr[T any](v T) *T { return &v }

// WatchHealthStatus: no health reports.
func (p *plugin) WatchHealthStatus(ctx context.Context, reports chan<- kubeletplugin.DeviceHealthReport) error {
	return kubeletplugin.ErrHealthNotSupported
}
