#!/usr/bin/env python3
"""Reads, read-only, everything the driver asks NVML about, from a real GPU.

Runs on a machine with an NVIDIA GPU (python3 and libnvidia-ml.so.1 only; no
NVIDIA Python package) and prints one JSON document: per device the identity,
memory, PCI, MIG and fabric facts, and every GPU-instance profile with its
possible placements. It never changes a setting (no MIG mode, no instances).

The output is the source of the mock NVML's H100 profile
(test/mocknvml/profiles/h100-sxm.json) and of scripts/check-real-gpu's
comparison with our own discovery.

  python3 test/data/nvml-probe.py > h100-nvml-probe.json
"""
import ctypes
import json
import os
import sys

lib = ctypes.CDLL(os.environ.get("NVML_LIB", "libnvidia-ml.so.1"))
lib.nvmlErrorString.restype = ctypes.c_char_p

# Struct layouts written from the NVML API 13 documentation.
class PciInfo(ctypes.Structure):
    _fields_ = [("busIdLegacy", ctypes.c_char * 16), ("domain", ctypes.c_uint),
                ("bus", ctypes.c_uint), ("device", ctypes.c_uint),
                ("pciDeviceId", ctypes.c_uint), ("pciSubSystemId", ctypes.c_uint),
                ("busId", ctypes.c_char * 32)]

class Memory(ctypes.Structure):
    _fields_ = [("total", ctypes.c_ulonglong), ("free", ctypes.c_ulonglong),
                ("used", ctypes.c_ulonglong)]

class GiProfileV2(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint), ("id", ctypes.c_uint),
                ("isP2pSupported", ctypes.c_uint), ("sliceCount", ctypes.c_uint),
                ("instanceCount", ctypes.c_uint), ("multiprocessorCount", ctypes.c_uint),
                ("copyEngineCount", ctypes.c_uint), ("decoderCount", ctypes.c_uint),
                ("encoderCount", ctypes.c_uint), ("jpegCount", ctypes.c_uint),
                ("ofaCount", ctypes.c_uint), ("memorySizeMB", ctypes.c_ulonglong),
                ("name", ctypes.c_char * 96)]

class Placement(ctypes.Structure):
    _fields_ = [("start", ctypes.c_uint), ("size", ctypes.c_uint)]

class FabricV1(ctypes.Structure):
    _fields_ = [("clusterUuid", ctypes.c_ubyte * 16), ("status", ctypes.c_int),
                ("cliqueId", ctypes.c_uint), ("state", ctypes.c_ubyte)]

class FabricV3(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint), ("clusterUuid", ctypes.c_ubyte * 16),
                ("status", ctypes.c_int), ("cliqueId", ctypes.c_uint),
                ("state", ctypes.c_ubyte), ("healthMask", ctypes.c_uint),
                ("healthSummary", ctypes.c_ubyte)]

class AddressingMode(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint), ("value", ctypes.c_uint)]


def call(name, *args):
    fn = getattr(lib, name, None)
    if fn is None:
        return "FUNCTION_NOT_FOUND"
    rc = fn(*args)
    if rc != 0:
        return f"error {rc}: {lib.nvmlErrorString(rc).decode()}"
    return None


def text(name, *head, size=96):
    buf = ctypes.create_string_buffer(size)
    err = call(name, *head, buf, ctypes.c_uint(size))
    return err if err else buf.value.decode()


def uint(name, *head):
    v = ctypes.c_uint(0)
    err = call(name, *head, ctypes.byref(v))
    return err if err else v.value


