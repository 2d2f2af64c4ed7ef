package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	"k8s.io/klog/v2"
	cdispec "tags.cncf.io/container-device-interface/specs-go"
)

// CDI kind of the test driver's devices. Containers get, per device,
// SIMNODE_GPU=<device> and the device node /dev/simgpu<index>.
const (
	cdiVendor = "simnode.test"
	cdiClass  = "gpu"
	envName   = "SIMNODE_GPU"
)

// driver implements kubeletplugin.DRAPlugin. The helper serializes its gRPC
// calls; journalMu only guards the journal file against HandleError.
type driver struct {
	config    config
	journalMu sync.Mutex
}

// JournalEntry is one line of the journal.
type JournalEntry struct {
	Time      time.Time `json:"time"`
	Call      string    `json:"call"`
	ClaimUID  string    `json:"claimUID"`
	Namespace string    `json:"namespace"`
	Name      string    `json:"name"`
	Devices   []string  `json:"devices,omitempty"`
}

func (d *driver) resources() resourceslice.DriverResources {
	devices := make([]resourceapi.Device, 0, d.config.devices)
	for i := 0; i < d.config.devices; i++ {
		index := int64(i)
		devices = append(devices, resourceapi.Device{
			Name: fmt.Sprintf("gpu-%d", i),
			Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
				"index": {IntValue: &index},
			},
		})
	}
	return resourceslice.DriverResources{Pools: map[string]resourceslice.Pool{
		d.config.nodeName: {Slices: []resourceslice.Slice{{Devices: devices}}},
	}}
}

func (d *driver) PrepareResourceClaims(ctx context.Context, claims []*resourceapi.ResourceClaim) (map[types.UID]kubeletplugin.PrepareResult, error) {
	out := map[types.UID]kubeletplugin.PrepareResult{}
	for _, claim := range claims {
		out[claim.UID] = d.prepare(claim)
	}
	return out, nil
}

func (d *driver) prepare(claim *resourceapi.ResourceClaim) kubeletplugin.PrepareResult {
	spec := cdispec.Spec{Version: "0.6.0", Kind: cdiVendor + "/" + cdiClass}
	var result kubeletplugin.PrepareResult
	var names []string
	for _, r := range claim.Status.Allocation.Devices.Results {
		if r.Driver != d.config.driverName {
			continue
		}
		var index int
		if _, err := fmt.Sscanf(r.Device, "gpu-%d", &index); err != nil {
			return kubeletplugin.PrepareResult{Err: fmt.Errorf("claim %s/%s: device %q is not ours", claim.Namespace, claim.Name, r.Device)}
		}
		cdiName := fmt.Sprintf("%s-%s", claim.UID, r.Device)
		spec.Devices = append(spec.Devices, cdispec.Device{
			Name: cdiName,
			ContainerEdits: cdispec.ContainerEdits{
				Env: []string{envName + "=" + r.Device},
				DeviceNodes: []*cdispec.DeviceNode{{
					Path: fmt.Sprintf("/dev/simgpu%d", index), Type: "c", Major: 195, Minor: int64(index),
				}},
			},
		})
		result.Devices = append(result.Devices, kubeletplugin.Device{
			Requests: []string{r.Request}, PoolName: r.Pool, DeviceName: r.Device,
			CDIDeviceIDs: []string{spec.Kind + "=" + cdiName},
		})
		names = append(names, r.Device)
	}
	if err := writeJSONAtomically(d.specPath(claim.UID), spec); err != nil {
		return kubeletplugin.PrepareResult{Err: fmt.Errorf("claim %s/%s: write CDI spec: %w", claim.Namespace, claim.Name, err)}
	}
	d.record(JournalEntry{Call: "NodePrepareResources", ClaimUID: string(claim.UID), Namespace: claim.Namespace, Name: claim.Name, Devices: names})
	return result
}

func (d *driver) UnprepareResourceClaims(ctx context.Context, claims []kubeletplugin.NamespacedObject) (map[types.UID]error, error) {
	out := map[types.UID]error{}
	for _, claim := range claims {
		err := os.Remove(d.specPath(claim.UID))
		if os.IsNotExist(err) {
			err = nil // unprepare is idempotent
		}
		out[claim.UID] = err
		d.record(JournalEntry{Call: "NodeUnprepareResources", ClaimUID: string(claim.UID), Namespace: claim.Namespace, Name: claim.Name})
	}
	return out, nil
}

func (d *driver) HandleError(ctx context.Context, err error, msg string) {
	klog.FromContext(ctx).Error(err, msg)
}

func (d *driver) WatchHealthStatus(ctx context.Context, reports chan<- kubeletplugin.DeviceHealthReport) error {
	return kubeletplugin.ErrHealthNotSupported
}

func (d *driver) specPath(uid types.UID) string {
	return filepath.Join(d.config.cdiDir, fmt.Sprintf("%s-%s-%s.json", cdiVendor, cdiClass, uid))
}

// record appends to the journal; a failure is logged, not returned: the
// journal is for tests, not part of the driver's contract with the kubelet.
func (d *driver) record(e JournalEntry) {
	e.Time = time.Now()
	line, err := json.Marshal(e)
	if err != nil {
		return
	}
	d.journalMu.Lock()
	defer d.journalMu.Unlock()
	f, err := os.OpenFile(d.config.journal, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		klog.Background().Error(err, "Journal", "path", d.config.journal)
		return
	}
	defer f.Close()
	_, _ = f.Write(append(line, '\n'))
	klog.Background().Info(strings.TrimPrefix(e.Call, "Node"), "claim", e.Namespace+"/"+e.Name, "devices", e.Devices)
}

func writeJSONAtomically(path string, v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
