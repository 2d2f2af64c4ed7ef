// Checkpoint struct shapes of the upstream Go driver (dra-driver-nvidia-gpu,
// cmd/{gpu,compute-domain}-kubelet-plugin/checkpoint{,v}.go and prepared.go),
// reproduced here as facts: field names, JSON tags and their order decide the
// bytes, and so the checksums, that our C++ codec must read and write. Only the
// shapes are reproduced; the methods below are written for the generator.
package main

import (
	"encoding/json"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/kubernetes/pkg/kubelet/checkpointmanager/checksum"
)

// CheckpointedDevice: kubeletplugin.Device with omitempty on the fields added
// in k8s 1.36 (upstream issue 1080).
type CheckpointedDevice kubeletplugin.Device

func (c CheckpointedDevice) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		Requests     []string                      `json:"Requests"`
		PoolName     string                        `json:"PoolName"`
		DeviceName   string                        `json:"DeviceName"`
		CDIDeviceIDs []string                      `json:"CDIDeviceIDs"`
		ShareID      *types.UID                    `json:"ShareID,omitempty"`
		Metadata     *kubeletplugin.DeviceMetadata `json:"Metadata,omitempty"`
	}{c.Requests, c.PoolName, c.DeviceName, c.CDIDeviceIDs, c.ShareID, c.Metadata})
}

type ClaimCheckpointState string

const (
	PrepareStarted   ClaimCheckpointState = "PrepareStarted"
	PrepareCompleted ClaimCheckpointState = "PrepareCompleted"
	PrepareAborted   ClaimCheckpointState = "PrepareAborted" // CD plugin only
)

// ---- GPU plugin prepared devices (prepared.go, deviceinfo.go, mig.go, device_state.go)

type GpuInfo struct {
	UUID string `json:"uuid"`
}

type VfioDeviceInfo struct {
	UUID     string `json:"uuid"`
	PciBusID string `json:"pciBusID,omitempty"`
}

type MigLiveTuple struct {
	ParentMinor    int    `json:"parentMinor"`
	GIID           int    `json:"giId"`
	CIID           int    `json:"ciId"`
	MigUUID        string `json:"migUUID"`
	ParentUUID     string `json:"parentUUID"`
	ParentPCIBusID string `json:"parentPCIBusID,omitempty"`
}

type PreparedGpu struct {
	Info   *GpuInfo            `json:"info"`
	Device *CheckpointedDevice `json:"device"`
}

type PreparedMigDevice struct {
	Concrete *MigLiveTuple       `json:"concrete"`
	Device   *CheckpointedDevice `json:"device"`
}

type PreparedVfioDevice struct {
	Info   *VfioDeviceInfo     `json:"info"`
	Device *CheckpointedDevice `json:"device"`
}

type GpuPreparedDevice struct {
	Gpu  *PreparedGpu        `json:"gpu"`
	Mig  *PreparedMigDevice  `json:"mig"`
	Vfio *PreparedVfioDevice `json:"vfio,omitempty"`
}

type GpuDeviceConfigState struct {
	MpsControlDaemonID string `json:"mpsControlDaemonID,omitempty"`
	MpsApplied         *bool  `json:"mpsApplied,omitempty"`
	TimeSliceApplied   *bool  `json:"timeSliceApplied,omitempty"`
}

type GpuPreparedDeviceGroup struct {
	Devices     []GpuPreparedDevice  `json:"devices"`
	ConfigState GpuDeviceConfigState `json:"configState"`
}

type GpuPreparedDevices []*GpuPreparedDeviceGroup

// ---- CD plugin prepared devices (prepared.go, deviceinfo.go, device_state.go)

type ComputeDomainChannelInfo struct {
	ID int `json:"id"`
}

type ComputeDomainDaemonInfo struct {
	ID int `json:"id"`
}

type PreparedComputeDomainChannel struct {
	Info   *ComputeDomainChannelInfo `json:"info"`
	Device *CheckpointedDevice       `json:"device"`
}

type PreparedComputeDomainDaemon struct {
	Info   *ComputeDomainDaemonInfo `json:"info"`
	Device *CheckpointedDevice      `json:"device"`
}

type CdPreparedDevice struct {
	Channel *PreparedComputeDomainChannel `json:"channel"`
	Daemon  *PreparedComputeDomainDaemon  `json:"daemon"`
}

