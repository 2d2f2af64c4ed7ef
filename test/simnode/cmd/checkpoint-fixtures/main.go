// checkpoint-fixtures writes checkpoint.json files exactly as the upstream Go
// driver writes them (its struct shapes in types.go, the kubelet's own checksum
// package), for the C++ codec's tests in test/data/checkpoint/. With -verify it
// instead checks files with upstream's read path (unmarshal into the Go types,
// re-marshal, compare checksums): that is how a node running the Go driver
// would judge a checkpoint our C++ code wrote.
//
//	cd test/simnode && go run ./cmd/checkpoint-fixtures -out ../data/checkpoint
//	cd test/simnode && go run ./cmd/checkpoint-fixtures -verify FILE...
package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/utils/ptr"
)

const (
	bootID   = "8a3f1c52-6a1e-4c1b-9a52-0d1f3c7e9b21"
	nodeName = "node-a"
	gpuUUID0 = "GPU-3f8b1e2a-1c7d-4e5f-9a0b-1c2d3e4f5a60"
	gpuUUID1 = "GPU-7d2c4b6a-8e9f-4a1b-8c3d-5e6f7a8b9c01"
	migUUID  = "MIG-0b1c2d3e-4f50-5617-8293-a4b5c6d7e8f9"
)

var fixedTime = metav1.NewTime(time.Date(2026, 3, 14, 15, 9, 26, 0, time.UTC))

func main() {
	out := flag.String("out", "", "directory to write the fixtures into")
	verify := flag.Bool("verify", false, "verify the files named as arguments instead")
	flag.Parse()
	if *verify {
		failed := false
		for _, f := range flag.Args() {
			if err := verifyFile(f); err != nil {
				fmt.Printf("%s: FAIL: %v\n", f, err)
				failed = true
			} else {
				fmt.Printf("%s: ok\n", f)
			}
		}
		if failed {
			os.Exit(1)
		}
		return
	}
	if *out == "" {
		fmt.Fprintln(os.Stderr, "need -out DIR or -verify FILE...")
		os.Exit(2)
	}
	files := fixtures()
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(*out, name), data, 0o644); err != nil {
			panic(err)
		}
	}
	// Every fixture but the corrupted one must pass upstream's own check.
	for name := range files {
		err := verifyFile(filepath.Join(*out, name))
		if (err != nil) != (name == "corrupted-content.json") {
			panic(fmt.Sprintf("%s: unexpected verify result: %v", name, err))
		}
	}
}

// verifyFile reads `path` as the GPU plugin, then as the CD plugin would.
func verifyFile(path string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var gpu Checkpoint[GpuPreparedDevices]
	errGpu := json.Unmarshal(data, &gpu)
	if errGpu == nil {
		errGpu = gpu.verify()
	}
	if errGpu == nil {
		return nil
	}
	var cd Checkpoint[CdPreparedDevices]
	errCd := json.Unmarshal(data, &cd)
	if errCd == nil {
		errCd = cd.verify()
	}
	if errCd == nil {
		return nil
	}
	return fmt.Errorf("as GPU checkpoint: %v; as CD checkpoint: %v", errGpu, errCd)
}

