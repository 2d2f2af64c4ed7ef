package harness

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/fsnotify/fsnotify"
)

// Simulated GPU faults: what a GPU node's hardware does, played through the
// files its mock NVML reads (test/mocknvml/README.md): NVML events appended
// to <driver root>/mock-nvml/events.jsonl, fabric health in the fabric map
// of its state.json. Every process of the node that loaded the mock sees
// them, plugins in containers included (the driver root is theirs too). The
// functions return once the files say so; what the plugin makes of it is
// for the caller to await.

// Fault kinds on a GPU of a node, as `simnode fault <kind> <node> <gpu> ...`
// names them. GPU is an index into the node's profile devices or a UUID.
const (
	FaultXid             = "xid"              // GPU XID: an Xid critical error event
	FaultGPULost         = "gpu-lost"         // GPU: it fell off the bus
	FaultGPURecovered    = "gpu-recovered"    // GPU: it is back
	FaultFabricUnhealthy = "fabric-unhealthy" // GPU: fabric healthSummary unhealthy
	FaultFabricHealthy   = "fabric-healthy"   // GPU: fabric healthSummary healthy
)

// Event kinds of InjectNVMLEvent: the mock's "type" values.
const (
	NVMLEventXid          = "xid"
	NVMLEventGPULost      = "gpu_lost"
	NVMLEventGPURecovered = "gpu_recovered"
)

// Fabric health values written by SetFabricHealth (nvmlGpuFabricInfo_v3).
const (
	fabricHealthSummaryHealthy   = 1 // NVML_GPU_FABRIC_HEALTH_SUMMARY_HEALTHY
	fabricHealthSummaryUnhealthy = 2 // NVML_GPU_FABRIC_HEALTH_SUMMARY_UNHEALTHY
	// NVML_GPU_FABRIC_HEALTH_MASK_ROUTE_UNHEALTHY_TRUE (1) at its shift (4).
	fabricHealthMaskRouteUnhealthy = 1 << 4
)

// ErrNoGPUs: the node has no GPU profile, so no mock NVML.
var ErrNoGPUs = errors.New("node has no GPUs (no mock NVML profile)")

// ProfileGPU is one device of a node's mock NVML profile, in profile order.
type ProfileGPU struct {
	UUID      string
	Minor     int
	HasFabric bool // the profile gives it fabric info ("fabric" not null)
}

// MockNVMLStateDir is the folder of the node's mock NVML state, events and
// event registrations (<driver root>/mock-nvml).
func (n *Node) MockNVMLStateDir() (string, error) {
	if n.Config.GPUProfile == "" {
		return "", fmt.Errorf("node %s: %w", n.Config.Name, ErrNoGPUs)
	}
	return filepath.Join(n.Config.DriverRoot(), "mock-nvml"), nil
}

// ProfileGPUs reads the node's mock NVML profile (the copy in its driver
// root).
func (n *Node) ProfileGPUs() ([]ProfileGPU, error) {
	dir, err := n.MockNVMLStateDir()
	if err != nil {
		return nil, err
	}
	return readProfileGPUs(filepath.Join(dir, "profile.json"))
}

// readProfileGPUs lists a profile's devices, each merged over deviceDefaults
// as the mock merges them, as far as the fields read here go.
func readProfileGPUs(path string) ([]ProfileGPU, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var p struct {
		DeviceDefaults map[string]json.RawMessage   `json:"deviceDefaults"`
		Devices        []map[string]json.RawMessage `json:"devices"`
	}
	if err := json.Unmarshal(data, &p); err != nil {
		return nil, fmt.Errorf("profile %s: %w", path, err)
	}
	field := func(d map[string]json.RawMessage, key string) (json.RawMessage, bool) {
		if v, ok := d[key]; ok {
			return v, true
		}
		v, ok := p.DeviceDefaults[key]
		return v, ok
	}
	var out []ProfileGPU
	for i, d := range p.Devices {
		var gpu ProfileGPU
		raw, _ := field(d, "uuid")
		if err := json.Unmarshal(raw, &gpu.UUID); err != nil || gpu.UUID == "" {
			return nil, fmt.Errorf("profile %s: devices[%d].uuid missing", path, i)
		}
		if raw, ok := field(d, "minor"); ok {
			_ = json.Unmarshal(raw, &gpu.Minor)
		}
		raw, ok := field(d, "fabric")
		gpu.HasFabric = ok && string(bytes.TrimSpace(raw)) != "null"
		out = append(out, gpu)
	}
	return out, nil
}

