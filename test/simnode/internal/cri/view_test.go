package cri

import (
	"os"
	"path/filepath"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// A CDI spec names device nodes as the node sees them; the view resolves
// them in the node's folder, and a placeholder file there (no device node)
// still gives the container its device node.
func TestBuildViewMapsDeviceNodesIntoNodeFolder(t *testing.T) {
	node := t.TempDir()
	cdiDir := filepath.Join(node, "var/run/cdi")
	for _, f := range []string{"run/nvidia/driver/dev/nvidia3", "dev/nvidiactl"} {
		p := filepath.Join(node, f)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	spec := `cdiVersion: 0.6.0
kind: k8s.gpu.nvidia.com/claim
containerEdits:
  env: [NVIDIA_VISIBLE_DEVICES=void]
  deviceNodes:
  - path: /dev/nvidiactl
devices:
- name: uid-gpu-3
  containerEdits:
    deviceNodes:
    - path: /dev/nvidia3
      hostPath: /run/nvidia/driver/dev/nvidia3
    - path: /dev/nvidia-caps/nvidia-cap12
      type: c
      major: 234
      minor: 12
`
	if err := os.MkdirAll(cdiDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(cdiDir, "k8s.gpu.nvidia.com-claim_uid.yaml"), []byte(spec), 0o644); err != nil {
		t.Fatal(err)
	}
	sandbox := &runtimeapi.PodSandboxConfig{Metadata: &runtimeapi.PodSandboxMetadata{Name: "p", Namespace: "ns", Uid: "u"}}
	config := &runtimeapi.ContainerConfig{
		Metadata:   &runtimeapi.ContainerMetadata{Name: "c"},
		Image:      &runtimeapi.ImageSpec{Image: "x"},
		CDIDevices: []*runtimeapi.CDIDevice{{Name: "k8s.gpu.nvidia.com/claim=uid-gpu-3"}},
	}
	v, err := buildView("id", sandbox, config, []string{cdiDir}, node)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int64{}
	for _, d := range v.Devices {
		got[d.Path] = d.Major
	}
	want := map[string]int64{"/dev/nvidiactl": -1, "/dev/nvidia3": -1, "/dev/nvidia-caps/nvidia-cap12": 234}
	for p, major := range want {
		if m, ok := got[p]; !ok || m != major {
			t.Errorf("device %s: major %d (present %v), want %d; devices %+v", p, m, ok, major, v.Devices)
		}
	}
	if h := v.DeviceHostPaths["/dev/nvidia3"]; h != filepath.Join(node, "run/nvidia/driver/dev/nvidia3") {
		t.Errorf("host path of /dev/nvidia3: %q", h)
	}
	if h := v.DeviceHostPaths["/dev/nvidiactl"]; h != filepath.Join(node, "dev/nvidiactl") {
		t.Errorf("host path of /dev/nvidiactl: %q", h)
	}
	if _, ok := v.DeviceHostPaths["/dev/nvidia-caps/nvidia-cap12"]; ok {
		t.Errorf("a device node missing from the node's folder was mapped")
	}
	if val, _ := v.EnvValue("NVIDIA_VISIBLE_DEVICES"); val != "void" {
		t.Errorf("NVIDIA_VISIBLE_DEVICES=%q", val)
	}
}