def main():
    out = {}
    rc = lib.nvmlInit_v2()
    if rc != 0:
        sys.exit(f"nvmlInit_v2: {lib.nvmlErrorString(rc).decode()}")
    out["driverVersion"] = text("nvmlSystemGetDriverVersion", size=80)
    out["nvmlVersion"] = text("nvmlSystemGetNVMLVersion", size=80)
    cuda = ctypes.c_int(0)
    out["cudaDriverVersion"] = call("nvmlSystemGetCudaDriverVersion_v2", ctypes.byref(cuda)) or cuda.value
    count = uint("nvmlDeviceGetCount_v2")
    out["deviceCount"] = count
    out["devices"] = []
    for i in range(count if isinstance(count, int) else 0):
        h = ctypes.c_void_p()
        lib.nvmlDeviceGetHandleByIndex_v2(ctypes.c_uint(i), ctypes.byref(h))
        d = {"index": i}
        d["name"] = text("nvmlDeviceGetName", h)
        d["uuid"] = text("nvmlDeviceGetUUID", h)
        d["serial"] = text("nvmlDeviceGetSerial", h, size=30)
        d["boardPartNumber"] = text("nvmlDeviceGetBoardPartNumber", h, size=80)
        d["vbiosVersion"] = text("nvmlDeviceGetVbiosVersion", h, size=32)
        d["minor"] = uint("nvmlDeviceGetMinorNumber", h)
        d["brand"] = uint("nvmlDeviceGetBrand", h)
        d["architecture"] = uint("nvmlDeviceGetArchitecture", h)
        d["moduleId"] = uint("nvmlDeviceGetModuleId", h)
        d["numaNodeId"] = uint("nvmlDeviceGetNumaNodeId", h)
        major, minor = ctypes.c_int(0), ctypes.c_int(0)
        err = call("nvmlDeviceGetCudaComputeCapability", h, ctypes.byref(major), ctypes.byref(minor))
        d["cudaComputeCapability"] = err or [major.value, minor.value]
        mem = Memory()
        d["memory"] = call("nvmlDeviceGetMemoryInfo", h, ctypes.byref(mem)) or {
            "total": mem.total, "free": mem.free, "used": mem.used}
        pci = PciInfo()
        err = call("nvmlDeviceGetPciInfo_v3", h, ctypes.byref(pci))
        d["pci"] = err or {"busId": pci.busId.decode(), "busIdLegacy": pci.busIdLegacy.decode(),
                           "domain": pci.domain, "bus": pci.bus, "device": pci.device,
                           "pciDeviceId": pci.pciDeviceId, "pciSubSystemId": pci.pciSubSystemId}
        am = AddressingMode(version=ctypes.sizeof(AddressingMode) | (1 << 24))
        d["addressingMode"] = call("nvmlDeviceGetAddressingMode", h, ctypes.byref(am)) or am.value
        cur, pend = ctypes.c_uint(0), ctypes.c_uint(0)
        err = call("nvmlDeviceGetMigMode", h, ctypes.byref(cur), ctypes.byref(pend))
        d["migMode"] = err or {"current": cur.value, "pending": pend.value}
        d["maxMigDeviceCount"] = uint("nvmlDeviceGetMaxMigDeviceCount", h)
        f1 = FabricV1()
        err = call("nvmlDeviceGetGpuFabricInfo", h, ctypes.byref(f1))
        d["fabricInfo"] = err or {"clusterUuid": bytes(f1.clusterUuid).hex(), "status": f1.status,
                                  "cliqueId": f1.cliqueId, "state": f1.state}
        f3 = FabricV3(version=ctypes.sizeof(FabricV3) | (3 << 24))
        err = call("nvmlDeviceGetGpuFabricInfoV", h, ctypes.byref(f3))
        d["fabricInfoV3"] = err or {"clusterUuid": bytes(f3.clusterUuid).hex(), "status": f3.status,
                                    "cliqueId": f3.cliqueId, "state": f3.state,
                                    "healthMask": f3.healthMask, "healthSummary": f3.healthSummary}
        profiles = []
        for p in range(0x12):  # NVML_GPU_INSTANCE_PROFILE_COUNT (API 13)
            info = GiProfileV2(version=ctypes.sizeof(GiProfileV2) | (2 << 24))
            err = call("nvmlDeviceGetGpuInstanceProfileInfoV", h, ctypes.c_uint(p), ctypes.byref(info))
            if err:
                profiles.append({"profile": p, "error": err})
                continue
            pl = (Placement * 16)()
            n = ctypes.c_uint(16)
            perr = call("nvmlDeviceGetGpuInstancePossiblePlacements_v2", h, ctypes.c_uint(info.id),
                        pl, ctypes.byref(n))
            profiles.append({
                "profile": p, "id": info.id, "name": info.name.decode(),
                "isP2pSupported": info.isP2pSupported, "sliceCount": info.sliceCount,
                "instanceCount": info.instanceCount, "multiprocessorCount": info.multiprocessorCount,
                "copyEngineCount": info.copyEngineCount, "decoderCount": info.decoderCount,
                "encoderCount": info.encoderCount, "jpegCount": info.jpegCount,
                "ofaCount": info.ofaCount, "memorySizeMB": info.memorySizeMB,
                "placements": perr or [[pl[k].start, pl[k].size] for k in range(n.value)]})
        d["gpuInstanceProfiles"] = profiles
        bus = d["pci"]["busId"].lower() if isinstance(d["pci"], dict) else None
        if bus:
            sysdev = f"/sys/bus/pci/devices/{bus[4:] if len(bus) > 12 else bus}"
            d["sysfs"] = {"path": os.path.realpath(sysdev) if os.path.exists(sysdev) else None}
            try:
                with open(os.path.join(sysdev, "numa_node")) as fh:
                    d["sysfs"]["numa_node"] = fh.read().strip()
            except OSError as e:
                d["sysfs"]["numa_node"] = str(e)
        out["devices"].append(d)
    lib.nvmlShutdown()
    json.dump(out, sys.stdout, indent=2)
    print()


if __name__ == "__main__":
    main()
