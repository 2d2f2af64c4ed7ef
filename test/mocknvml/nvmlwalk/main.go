// nvmlwalk: built with NVIDIA's go-nvml, as a real NVML client is, it loads a
// libnvidia-ml.so.1 (the mock, through a driver root), enumerates every GPU,
// and calls every getter go-nvml offers that takes no argument: on the
// library (System*, *GetCount, ...), on every GPU, and, where MIG is on, on
// every MIG device, GPU instance and compute instance. A symbol the library
// lacks kills the program ("symbol lookup error"), as it would a real
// client; a crash fails it too.
//
// A call passes when it answers SUCCESS or one of the codes a GPU without the
// feature gives (NOT_SUPPORTED, NO_PERMISSION, FUNCTION_NOT_FOUND for a
// function the profile lists as missing), or a code documented for that
// method on that kind of handle (expected below). Anything else (UNKNOWN,
// INVALID_ARGUMENT for the valid arguments go-nvml passes, ...) is a failure.
//
//	nvmlwalk -lib <path to libnvidia-ml.so.1> [-name <label>] [-v]
//
// Prints one summary line (calls, SUCCESS, NOT_SUPPORTED, other accepted,
// failures) and each failure; exits 1 on any failure, 2 when NVML does not
// start.
package main

import (
	"flag"
	"fmt"
	"os"
	"reflect"
	"sort"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// Codes a method answers on a kind of handle, beyond SUCCESS and the
// feature-less codes, as NVML documents them.
var expected = map[string]map[string][]nvml.Return{
	"gpu": {
		// nvml.h: INVALID_ARGUMENT "if migDevice or device is invalid"; a
		// GPU's handle is not a MIG device's.
		"GetDeviceHandleFromMigDeviceHandle": {nvml.ERROR_INVALID_ARGUMENT},
	},
}

var okCodes = map[nvml.Return]string{
	nvml.SUCCESS:                  "SUCCESS",
	nvml.ERROR_NOT_SUPPORTED:      "NOT_SUPPORTED",
	nvml.ERROR_NO_PERMISSION:      "NO_PERMISSION",
	nvml.ERROR_FUNCTION_NOT_FOUND: "FUNCTION_NOT_FOUND",
}

type tally struct {
	calls, success, notSupported, otherOK int
	byMethod                              map[string]int
	failures                              []string
	verbose                               bool
}

var returnType = reflect.TypeOf(nvml.SUCCESS)

// callGetters calls every method of `iface` named Get*/Is* (on the library:
// *Get*, as SystemGetDriverVersion) that takes no argument and returns a
// Return last, on `v`.
func (t *tally) callGetters(kind, label string, iface reflect.Type, v any) {
	val := reflect.ValueOf(v)
	for i := 0; i < iface.NumMethod(); i++ {
		m := iface.Method(i)
		getter := strings.HasPrefix(m.Name, "Get") || strings.HasPrefix(m.Name, "Is")
		if kind == "lib" {
			getter = strings.Contains(m.Name, "Get")
		}
		if !getter {
			continue
		}
		mt := m.Type
		if mt.NumIn() != 0 || mt.NumOut() == 0 || mt.Out(mt.NumOut()-1) != returnType {
			continue
		}
		t.call(kind, label, m.Name, func() nvml.Return {
			out := val.MethodByName(m.Name).Call(nil)
			return out[len(out)-1].Interface().(nvml.Return)
		})
	}
}

func (t *tally) call(kind, label, method string, f func() nvml.Return) {
	t.calls++
	t.byMethod[kind+"."+method]++
	var ret nvml.Return
	func() {
		defer func() {
			if r := recover(); r != nil {
				t.failures = append(t.failures, fmt.Sprintf("%s %s: panic: %v", label, method, r))
				ret = -1
			}
		}()
		ret = f()
	}()
	if ret == -1 {
		return
	}
	if t.verbose {
		fmt.Printf("  %s %s: %s\n", label, method, nvml.ErrorString(ret))
	}
	switch {
	case ret == nvml.SUCCESS:
		t.success++
		return
	case ret == nvml.ERROR_NOT_SUPPORTED:
		t.notSupported++
		return
	}
	if _, ok := okCodes[ret]; ok {
		t.otherOK++
		return
	}
	for _, e := range expected[kind][method] {
		if ret == e {
			t.otherOK++
			return
		}
	}
	t.failures = append(t.failures, fmt.Sprintf("%s %s: %d (%s)", label, method, int32(ret), nvml.ErrorString(ret)))
}

// lookups: the handle by UUID and by PCI bus id (both spellings) must be
// found (SUCCESS, not merely an accepted code) and be the handle by index.
func (t *tally) lookups(n nvml.Interface, label string, dev nvml.Device) {
	uuid, ret := dev.GetUUID()
	if ret == nvml.SUCCESS {
		t.call("lookup", label, "DeviceGetHandleByUUID", func() nvml.Return {
			other, ret := n.DeviceGetHandleByUUID(uuid)
			if ret != nvml.SUCCESS || other != dev {
				t.failures = append(t.failures, fmt.Sprintf("%s DeviceGetHandleByUUID: %s, or another device",
					label, nvml.ErrorString(ret)))
			}
			return ret
		})
	}
	pci, ret := dev.GetPciInfo()
	if ret != nvml.SUCCESS {
		return
	}
	for _, id := range [][]int8{pci.BusId[:], pci.BusIdLegacy[:]} {
		b := make([]byte, 0, len(id))
		for _, c := range id {
			if c == 0 {
				break
			}
			b = append(b, byte(c))
		}
		busID := string(b)
		t.call("lookup", label, "DeviceGetHandleByPciBusId", func() nvml.Return {
			other, ret := n.DeviceGetHandleByPciBusId(busID)
			if ret != nvml.SUCCESS || other != dev {
				t.failures = append(t.failures, fmt.Sprintf("%s DeviceGetHandleByPciBusId(%s): %s, or another device",
					label, busID, nvml.ErrorString(ret)))
			}
			return ret
		})
	}
}

func main() {
	lib := flag.String("lib", "", "path of the libnvidia-ml.so.1 to load")
	name := flag.String("name", "", "label for the summary (the profile)")
	verbose := flag.Bool("v", false, "print every call's answer")
	flag.Parse()
	if *lib == "" {
		fmt.Fprintln(os.Stderr, "nvmlwalk: -lib is required")
		os.Exit(2)
	}
	n := nvml.New(nvml.WithLibraryPath(*lib))
	if ret := n.Init(); ret != nvml.SUCCESS {
		fmt.Fprintf(os.Stderr, "nvmlwalk: nvml.Init: %s\n", n.ErrorString(ret))
		os.Exit(2)
	}
	t := &tally{byMethod: map[string]int{}, verbose: *verbose}

	// The library's own argument-less getters (system, counts, ...).
	t.callGetters("lib", "lib", reflect.TypeOf((*nvml.Interface)(nil)).Elem(), n)

	count, ret := n.DeviceGetCount()
	if ret != nvml.SUCCESS {
		fmt.Fprintf(os.Stderr, "nvmlwalk: DeviceGetCount: %s\n", n.ErrorString(ret))
		os.Exit(2)
	}
	deviceType := reflect.TypeOf((*nvml.Device)(nil)).Elem()
	giType := reflect.TypeOf((*nvml.GpuInstance)(nil)).Elem()
	ciType := reflect.TypeOf((*nvml.ComputeInstance)(nil)).Elem()
	migDevices, gpuInstances, computeInstances := 0, 0, 0
	for i := 0; i < count; i++ {
		dev, ret := n.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			t.failures = append(t.failures, fmt.Sprintf("gpu%d DeviceGetHandleByIndex: %s", i, n.ErrorString(ret)))
			continue
		}
		label := fmt.Sprintf("gpu%d", i)
		t.callGetters("gpu", label, deviceType, dev)
		t.lookups(n, label, dev)

		current, _, ret := dev.GetMigMode()
		if ret != nvml.SUCCESS || current != nvml.DEVICE_MIG_ENABLE {
			continue
		}
		// MIG devices.
		max, ret := dev.GetMaxMigDeviceCount()
		t.call("gpu", label, "GetMaxMigDeviceCount", func() nvml.Return { return ret })
		for j := 0; j < max; j++ {
			mig, ret := dev.GetMigDeviceHandleByIndex(j)
			if ret == nvml.ERROR_NOT_FOUND {
				continue // no MIG device at this index
			}
			t.call("gpu", label, "GetMigDeviceHandleByIndex", func() nvml.Return { return ret })
			if ret != nvml.SUCCESS {
				continue
			}
			migDevices++
			t.callGetters("mig", fmt.Sprintf("%s/mig%d", label, j), deviceType, mig)
		}
		// GPU instances of every profile, and their compute instances.
		for p := 0; p < nvml.GPU_INSTANCE_PROFILE_COUNT; p++ {
			info, ret := dev.GetGpuInstanceProfileInfo(p)
			if ret == nvml.ERROR_NOT_SUPPORTED || ret == nvml.ERROR_INVALID_ARGUMENT {
				continue // a profile this GPU does not have
			}
			t.call("gpu", label, "GetGpuInstanceProfileInfo", func() nvml.Return { return ret })
			if ret != nvml.SUCCESS {
				continue
			}
			gis, ret := dev.GetGpuInstances(&info)
			t.call("gpu", label, "GetGpuInstances", func() nvml.Return { return ret })
			for _, gi := range gis {
				gpuInstances++
				gii, _ := gi.GetInfo()
				giLabel := fmt.Sprintf("%s/gi%d", label, gii.Id)
				t.callGetters("gi", giLabel, giType, gi)
				for cp := 0; cp < nvml.COMPUTE_INSTANCE_PROFILE_COUNT; cp++ {
					cinfo, ret := gi.GetComputeInstanceProfileInfo(cp, nvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
					if ret == nvml.ERROR_NOT_SUPPORTED || ret == nvml.ERROR_INVALID_ARGUMENT {
						continue
					}
					t.call("gi", giLabel, "GetComputeInstanceProfileInfo", func() nvml.Return { return ret })
					if ret != nvml.SUCCESS {
						continue
					}
					cis, ret := gi.GetComputeInstances(&cinfo)
					t.call("gi", giLabel, "GetComputeInstances", func() nvml.Return { return ret })
					for _, ci := range cis {
						computeInstances++
						cii, _ := ci.GetInfo()
						t.callGetters("ci", fmt.Sprintf("%s/ci%d", giLabel, cii.Id), ciType, ci)
					}
				}
			}
		}
	}
	if ret := n.Shutdown(); ret != nvml.SUCCESS {
		t.failures = append(t.failures, "Shutdown: "+n.ErrorString(ret))
	}

	methods := 0
	for range t.byMethod {
		methods++
	}
	fmt.Printf("nvmlwalk %s: %d GPUs, %d MIG devices, %d GPU instances, %d compute instances: "+
		"%d calls (%d methods): %d SUCCESS, %d NOT_SUPPORTED, %d other accepted, %d failures\n",
		*name, count, migDevices, gpuInstances, computeInstances,
		t.calls, methods, t.success, t.notSupported, t.otherOK, len(t.failures))
	sort.Strings(t.failures)
	for _, f := range t.failures {
		fmt.Printf("  FAIL %s\n", f)
	}
	if len(t.failures) > 0 {
		os.Exit(1)
	}
}