func fixtures() map[string][]byte {
	files := map[string][]byte{}

	fullGpu := gpuClaim("a1b2c3d4-0000-4000-8000-000000000001", "default", "claim-gpu",
		"gpu-0", gpuDevice(gpuUUID0, "claim-gpu-uid-1", "gpu-0", nil))
	mig := gpuClaim("a1b2c3d4-0000-4000-8000-000000000002", "team-b", "claim-mig",
		"gpu-1-mig-1g10gb-0-0", migDevice())
	vfio := gpuClaim("a1b2c3d4-0000-4000-8000-000000000003", "vm", "claim-vfio",
		"gpu-1-vfio", vfioDevice())

	// A driver from before V2: only "checksum" and "v1".
	files["gpu-v1-only.json"] = Checkpoint[GpuPreparedDevices]{V2: &CheckpointV2[GpuPreparedDevices]{
		PreparedClaims: claims(fullGpu),
	}}.marshal()
	files["gpu-v1-only.json"] = v1Only(files["gpu-v1-only.json"])

	completed := Checkpoint[GpuPreparedDevices]{V2: &CheckpointV2[GpuPreparedDevices]{
		PreparedClaims: claims(fullGpu, mig, vfio), NodeBootID: bootID}}
	files["gpu-v2-completed.json"] = completed.marshal()

	started := gpuClaim("a1b2c3d4-0000-4000-8000-000000000004", "default", "claim-started", "gpu-1", nil)
	started.v.CheckpointState = PrepareStarted
	started.v.PreparedDevices = nil
	files["gpu-v2-prepare-started.json"] = Checkpoint[GpuPreparedDevices]{V2: &CheckpointV2[GpuPreparedDevices]{
		PreparedClaims: claims(fullGpu, started), NodeBootID: bootID}}.marshal()

	files["gpu-v2-no-boot-id.json"] = Checkpoint[GpuPreparedDevices]{V2: &CheckpointV2[GpuPreparedDevices]{
		PreparedClaims: claims(mig)}}.marshal()

	files["gpu-v2-empty.json"] = Checkpoint[GpuPreparedDevices]{V2: &CheckpointV2[GpuPreparedDevices]{
		NodeBootID: bootID}}.marshal()

	files["gpu-v2-html-escaping.json"] = Checkpoint[GpuPreparedDevices]{V2: &CheckpointV2[GpuPreparedDevices]{
		PreparedClaims: claims(escapingClaim()), NodeBootID: bootID}}.marshal()

	// Numbers and escapes inside a raw extension that Go copies as written but
	// that no encoder would write itself: upstream verifies this file (it
	// re-marshals the same raw bytes); a re-encoding normalises them.
	literals := escapingClaim()
	literals.uid = "a1b2c3d4-0000-4000-8000-00000000001e"
	literals.v.Status.Allocation.Devices.Config[0].Opaque.Parameters.Raw = []byte(
		`{"kind":"GpuConfig","a":1e21,"b":1.0,"c":"\u0041\/","d":[1E2,-0.0,2.50]}`)
	files["gpu-v2-raw-literals.json"] = Checkpoint[GpuPreparedDevices]{V2: &CheckpointV2[GpuPreparedDevices]{
		PreparedClaims: claims(literals), NodeBootID: bootID}}.marshal()

	files["cd-v2-aborted.json"] = Checkpoint[CdPreparedDevices]{V2: &CheckpointV2[CdPreparedDevices]{
		PreparedClaims: cdClaims(), NodeBootID: bootID}}.marshal()

	// Same length, one device name changed: still valid JSON, wrong checksums.
	corrupted := bytes.Replace(files["gpu-v2-completed.json"], []byte(`"DeviceName":"gpu-0"`),
		[]byte(`"DeviceName":"gpu-7"`), -1)
	if bytes.Equal(corrupted, files["gpu-v2-completed.json"]) {
		panic("corruption did not apply")
	}
	files["corrupted-content.json"] = corrupted
	return files
}

// v1Only re-marshals a full checkpoint as an old driver would have written it.
func v1Only(full []byte) []byte {
	var cp Checkpoint[GpuPreparedDevices]
	must(0, json.Unmarshal(full, &cp))
	return cp.marshalV1Only()
}

type namedClaim[PD any] struct {
	uid string
	v   PreparedClaimV2[PD]
}

func claims(cs ...namedClaim[GpuPreparedDevices]) map[string]PreparedClaimV2[GpuPreparedDevices] {
	m := map[string]PreparedClaimV2[GpuPreparedDevices]{}
	for _, c := range cs {
		m[c.uid] = c.v
	}
	return m
}

func gpuClaim(uid, ns, name, device string, pd *GpuPreparedDevice) namedClaim[GpuPreparedDevices] {
	c := namedClaim[GpuPreparedDevices]{uid: uid, v: PreparedClaimV2[GpuPreparedDevices]{
		CheckpointState: PrepareCompleted,
		Status:          claimStatus(uid, ns, "gpu.nvidia.com", device, gpuConfigRaw),
		Name:            name,
		Namespace:       ns,
	}}
	if pd != nil {
		c.v.PreparedDevices = GpuPreparedDevices{{
			Devices:     []GpuPreparedDevice{*pd},
			ConfigState: GpuDeviceConfigState{TimeSliceApplied: ptr.To(true)},
		}}
	}
	return c
}

const gpuConfigRaw = `{"apiVersion":"resource.nvidia.com/v1beta1","kind":"GpuConfig","sharing":{"strategy":"TimeSlicing","timeSlicingConfig":{"interval":"Long"}}}`

