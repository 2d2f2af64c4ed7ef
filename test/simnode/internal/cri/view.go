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
	Mounts      []oci.Mount       `json:"mounts,omitempty"`
	Hooks       *oci.Hooks        `json:"hooks,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
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
func buildView(id string, sandbox *runtimeapi.PodSandboxConfig, config *runtimeapi.ContainerConfig, cdiDirs []string) (*View, error) {
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
	if len(devices) > 0 {
		// A fresh cache per container: no directory watch per node, and the
		// specs a plugin wrote just before are always seen.
		cache, err := cdi.NewCache(cdi.WithSpecDirs(cdiDirs...), cdi.WithAutoRefresh(false))
		if err != nil && cache == nil {
			return nil, fmt.Errorf("container %s: CDI cache: %w", config.Metadata.GetName(), err)
		}
		if unresolved, err := cache.InjectDevices(spec, devices...); err != nil {
			return nil, fmt.Errorf("container %s: CDI devices %v unresolvable in %v: %w",
				config.Metadata.GetName(), unresolved, cdiDirs, err)
		}
	}

	v := &View{
		Namespace:   sandbox.GetMetadata().GetNamespace(),
		Pod:         sandbox.GetMetadata().GetName(),
		PodUID:      sandbox.GetMetadata().GetUid(),
		Container:   config.GetMetadata().GetName(),
		Attempt:     config.GetMetadata().GetAttempt(),
		ContainerID: id,
		Image:       config.GetImage().GetImage(),
		Args:        spec.Process.Args,
		WorkingDir:  spec.Process.Cwd,
		CDIDevices:  devices,
		Env:         spec.Process.Env,
		Devices:     spec.Linux.Devices,
		Mounts:      spec.Mounts,
		Hooks:       spec.Hooks,
		Annotations: spec.Annotations,
	}
	return v, nil
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