// ResolveGPU turns a GPU argument into its UUID: an index into the node's
// profile devices ("0", "1", ...), or one of their UUIDs.
func (n *Node) ResolveGPU(gpu string) (ProfileGPU, error) {
	gpus, err := n.ProfileGPUs()
	if err != nil {
		return ProfileGPU{}, err
	}
	return resolveGPU(gpus, n.Config.Name, gpu)
}

func resolveGPU(gpus []ProfileGPU, node, gpu string) (ProfileGPU, error) {
	if i, err := strconv.Atoi(gpu); err == nil {
		if i < 0 || i >= len(gpus) {
			return ProfileGPU{}, fmt.Errorf("node %s has GPUs 0-%d, not %d", node, len(gpus)-1, i)
		}
		return gpus[i], nil
	}
	for _, g := range gpus {
		if g.UUID == gpu {
			return g, nil
		}
	}
	return ProfileGPU{}, fmt.Errorf("node %s has no GPU %q (want an index or a GPU UUID of its profile)", node, gpu)
}

// InjectNVMLEvent appends one event for the GPU uuid to the node's mock NVML
// events file: kind is the mock's type (NVMLEventXid, "double_bit_ecc", ...,
// NVMLEventGPULost, NVMLEventGPURecovered), data the XID for xid (ignored by
// the others). Only event sets created before the call see it (as with real
// NVML): wait for WaitEventRegistration first.
func (c *Cluster) InjectNVMLEvent(node, uuid, kind string, data uint64) error {
	n, err := c.Node(node)
	if err != nil {
		return err
	}
	dir, err := n.MockNVMLStateDir()
	if err != nil {
		return err
	}
	return AppendNVMLEvent(dir, uuid, kind, data)
}

// AppendNVMLEvent appends {"uuid","type","data"} to <stateDir>/events.jsonl
// in one O_APPEND write, so concurrent writers never interleave a line.
func AppendNVMLEvent(stateDir, uuid, kind string, data uint64) error {
	if uuid == "" || kind == "" {
		return errors.New("an NVML event needs a GPU UUID and a kind")
	}
	line, err := json.Marshal(struct {
		UUID string `json:"uuid"`
		Type string `json:"type"`
		Data uint64 `json:"data"`
	}{uuid, kind, data})
	if err != nil {
		return err
	}
	path := filepath.Join(stateDir, "events.jsonl")
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.Write(append(line, '\n')); err != nil {
		f.Close()
		return fmt.Errorf("append to %s: %w", path, err)
	}
	return f.Close()
}

// WaitEventRegistration waits, on inotify events of the node's mock NVML
// state folder, until a live process has registered NVML events for the GPU
// uuid (a line of its event-registrations.jsonl). Lines of processes that
// have exited do not count, so after a plugin restart this waits for the new
// plugin. It says nothing about the event types: a test checks those in the
// file if it cares.
func (c *Cluster) WaitEventRegistration(ctx context.Context, node, uuid string) error {
	n, err := c.Node(node)
	if err != nil {
		return err
	}
	dir, err := n.MockNVMLStateDir()
	if err != nil {
		return err
	}
	if err := WaitNVMLEventRegistration(ctx, dir, uuid); err != nil {
		return fmt.Errorf("node %s: %w", node, err)
	}
	return nil
}