func claimStatus(uid, ns, driver, device, configRaw string) resourceapi.ResourceClaimStatus {
	return resourceapi.ResourceClaimStatus{
		Allocation: &resourceapi.AllocationResult{
			Devices: resourceapi.DeviceAllocationResult{
				Results: []resourceapi.DeviceRequestAllocationResult{{
					Request: "gpu", Driver: driver, Pool: nodeName, Device: device,
				}},
				Config: []resourceapi.DeviceAllocationConfiguration{{
					Source:   resourceapi.AllocationConfigSourceClaim,
					Requests: []string{"gpu"},
					DeviceConfiguration: resourceapi.DeviceConfiguration{
						Opaque: &resourceapi.OpaqueDeviceConfiguration{
							Driver:     driver,
							Parameters: runtime.RawExtension{Raw: []byte(configRaw)},
						},
					},
				}},
			},
			NodeSelector: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
				MatchFields: []corev1.NodeSelectorRequirement{{
					Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{nodeName},
				}},
			}}},
			AllocationTimestamp: &fixedTime,
		},
		ReservedFor: []resourceapi.ResourceClaimConsumerReference{{
			Resource: "pods", Name: "pod-" + uid[len(uid)-4:], UID: types.UID("b0000000-0000-4000-8000-00000000" + uid[len(uid)-4:]),
		}},
	}
}

func checkpointedDevice(request, device, claimUID string) *CheckpointedDevice {
	return &CheckpointedDevice{
		Requests:     []string{request},
		PoolName:     nodeName,
		DeviceName:   device,
		CDIDeviceIDs: []string{"k8s.gpu.nvidia.com/claim=" + claimUID + "-" + device},
	}
}

func gpuDevice(uuid, claimUID, device string, share *types.UID) *GpuPreparedDevice {
	d := checkpointedDevice("gpu", device, claimUID)
	d.ShareID = share
	return &GpuPreparedDevice{Gpu: &PreparedGpu{Info: &GpuInfo{UUID: uuid}, Device: d}}
}

func migDevice() *GpuPreparedDevice {
	return &GpuPreparedDevice{Mig: &PreparedMigDevice{
		Concrete: &MigLiveTuple{ParentMinor: 1, GIID: 13, CIID: 0, MigUUID: migUUID,
			ParentUUID: gpuUUID1, ParentPCIBusID: "0000:1b:00.0"},
		Device: checkpointedDevice("gpu", "gpu-1-mig-1g10gb-0-0", "a1b2c3d4-0000-4000-8000-000000000002"),
	}}
}

func vfioDevice() *GpuPreparedDevice {
	d := checkpointedDevice("gpu", "gpu-1-vfio", "a1b2c3d4-0000-4000-8000-000000000003")
	share := types.UID("5e0a7f3c-2b1d-4c9e-8f6a-3d2c1b0a9f8e")
	d.ShareID = &share
	d.Metadata = &kubeletplugin.DeviceMetadata{Attributes: map[string]resourceapi.DeviceAttribute{
		"resource.kubernetes.io/pciBusID": {StringValue: ptr.To("0000:1b:00.0")},
		"gpu.nvidia.com/index":            {IntValue: ptr.To[int64](1)},
		"gpu.nvidia.com/vfio":             {BoolValue: ptr.To(true)},
		"gpu.nvidia.com/driverVersion":    {VersionValue: ptr.To("580.65.6")},
	}}
	return &GpuPreparedDevice{Vfio: &PreparedVfioDevice{
		Info:   &VfioDeviceInfo{UUID: gpuUUID1, PciBusID: "0000:1b:00.0"},
		Device: d,
	}}
}