// No JSON tags upstream: the keys are "Type" and "ComputeDomain".
type CdDeviceConfigState struct {
	Type          string
	ComputeDomain string
}

type CdPreparedDeviceGroup struct {
	Devices     []CdPreparedDevice  `json:"devices"`
	ConfigState CdDeviceConfigState `json:"configState"`
}

type CdPreparedDevices []*CdPreparedDeviceGroup

// ---- Checkpoint, V1 and V2 (checkpoint.go, checkpointv.go). PD is the
// plugin's PreparedDevices type.

type Checkpoint[PD any] struct {
	Checksum checksum.Checksum `json:"checksum"`
	V1       *CheckpointV1[PD] `json:"v1,omitempty"`
	V2       *CheckpointV2[PD] `json:"v2,omitempty"`
}

type CheckpointV1[PD any] struct {
	PreparedClaims map[string]PreparedClaimV1[PD] `json:"preparedClaims,omitempty"`
}

type PreparedClaimV1[PD any] struct {
	Status          resourceapi.ResourceClaimStatus `json:"status,omitempty"`
	PreparedDevices PD                              `json:"preparedDevices,omitempty"`
}

type CheckpointV2[PD any] struct {
	Checksum       checksum.Checksum              `json:"checksum"`
	PreparedClaims map[string]PreparedClaimV2[PD] `json:"preparedClaims,omitempty"`
	NodeBootID     string                         `json:"nodeBootID,omitempty"`
}

// The CD plugin's PreparedClaimV2; the GPU plugin's lacks AbortedAt, which is
// omitempty, so both write the same bytes for claims that were never aborted.
type PreparedClaimV2[PD any] struct {
	CheckpointState ClaimCheckpointState            `json:"checkpointState"`
	Status          resourceapi.ResourceClaimStatus `json:"status,omitempty"`
	PreparedDevices PD                              `json:"preparedDevices,omitempty"`
	Name            string                          `json:"name,omitempty"`
	Namespace       string                          `json:"namespace,omitempty"`
	AbortedAt       *metav1.Time                    `json:"abortedAt,omitempty"`
}

// toV1 keeps only PrepareCompleted claims (upstream CheckpointV2.ToV1).
func (v2 *CheckpointV2[PD]) toV1() *CheckpointV1[PD] {
	v1 := &CheckpointV1[PD]{PreparedClaims: map[string]PreparedClaimV1[PD]{}}
	for uid, c := range v2.PreparedClaims {
		if c.CheckpointState != PrepareCompleted {
			continue
		}
		v1.PreparedClaims[uid] = PreparedClaimV1[PD]{Status: c.Status, PreparedDevices: c.PreparedDevices}
	}
	return v1
}

// marshal writes what upstream's MarshalCheckpoint writes: V1 derived from V2,
// the V1 checksum over the checkpoint without V2, the V2 checksum over V2.
func (cp Checkpoint[PD]) marshal() []byte {
	cp.V1 = cp.V2.toV1()
	cp.setChecksumV1()
	cp.V2.Checksum = 0
	cp.V2.Checksum = checksum.New(must(json.Marshal(*cp.V2)))
	return must(json.Marshal(cp))
}

// marshalV1Only writes a checkpoint as a driver from before V2 did.
func (cp Checkpoint[PD]) marshalV1Only() []byte {
	cp.V2 = nil
	cp.setChecksumV1()
	return must(json.Marshal(cp))
}

func (cp *Checkpoint[PD]) setChecksumV1() {
	v2 := cp.V2
	cp.V2 = nil
	cp.Checksum = 0
	cp.Checksum = checksum.New(must(json.Marshal(*cp)))
	cp.V2 = v2
}

// verify is upstream's VerifyChecksum: re-marshal with each checksum zeroed.
func (cp Checkpoint[PD]) verify() error {
	ck := cp.Checksum
	v2 := cp.V2
	cp.Checksum, cp.V2 = 0, nil
	if err := ck.Verify(must(json.Marshal(cp))); err != nil {
		return err
	}
	if v2 == nil {
		return nil
	}
	v2c := *v2
	ck2 := v2c.Checksum
	v2c.Checksum = 0
	return ck2.Verify(must(json.Marshal(v2c)))
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