// NVMLEventRegistration is one line of event-registrations.jsonl.
type NVMLEventRegistration struct {
	Pid   int    `json:"pid"`
	UUID  string `json:"uuid"`
	Types uint64 `json:"types"`
}

// ReadNVMLEventRegistrations reads <stateDir>/event-registrations.jsonl;
// none when it does not exist. An unfinished last line is left out.
func ReadNVMLEventRegistrations(stateDir string) ([]NVMLEventRegistration, error) {
	data, err := os.ReadFile(filepath.Join(stateDir, "event-registrations.jsonl"))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if i := bytes.LastIndexByte(data, '\n'); i >= 0 {
		data = data[:i+1]
	} else {
		data = nil
	}
	var out []NVMLEventRegistration
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		if len(bytes.TrimSpace(sc.Bytes())) == 0 {
			continue
		}
		var r NVMLEventRegistration
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			return nil, fmt.Errorf("event-registrations.jsonl: %q: %w", sc.Text(), err)
		}
		out = append(out, r)
	}
	return out, sc.Err()
}

// WaitNVMLEventRegistration is WaitEventRegistration on a state folder.
func WaitNVMLEventRegistration(ctx context.Context, stateDir, uuid string) error {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return err
	}
	defer w.Close()
	// Watch first, then look: a line written in between wakes the loop.
	if err := w.Add(stateDir); err != nil {
		return fmt.Errorf("watch %s: %w", stateDir, err)
	}
	for {
		regs, err := ReadNVMLEventRegistrations(stateDir)
		if err != nil {
			return err
		}
		for _, r := range regs {
			if r.UUID == uuid && processAlive(r.Pid) {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("no live process registered NVML events for %s in %s: %w", uuid, stateDir, ctx.Err())
		case err := <-w.Errors:
			return errors.Join(errors.New("watch failed"), err)
		case <-w.Events:
		}
	}
}