// escapingClaim holds strings that Go's encoder escapes (HTML characters, line
// and paragraph separators, control characters) or leaves alone (non-ASCII,
// DEL), and numbers in a raw extension that Go copies as written.
func escapingClaim() namedClaim[GpuPreparedDevices] {
	uid := "a1b2c3d4-0000-4000-8000-0000000000e5"
	odd := "a<b>&c \"q\" back\\slash \u2028ls \u2029ps \x01\x1f \b\f\n\r\t é 日本 \x7f"
	c := gpuClaim(uid, "default", "claim-escape", "gpu-0", gpuDevice(gpuUUID0, uid, "gpu-0", nil))
	raw := `{"apiVersion":"resource.nvidia.com/v1beta1","kind":"GpuConfig","note":` +
		string(must(json.Marshal(odd))) +
		`,"numbers":[0,-1,9007199254740993,18446744073709551615,-9223372036854775808,0.5,1e-7,1.5e+300,123456.789,1e+21,100]}`
	c.v.Status.Allocation.Devices.Config[0].Opaque.Parameters.Raw = []byte(raw)
	c.v.Status.Devices = []resourceapi.AllocatedDeviceStatus{{
		Driver: "gpu.nvidia.com", Pool: nodeName, Device: "gpu-0",
		Conditions: []metav1.Condition{{Type: "Ready", Status: metav1.ConditionTrue,
			LastTransitionTime: fixedTime, Reason: "Prepared", Message: odd}},
		Data: &runtime.RawExtension{Raw: []byte(`{"html":"<&>"}`)},
	}}
	c.v.Status.Allocation.Devices.Results[0].ConsumedCapacity = map[resourceapi.QualifiedName]resource.Quantity{
		"memory": resource.MustParse("40Gi"), "cores": resource.MustParse("500m"),
	}
	c.v.PreparedDevices[0].ConfigState = GpuDeviceConfigState{
		MpsControlDaemonID: "mps-" + odd, MpsApplied: ptr.To(false)}
	return c
}

func cdClaims() map[string]PreparedClaimV2[CdPreparedDevices] {
	const cdUID = "c0000000-0000-4000-8000-0000000000cd"
	channel := func(uid, name string, id int) PreparedClaimV2[CdPreparedDevices] {
		dev := fmt.Sprintf("channel-%d", id)
		return PreparedClaimV2[CdPreparedDevices]{
			CheckpointState: PrepareCompleted,
			Status:          claimStatus(uid, "default", "compute-domain.nvidia.com", dev, `{"apiVersion":"resource.nvidia.com/v1beta1","kind":"ComputeDomainChannelConfig","domainID":"`+cdUID+`","allocationMode":"Single"}`),
			PreparedDevices: CdPreparedDevices{{
				Devices: []CdPreparedDevice{{Channel: &PreparedComputeDomainChannel{
					Info:   &ComputeDomainChannelInfo{ID: id},
					Device: &CheckpointedDevice{Requests: []string{"channel"}, PoolName: nodeName, DeviceName: dev, CDIDeviceIDs: []string{"k8s.compute-domain.nvidia.com/claim=" + uid + "-" + dev}},
				}}},
				ConfigState: CdDeviceConfigState{Type: "ComputeDomainChannelConfig", ComputeDomain: cdUID},
			}},
			Name:      name,
			Namespace: "default",
		}
	}
	daemonUID := "d0000000-0000-4000-8000-000000000001"
	daemon := PreparedClaimV2[CdPreparedDevices]{
		CheckpointState: PrepareCompleted,
		Status:          claimStatus(daemonUID, "nvidia-dra-driver", "compute-domain.nvidia.com", "daemon-0", `{"apiVersion":"resource.nvidia.com/v1beta1","kind":"ComputeDomainDaemonConfig","domainID":"`+cdUID+`"}`),
		PreparedDevices: CdPreparedDevices{{
			Devices: []CdPreparedDevice{{Daemon: &PreparedComputeDomainDaemon{
				Info:   &ComputeDomainDaemonInfo{ID: 0},
				Device: &CheckpointedDevice{Requests: []string{"daemon"}, PoolName: nodeName, DeviceName: "daemon-0", CDIDeviceIDs: []string{"k8s.compute-domain.nvidia.com/claim=" + daemonUID + "-daemon-0"}},
			}}},
			ConfigState: CdDeviceConfigState{Type: "ComputeDomainDaemonConfig", ComputeDomain: cdUID},
		}},
		Name:      "cd-daemon-claim",
		Namespace: "nvidia-dra-driver",
	}
	abortedUID := "c1000000-0000-4000-8000-0000000000ab"
	aborted := channel(abortedUID, "claim-aborted", 0)
	aborted.CheckpointState = PrepareAborted
	aborted.PreparedDevices = nil
	aborted.AbortedAt = &fixedTime
	return map[string]PreparedClaimV2[CdPreparedDevices]{
		"c1000000-0000-4000-8000-000000000001": channel("c1000000-0000-4000-8000-000000000001", "claim-channel", 0),
		daemonUID:                              daemon,
		abortedUID:                             aborted,
	}
}
