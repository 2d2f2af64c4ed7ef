package cri

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	oci "github.com/opencontainers/runtime-spec/specs-go"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"tags.cncf.io/container-device-interface/pkg/cdi"
	cdispec "tags.cncf.io/container-device-interface/specs-go"
)

// View is what a container would see, recorded as JSON for tests: the
// kubelet's request with the CDI edits of its devices applied by the CDI
// reference library, as containerd would apply them.
type View struct {
	Namespace   string            `json:"namespace"`
	Pod         string            `json:"pod"`
	PodUID      string            `json:"podUID"`
	Container   string            `json:"container"`
	Attempt     uint32            `json:"attempt"`
	ContainerID string            `json:"containerID"`
	Image       string            `json:"image"`
	Args        []string          `json:"args"`
	WorkingDir  string            `json:"workingDir,omitempty"`
	CDIDevices  []string          `json:"cdiDevices,omitempty"`
	Env         []string          `json:"env"`
	Devices     []oci.LinuxDevice `json:"devices,omitempty"`
	// DeviceHostPaths maps a device node's container path to the file in the
	// node's folder that its CDI spec named as host path (see mapDeviceNodes).
	DeviceHostPaths map[string]string `json:"deviceHostPaths,omitempty"`
	Mounts          []oci.Mount       `json:"mounts,omitempty"`
	Hooks           *oci.Hooks        `json:"hooks,omitempty"`
	Annotations     map[string]string `json:"annotations,omitempty"`
}

// EnvValue returns the value of the last assignment of name, as a process
// would see it.
func (v *View) EnvValue(name string) (string, bool) {
	value, found := "", false
	for _, kv := range v.Env {
		if k, val, ok := strings.Cut(kv, "="); ok && k == name {
			value, found = val, true
		}
	}
	return value, found
}

// buildView applies the CDI devices the kubelet asked for (ContainerConfig's
// CDIDevices and the older annotation form) to an OCI spec made from the
// request. An unresolvable device is an error, as in containerd.
func buildView(id string, sandbox *runtimeapi.PodSandboxConfig, config *runtimeapi.ContainerConfig, cdiDirs []string, nodeDir string) (*View, error) {
	spec := &oci.Spec{
		Process:     &oci.Process{Args: append(append([]string{}, config.Command...), config.Args...), Cwd: config.WorkingDir},
		Linux:       &oci.Linux{},
		Annotations: map[string]string{},
	}
	for _, kv := range config.Envs {
		spec.Process.Env = append(spec.Process.Env, kv.Key+"="+string(kv.Value))
	}
	for _, m := range config.Mounts {
		opts := []string{"rbind"}
		if m.Readonly {
			opts = append(opts, "ro")
		}
		spec.Mounts = append(spec.Mounts, oci.Mount{Destination: m.ContainerPath, Source: m.HostPath, Type: "bind", Options: opts})
	}
	for _, d := range config.Devices {
		spec.Linux.Devices = append(spec.Linux.Devices, oci.LinuxDevice{Path: d.ContainerPath})
	}
	for k, v := range config.Annotations {
		spec.Annotations[k] = v
	}

	var devices []string
	for _, d := range config.CDIDevices {
		devices = append(devices, d.Name)
	}
	_, annotated, err := cdi.ParseAnnotations(config.Annotations)
	if err != nil {
		return nil, fmt.Errorf("container %s: CDI annotations: %w", config.Metadata.GetName(), err)
	}
	devices = append(devices, annotated...)
	var hostPaths map[string]string
	if len(devices) > 0 {
		// A fresh cache per container: no directory watch per node, and the
		// specs a plugin wrote just before are always seen.
		cache, err := cdi.NewCache(cdi.WithSpecDirs(cdiDirs...), cdi.WithAutoRefresh(false))
		if err != nil && cache == nil {
			return nil, fmt.Errorf("container %s: CDI cache: %w", config.Metadata.GetName(), err)
		}
		hostPaths = mapDeviceNodes(cache, devices, nodeDir)
		if unresolved, err := cache.InjectDevices(spec, devices...); err != nil {
			return nil, fmt.Errorf("container %s: CDI devices %v unresolvable in %v: %w",
				config.Metadata.GetName(), unresolved, cdiDirs, err)
		}
	}

	v := &View{
		Namespace:       sandbox.GetMetadata().GetNamespace(),
		Pod:             sandbox.GetMetadata().GetName(),
		PodUID:          sandbox.GetMetadata().GetUid(),
		Container:       config.GetMetadata().GetName(),
		Attempt:         config.GetMetadata().GetAttempt(),
		ContainerID:     id,
		Image:           config.GetImage().GetImage(),
		Args:            spec.Process.Args,
		WorkingDir:      spec.Process.Cwd,
		CDIDevices:      devices,
		Env:             spec.Process.Env,
		Devices:         spec.Linux.Devices,
		DeviceHostPaths: hostPaths,
		Mounts:          spec.Mounts,
		Hooks:           spec.Hooks,
		Annotations:     spec.Annotations,
	}
	return v, nil
}