// processAlive: pid exists (containers share this machine's pid namespace,
// so the mock's pids are ours).
func processAlive(pid int) bool {
	if pid <= 0 {
		return false
	}
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// SetFabricHealth makes the GPU's fabric (gpu: an index into the node's
// profile GPUs or a UUID) healthy (healthSummary HEALTHY, healthMask 0, as
// the GB200 profiles start) or unhealthy (healthSummary UNHEALTHY,
// healthMask ROUTE_UNHEALTHY true) in the node's mock NVML state file; the
// fabric state and status stay. Refused for a GPU without fabric.
func (c *Cluster) SetFabricHealth(node, gpu string, healthy bool) error {
	n, err := c.Node(node)
	if err != nil {
		return err
	}
	resolved, err := n.ResolveGPU(gpu)
	if err != nil {
		return err
	}
	if !resolved.HasFabric {
		return fmt.Errorf("node %s: GPU %s has no fabric (its profile says fabric: null)", node, resolved.UUID)
	}
	dir, _ := n.MockNVMLStateDir()
	return SetNVMLFabricHealth(dir, resolved.UUID, healthy)
}

// SetNVMLFabricHealth is SetFabricHealth on a state folder. It changes the
// state file as the mock does: under flock on state.json.lock, the whole
// file rewritten to a temporary file, fsynced and renamed over it (readers
// re-read on change, so running processes see it at their next call). A
// missing file is created with no GPU entries (the mock fills them from the
// profile).
func SetNVMLFabricHealth(stateDir, uuid string, healthy bool) error {
	summary, mask := fabricHealthSummaryUnhealthy, fabricHealthMaskRouteUnhealthy
	if healthy {
		summary, mask = fabricHealthSummaryHealthy, 0
	}
	return updateNVMLState(filepath.Join(stateDir, "state.json"), func(state map[string]json.RawMessage) error {
		fabric := map[string]map[string]json.RawMessage{}
		if raw, ok := state["fabric"]; ok {
			if err := json.Unmarshal(raw, &fabric); err != nil {
				return fmt.Errorf("fabric: %w", err)
			}
		}
		entry := fabric[uuid]
		if entry == nil {
			entry = map[string]json.RawMessage{}
		}
		entry["healthSummary"] = json.RawMessage(strconv.Itoa(summary))
		entry["healthMask"] = json.RawMessage(strconv.Itoa(mask))
		fabric[uuid] = entry
		raw, err := json.Marshal(fabric)
		if err != nil {
			return err
		}
		state["fabric"] = raw
		return nil
	})
}

// updateNVMLState is the mock's read-modify-write of its state file.
func updateNVMLState(path string, change func(map[string]json.RawMessage) error) error {
	lock, err := os.OpenFile(path+".lock", os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	defer lock.Close()
	for {
		err = syscall.Flock(int(lock.Fd()), syscall.LOCK_EX)
		if !errors.Is(err, syscall.EINTR) {
			break
		}
	}
	if err != nil {
		return fmt.Errorf("flock %s.lock: %w", path, err)
	}
	state := map[string]json.RawMessage{}
	data, err := os.ReadFile(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		state["version"] = json.RawMessage("1")
		state["gpus"] = json.RawMessage("{}")
	case err != nil:
		return err
	default:
		if err := json.Unmarshal(data, &state); err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
	}
	if err := change(state); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	out, err := json.MarshalIndent(state, "", " ")
	if err != nil {
		return err
	}
	tmp := fmt.Sprintf("%s.tmp.%d", path, os.Getpid())
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	_, err = f.Write(append(out, '\n'))
	if err == nil {
		// Before the rename: a reader must never see a renamed, empty file.
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// gpuFault applies a GPU fault kind (FaultXid, ...) to node; args are
// GPU [XID]. Fault's part for GPU kinds.
func (c *Cluster) gpuFault(kind, node string, args []string) (string, error) {
	want := 1
	if kind == FaultXid {
		want = 2
	}
	if len(args) != want {
		if kind == FaultXid {
			return "", errors.New("xid wants GPU XID (GPU: an index into the node's profile GPUs or a UUID)")
		}
		return "", fmt.Errorf("%s wants GPU (an index into the node's profile GPUs or a UUID)", kind)
	}
	n, err := c.Node(node)
	if err != nil {
		return "", err
	}
	gpu, err := n.ResolveGPU(args[0])
	if err != nil {
		return "", err
	}
	dir, _ := n.MockNVMLStateDir()
	switch kind {
	case FaultXid:
		xid, err := strconv.ParseUint(args[1], 10, 64)
		if err != nil {
			return "", fmt.Errorf("xid %q: want a number", args[1])
		}
		return fmt.Sprintf("xid %d on %s", xid, gpu.UUID), AppendNVMLEvent(dir, gpu.UUID, NVMLEventXid, xid)
	case FaultGPULost:
		return "lost " + gpu.UUID, AppendNVMLEvent(dir, gpu.UUID, NVMLEventGPULost, 0)
	case FaultGPURecovered:
		return "recovered " + gpu.UUID, AppendNVMLEvent(dir, gpu.UUID, NVMLEventGPURecovered, 0)
	case FaultFabricUnhealthy, FaultFabricHealthy:
		healthy := kind == FaultFabricHealthy
		if err := c.SetFabricHealth(node, gpu.UUID, healthy); err != nil {
			return "", err
		}
		return strings.TrimPrefix(kind, "fabric-") + " fabric on " + gpu.UUID, nil
	}
	return "", fmt.Errorf("unknown GPU fault %q", kind)
}

// isGPUFault says whether kind is one of the GPU fault kinds.
func isGPUFault(kind string) bool {
	switch kind {
	case FaultXid, FaultGPULost, FaultGPURecovered, FaultFabricUnhealthy, FaultFabricHealthy:
		return true
	}
	return false
}