// mapDeviceNodes points the host paths of the requested devices' device
// nodes (their container path when they name none) into the node's folder,
// which plays the node's "/", as hostPath volumes are: a plugin writes
// /dev/nvidia0 or <driver root>/dev/nvidia0 as the node sees it. Only paths
// that exist there are mapped; others stay paths of this machine. A mapped
// character device (make-driver-root's nodes are real ones) keeps what the
// spec gives and the CDI library fills in its type, major, minor and mode
// from the file. A mapped file that is no device node (a test's
// placeholder) gets type "c" and, where the spec gives none, major and
// minor -1, so that the CDI library takes the node as fully specified
// instead of failing on its stat. Returns container path -> node-folder
// path of what was mapped.
func mapDeviceNodes(cache *cdi.Cache, devices []string, nodeDir string) map[string]string {
	mapped := map[string]string{}
	seen := map[*cdispec.DeviceNode]bool{}
	mapOne := func(dn *cdispec.DeviceNode) {
		if dn == nil || seen[dn] {
			return
		}
		seen[dn] = true
		host := dn.HostPath
		if host == "" {
			host = dn.Path
		}
		if host == nodeDir || strings.HasPrefix(host, nodeDir+"/") {
			return
		}
		inNode := filepath.Join(nodeDir, host)
		st, err := os.Lstat(inNode)
		if err != nil {
			return
		}
		dn.HostPath = inNode
		mapped[dn.Path] = inNode
		if st.Mode()&(os.ModeDevice|os.ModeNamedPipe) != 0 {
			return
		}
		if dn.Type == "" {
			dn.Type = "c"
		}
		if dn.Major == 0 && dn.Type != "p" {
			dn.Major, dn.Minor = -1, -1
		}
	}
	for _, name := range devices {
		d := cache.GetDevice(name)
		if d == nil {
			continue
		}
		for _, dn := range d.GetSpec().ContainerEdits.DeviceNodes {
			mapOne(dn)
		}
		for _, dn := range d.ContainerEdits.DeviceNodes {
			mapOne(dn)
		}
	}
	if len(mapped) == 0 {
		return nil
	}
	return mapped
}

// ViewPath is where the view of a pod's container is recorded under a node's
// views folder; the latest attempt wins.
func ViewPath(viewsDir, namespace, pod, container string) string {
	return filepath.Join(viewsDir, namespace, pod, container+".json")
}

// ReadView reads a recorded view.
func ReadView(path string) (*View, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	v := &View{}
	if err := json.Unmarshal(data, v); err != nil {
		return nil, fmt.Errorf("parse view %s: %w", path, err)
	}
	return v, nil
}

func (v *View) save(viewsDir string) error {
	path := ViewPath(viewsDir, v.Namespace, v.Pod, v.Container)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	// Written whole and renamed, so a test reading it never sees half a file.
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
