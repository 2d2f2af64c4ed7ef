#!/usr/bin/env python3
"""Simulated nvidia-smi for mock driver roots (installed by make-driver-root).

Answers, from the mock NVML profile, in the real tool's (R580) formats:
- `--version` (NVIDIA-SMI, NVML, DRIVER and CUDA versions; answered before
  any GPU is looked at, as a script waiting for the driver expects);
- `-L`;
- `-q`: the real layout (labels padded to column 55, R580's sections and
  order) with the lines the profile can answer: versions, name, brand,
  architecture, persistence and addressing mode, MIG mode, serial, UUID,
  minor, VBIOS, board part number, module id, PCI, FB memory (Reserved is
  the profile's memory.used, the driver's reservation, as the real H100
  showed), compute mode, processes; the rest (clocks, power, ECC, ...) is
  left out;
- `--query-gpu=<fields> --format=csv[,noheader][,nounits]` for the fields in
  QUERY_FIELDS (an unknown one: 'Field "x" is not a valid field to query.'
  and exit 2, as the real tool);
- `mig -lgip` and `mig -lgipp`, with Free from the state file's GPU
  instances (the profile's static ones before the library wrote it);
plus `-i <index|uuid|bus id>` and plain `nvidia-smi` (a short table, not the
real one). test/mocknvml/nvidia_smi_test.py holds these, line by line, to
the real H100's captures in test/data/h100. It also changes the compute mode
(`-c DEFAULT|EXCLUSIVE_PROCESS|PROHIBITED|0..3`) and the time slice
(`compute-policy --set-timeslice 0..3`) of the selected GPUs in the node's
state file (the mock library's state.json, its "computePolicy" map, which
nvmlDeviceGetComputeMode reads and `-q` shows), under the file's lock as the
library writes it. The profile comes from the driver root's
mock-nvml/profile.json when this script sits in a driver root's usr/bin, else
the copy make-driver-root embedded below (inside a container the script is
mounted alone).

`-L` lists each GPU's MIG devices under it as the real tool does, from the
state file (the mock library's MIG state, static instances and those made at
run time alike): on the host (the driver root's view) all of them; in a
container only those whose capability device nodes the container has
(/dev/nvidia-caps/nvidia-cap<N>, with make-driver-root's minors: 3 +
gpu*135 + gi*9 for the GPU instance, +1+ci for the compute instance), which
is how the real driver limits a container to the MIG device it was given.
MIG UUIDs are the mock library's (MigDeviceUuid in context.cc).

Visible GPUs are those whose device node /dev/nvidia<minor> exists, as with a
real driver in a container: looked up in the driver root this script lies in
(a folder holding mock-nvml/profile.json; <root>/dev, every GPU: the host's
or a plugin's view), else in /dev (a
container's, holding only the devices it was given). GPUs are numbered
0..n-1 over the visible ones, as real nvidia-smi does in a container. Where
the driver root has a mock sysfs (make-sysfs.py), GPUs it shows on another
driver than nvidia (vfio-pci) are left out, as the real driver does not see
them.
"""
import base64
import datetime
import json
import os
import signal
import sys

EMBEDDED_PROFILE = ""  # base64 JSON, filled in by make-driver-root
EMBEDDED_STATE_FILE = ""  # the node's <root>/mock-nvml/state.json, likewise

COMPUTE_MODES = {"DEFAULT": 0, "EXCLUSIVE_THREAD": 1, "PROHIBITED": 2, "EXCLUSIVE_PROCESS": 3}
COMPUTE_MODE_NAMES = {0: "Default", 1: "Exclusive_Thread", 2: "Prohibited", 3: "Exclusive_Process"}

ARCHITECTURES = {2: "Kepler", 3: "Maxwell", 4: "Pascal", 5: "Volta", 6: "Turing",
                 7: "Ampere", 8: "Ada Lovelace", 9: "Hopper", 10: "Blackwell"}


def merge(base, over):
    out = dict(base)
    for k, v in over.items():
        out[k] = merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def load_profile(root):
    path = os.path.join(root, "mock-nvml", "profile.json")
    if os.path.isfile(path):
        with open(path) as f:
            return json.load(f)
    if EMBEDDED_PROFILE:
        return json.loads(base64.b64decode(EMBEDDED_PROFILE))
    sys.exit("nvidia-smi (simulated): no mock NVML profile")


# Where the simulated node runtime shows a container its node's mock NVML
# state folder (test/simnode internal/cri MockNVMLStateDir).
CONTAINER_STATE_FILE = "/run/mock-nvml/state.json"


def state_file(root):
    if os.environ.get("MOCK_NVML_STATE"):
        return os.environ["MOCK_NVML_STATE"]
    local = os.path.join(root, "mock-nvml", "state.json")
    if os.path.isdir(os.path.dirname(local)):
        return local
    if os.path.exists(CONTAINER_STATE_FILE):
        return CONTAINER_STATE_FILE
    return EMBEDDED_STATE_FILE or None


def read_state(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError, TypeError):
        return {}


def compute_policy(state, uuid):
    return state.get("computePolicy", {}).get(uuid, {})


def update_policy(path, uuids, key, value):
    """Sets computePolicy[uuid][key] as the mock library writes its state:
    under flock on state.json.lock, through a temporary file renamed over it."""
    import fcntl
    if not path:
        sys.exit("nvidia-smi (simulated): no state file to change")
    with open(path + ".lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        state = read_state(path) or {"version": 1, "gpus": {}}
        policies = state.setdefault("computePolicy", {})
        for uuid in uuids:
            entry = policies.setdefault(uuid, {"computeMode": 0, "timeSlice": 0})
            entry[key] = value
        tmp = "%s.tmp.%d" % (path, os.getpid())
        with open(tmp, "w") as f:
            json.dump(state, f, indent=1)
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        os.rename(tmp, path)


def set_compute_mode(path, indexed, mode):
    value = COMPUTE_MODES.get(mode.upper()) if not mode.isdigit() else int(mode)
    if value is None or value not in COMPUTE_MODE_NAMES:
        print("Invalid compute mode: %s" % mode)
        return 2
    update_policy(path, [g.get("uuid") for _, g in indexed], "computeMode", value)
    for _, g in indexed:
        print("Set compute mode to %s for GPU %s." % (COMPUTE_MODE_NAMES[value].upper(),
                                                       g.get("pci", {}).get("busId", "")))
    print("All done.")
    return 0


def set_time_slice(path, indexed, value):
    if not value.isdigit() or int(value) > 3:
        print("Invalid timeslice value: %s (expected 0..3)" % value)
        return 2
    update_policy(path, [g.get("uuid") for _, g in indexed], "timeSlice", int(value))
    for _, g in indexed:
        print("Set timeslice to %s for GPU %s." % (value, g.get("pci", {}).get("busId", "")))
    return 0


def fnv1a(text, basis):
    h = basis
    for c in text.encode():
        h ^= c
        h = (h * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    return h


def mig_uuid(parent_uuid, gi, ci):
    key = "%s/%d/%d" % (parent_uuid, gi, ci)
    hi = fnv1a(key, 0xcbf29ce484222325)
    lo = fnv1a(key, 0x84222325cbf29ce4)
    return "MIG-%08x-%04x-%04x-%04x-%012x" % (hi >> 32, (hi >> 16) & 0xffff, hi & 0xffff, lo >> 48,
                                              lo & 0xffffffffffff)


def mig_devices(g, state, dev_root, host_view):
    """The MIG devices of GPU g that this view may see: (profile name, uuid)."""
    names = {p.get("id"): p.get("name", "").replace("MIG ", "")
             for p in g.get("mig", {}).get("gpuInstanceProfiles", [])}
    out = []
    gpu_state = state.get("gpus", {}).get(g.get("uuid"), {})
    for gi in sorted(gpu_state.get("gpuInstances", []), key=lambda x: x.get("id", 0)):
        base = 3 + g["minor"] * 135 + gi.get("id", 0) * 9
        for ci in sorted(gi.get("computeInstances", []), key=lambda x: x.get("id", 0)):
            caps = [base, base + 1 + ci.get("id", 0)]
            if not host_view and not all(
                    os.path.exists(os.path.join(dev_root, "dev", "nvidia-caps", "nvidia-cap%d" % m)) for m in caps):
                continue
            out.append((names.get(gi.get("profileId"), "unknown"), mig_uuid(g["uuid"], gi["id"], ci["id"])))
    return out


def has_gpu_nodes(root):
    d = os.path.join(root, "dev")
    try:
        return any(n.startswith("nvidia") and n[6:].isdigit() for n in os.listdir(d))
    except OSError:
        return False


def on_nvidia_driver(root, g):
    """False when the root's mock sysfs (make-sysfs.py) shows the GPU bound
    to another driver than nvidia, or to none (vfio-pci passthrough: the
    driver does not see it, so neither does nvidia-smi). True without such a
    tree (a container, where this script is mounted alone, or an older
    root)."""
    sys_root = os.path.join(root, "sys")
    if not os.path.isdir(os.path.join(sys_root, "bus", "pci", "drivers")):
        return True
    domain, bus, rest = g.get("pci", {}).get("busId", "").split(":")
    bdf = "%04x:%s:%s" % (int(domain, 16), bus.lower(), rest.lower())
    device = os.path.join(sys_root, "bus", "pci", "devices", bdf)
    if not os.path.exists(device):
        return True
    link = os.path.join(device, "driver")
    return os.path.islink(link) and os.path.basename(os.readlink(link)) == "nvidia"


def main(argv):
    here = os.path.dirname(os.path.realpath(__file__))
    root = os.path.dirname(os.path.dirname(here))  # <root>/usr/bin -> <root>
    profile = load_profile(root)
    # The folder it lies in is a driver root (the host's or a plugin's view)
    # only when it holds the mock NVML profile: mounted into a container at
    # /usr/bin/nvidia-smi, <root> is the container's "/", whose /dev holds
    # the container's devices and whose /sys is no mock sysfs.
    in_driver_root = os.path.isfile(os.path.join(root, "mock-nvml", "profile.json"))
    dev_root = root if in_driver_root and has_gpu_nodes(root) else "/"
    gpus = []
    for d in profile.get("devices", []):
        g = merge(profile.get("deviceDefaults", {}), d)
        if os.path.exists(os.path.join(dev_root, "dev", "nvidia%d" % g["minor"])) and (
                not in_driver_root or on_nvidia_driver(root, g)):
            gpus.append(g)
    gpus.sort(key=lambda g: g.get("pci", {}).get("busId", ""))

    args = argv[1:]
    if "--version" in args:
        return print_version(profile)
    query_fields = csv_format = None
    for a in list(args):
        for flag in ("--query-gpu", "--format"):
            if a == flag or a.startswith(flag + "="):
                i = args.index(a)
                if a == flag:
                    value = args[i + 1] if i + 1 < len(args) else ""
                    del args[i:i + 2]
                else:
                    value = a[len(flag) + 1:]
                    del args[i]
                if flag == "--query-gpu":
                    query_fields = value
                else:
                    csv_format = value
    select = None
    if "-i" in args or "--id" in args:
        i = args.index("-i") if "-i" in args else args.index("--id")
        if i + 1 >= len(args):
            sys.exit("nvidia-smi: -i needs an argument")
        select = args[i + 1]
        del args[i:i + 2]
    indexed = list(enumerate(gpus))
    if select is not None:
        indexed = [(i, g) for i, g in indexed
                   if select in (str(i), g.get("uuid"), g.get("pci", {}).get("busId"))]
        if not indexed:
            print("No devices were found")
            return 6
    if not gpus:
        print("No devices were found")
        return 6
    state_path = state_file(root)
    if args[:1] == ["mig"]:
        return mig_command(args[1:], indexed, read_state(state_path) if state_path else {})
    if args[:1] == ["compute-policy"]:
        if "--set-timeslice" not in args or args.index("--set-timeslice") + 1 >= len(args):
            sys.exit("nvidia-smi (simulated): compute-policy supports --set-timeslice <0..3>")
        return set_time_slice(state_path, indexed, args[args.index("--set-timeslice") + 1])
    if "-c" in args or "--compute-mode" in args:
        i = args.index("-c") if "-c" in args else args.index("--compute-mode")
        if i + 1 >= len(args):
            sys.exit("nvidia-smi: -c needs an argument")
        return set_compute_mode(state_path, indexed, args[i + 1])
    if "-L" in args or "--list-gpus" in args:
        state = read_state(state_path) if state_path else {}
        for i, g in indexed:
            print("GPU %d: %s (UUID: %s)" % (i, g.get("name", "NVIDIA GPU"), g.get("uuid")))
            for n, (profile_name, uuid) in enumerate(mig_devices(g, state, dev_root, in_driver_root and dev_root == root)):
                print("  MIG %-12s Device %2d: (UUID: %s)" % (profile_name, n, uuid))
        return 0
    if query_fields is not None:
        return query_gpu(profile, indexed, len(gpus), read_state(state_path) if state_path else {},
                         query_fields, csv_format)
    if "-q" in args or "--query" in args:
        query(profile, indexed, len(gpus), read_state(state_path) if state_path else {})
        return 0
    if args:
        sys.exit("nvidia-smi (simulated): supports --version, -L, -q, --query-gpu, mig -lgip/-lgipp, -i, -c, "
                 "compute-policy --set-timeslice; not %s" % " ".join(args))
    table(profile, indexed)
    return 0


def mib(b):
    return "%d MiB" % (int(b) // (1 << 20))


def cuda_version(profile):
    cuda = profile.get("cudaDriverVersion", 0)
    return "%d.%d" % (cuda // 1000, cuda % 1000 // 10)


def print_version(profile):
    """`nvidia-smi --version` as the real tool prints it (R535 and later):
    the NVML line is the driver's major.minor (nvmlSystemGetNVMLVersion
    without its leading CUDA major and the patch level)."""
    driver = profile.get("driverVersion", "")
    nvml = profile.get("nvmlVersion", "")
    parts = nvml.split(".")
    nvml_short = ".".join(parts[1:3]) if len(parts) >= 3 else nvml
    print("%-20s: %s" % ("NVIDIA-SMI version", driver))
    print("%-20s: %s" % ("NVML version", nvml_short))
    print("%-20s: %s" % ("DRIVER version", driver))
    print("%-20s: %s" % ("CUDA Version", cuda_version(profile)))
    return 0


BRANDS = {0: "Unknown", 1: "Quadro", 2: "Tesla", 3: "NVS", 4: "GRID", 5: "GeForce", 6: "Titan",
          7: "NVIDIA Virtual Applications", 8: "NVIDIA Virtual PC", 9: "NVIDIA Virtual Compute Server",
          10: "NVIDIA RTX Virtual Workstation", 11: "NVIDIA Cloud Gaming", 12: "Quadro RTX",
          13: "NVIDIA RTX", 14: "NVIDIA", 15: "GeForce RTX", 16: "Titan RTX"}
ADDRESSING_MODES = {0: "None", 1: "HMM", 2: "ATS"}


def mig_mode(g, state):
    """(current, pending) MIG mode: the state file's, else the profile's;
    None for a GPU that is not MIG-capable."""
    mig = g.get("mig")
    if not mig:
        return None
    mode = state.get("gpus", {}).get(g.get("uuid"), {}).get("migMode") or mig.get("mode") or {}
    if not isinstance(mode, dict):
        mode = {"current": mode, "pending": mode}
    return int(mode.get("current", 0)), int(mode.get("pending", mode.get("current", 0)))


def mig_mode_names(g, state):
    mode = mig_mode(g, state)
    if mode is None:
        return "N/A", "N/A"
    return tuple("Enabled" if m else "Disabled" for m in mode)


def memory_mib(g):
    """(total, reserved, used, free) in MiB as nvidia-smi shows them
    (nvmlDeviceGetMemoryInfo_v2): the profile's memory.used is the v1 value,
    which counts the driver's reservation; without processes that is all of
    it (the real H100 said Reserved 480 MiB, Used 0 MiB, and its v1 used was
    480 MiB). A profile may name memory.reserved itself."""
    mem = g.get("memory", {})
    total = int(mem.get("total", 0)) >> 20
    free = int(mem.get("free", 0)) >> 20
    used_v1 = int(mem.get("used", 0)) >> 20
    reserved = int(mem["reserved"]) >> 20 if "reserved" in mem else used_v1
    return total, reserved, max(used_v1 - reserved, 0), free


def bus_parts(g):
    bus_id = g.get("pci", {}).get("busId", "0:0:0.0")
    domain, bus, rest = bus_id.split(":")
    device = rest.split(".")[0]
    return int(domain, 16), int(bus, 16), int(device, 16)


def query(profile, indexed, attached, state):
    """`nvidia-smi -q` in the real tool's layout (labels padded to 55
    columns, the sections and order of R580's), for the lines the profile
    can answer; the real tool's other lines (clocks, power, ECC, ...) are
    left out."""
    def line(key, value=None):
        print("%-55s: %s" % (key, value) if value is not None else key)
    print("\n==============NVSMI LOG==============\n")
    line("Timestamp", datetime.datetime.now().strftime("%a %b %d %H:%M:%S %Y"))
    line("Driver Version", profile.get("driverVersion", ""))
    line("CUDA Version", cuda_version(profile))
    print()
    line("Attached GPUs", attached)
    for _, g in indexed:
        pci = g.get("pci", {})
        domain, bus, device = bus_parts(g)
        total, reserved, used, free = memory_mib(g)
        current, pending = mig_mode_names(g, state)
        line("GPU %s" % pci.get("busId", ""))
        line("    Product Name", g.get("name", ""))
        line("    Product Brand", BRANDS.get(g.get("brand"), "Unknown"))
        line("    Product Architecture", ARCHITECTURES.get(g.get("architecture"), "Unknown"))
        line("    Persistence Mode", "Enabled")
        line("    Addressing Mode", ADDRESSING_MODES.get(g.get("addressingMode"), "N/A"))
        line("    MIG Mode")
        line("        Current", current)
        line("        Pending", pending)
        line("    Serial Number", g.get("serial", "N/A"))
        line("    GPU UUID", g.get("uuid", ""))
        line("    Minor Number", g.get("minor"))
        line("    VBIOS Version", g.get("vbiosVersion", "N/A"))
        line("    Board Part Number", g.get("boardPartNumber", "N/A"))
        line("    Platform Info")
        line("        Module Id", "N/A" if g.get("moduleId") is None else g["moduleId"])
        line("    PCI")
        line("        Bus", "0x%02X" % bus)
        line("        Device", "0x%02X" % device)
        line("        Domain", "0x%04X" % domain)
        line("        Base Classcode", "0x3")
        line("        Sub Classcode", "0x2")
        line("        Device Id", "0x%08X" % int(pci.get("pciDeviceId", 0)))
        line("        Bus Id", pci.get("busId", ""))
        line("        Sub System Id", "0x%08X" % int(pci.get("pciSubSystemId", 0)))
        line("    FB Memory Usage")
        line("        Total", "%d MiB" % total)
        line("        Reserved", "%d MiB" % reserved)
        line("        Used", "%d MiB" % used)
        line("        Free", "%d MiB" % free)
        line("    Compute Mode", COMPUTE_MODE_NAMES.get(compute_policy(state, g.get("uuid")).get("computeMode", 0)))
        line("    Processes", "None")
        print()


# --query-gpu: field -> (header, value(ctx) -> str, unit). Units go into the
# header ("memory.total [MiB]") and after each value unless nounits.
def _mem(i):
    return lambda c: str(memory_mib(c["gpu"])[i])


QUERY_FIELDS = {
    "timestamp": (lambda c: datetime.datetime.now().strftime("%Y/%m/%d %H:%M:%S.%f")[:-3], None),
    "driver_version": (lambda c: c["profile"].get("driverVersion", ""), None),
    "count": (lambda c: str(c["count"]), None),
    "index": (lambda c: str(c["index"]), None),
    "name": (lambda c: c["gpu"].get("name", ""), None),
    "serial": (lambda c: c["gpu"].get("serial", "[N/A]"), None),
    "uuid": (lambda c: c["gpu"].get("uuid", ""), None),
    "pci.bus_id": (lambda c: c["gpu"].get("pci", {}).get("busId", ""), None),
    "pci.domain": (lambda c: "0x%04X" % bus_parts(c["gpu"])[0], None),
    "pci.bus": (lambda c: "0x%02X" % bus_parts(c["gpu"])[1], None),
    "pci.device": (lambda c: "0x%02X" % bus_parts(c["gpu"])[2], None),
    "pci.device_id": (lambda c: "0x%08X" % int(c["gpu"].get("pci", {}).get("pciDeviceId", 0)), None),
    "pci.sub_device_id": (lambda c: "0x%08X" % int(c["gpu"].get("pci", {}).get("pciSubSystemId", 0)), None),
    "vbios_version": (lambda c: c["gpu"].get("vbiosVersion", "[N/A]"), None),
    "persistence_mode": (lambda c: "Enabled", None),
    "memory.total": (_mem(0), "MiB"),
    "memory.reserved": (_mem(1), "MiB"),
    "memory.used": (_mem(2), "MiB"),
    "memory.free": (_mem(3), "MiB"),
    "compute_mode": (lambda c: COMPUTE_MODE_NAMES.get(
        compute_policy(c["state"], c["gpu"].get("uuid")).get("computeMode", 0)), None),
    "compute_cap": (lambda c: "%d.%d" % tuple(c["gpu"].get("cudaComputeCapability", [0, 0])), None),
    "mig.mode.current": (lambda c: mig_mode_names(c["gpu"], c["state"])[0].replace("N/A", "[N/A]"), None),
    "mig.mode.pending": (lambda c: mig_mode_names(c["gpu"], c["state"])[1].replace("N/A", "[N/A]"), None),
}
# The real tool's other names for the same fields.
QUERY_ALIASES = {"gpu_name": "name", "gpu_serial": "serial", "gpu_uuid": "uuid", "gpu_bus_id": "pci.bus_id"}


def query_gpu(profile, indexed, count, state, fields, fmt):
    """--query-gpu=<fields> --format=csv[,noheader][,nounits]."""
    if fmt is None:
        print('"--format" must be specified when querying.')
        return 2
    opts = [o.strip() for o in fmt.split(",")]
    if "csv" not in opts or any(o not in ("csv", "noheader", "nounits") for o in opts):
        print('Format "%s" is not valid.' % fmt)
        return 2
    names = [f.strip() for f in fields.split(",") if f.strip()]
    resolved = []
    for n in names:
        key = QUERY_ALIASES.get(n, n)
        if key not in QUERY_FIELDS:
            print('Field "%s" is not a valid field to query.' % n)
            print()
            return 2
        resolved.append(key)
    units = "nounits" not in opts
    if "noheader" not in opts:
        print(", ".join(k + (" [%s]" % QUERY_FIELDS[k][1] if QUERY_FIELDS[k][1] else "") for k in resolved))
    for i, g in indexed:
        c = {"profile": profile, "gpu": g, "index": i, "count": count, "state": state}
        values = []
        for k in resolved:
            v = QUERY_FIELDS[k][0](c)
            if units and QUERY_FIELDS[k][1] and not v.startswith("["):
                v += " " + QUERY_FIELDS[k][1]
            values.append(v)
        print(", ".join(values))
    return 0


# The order the real tool lists GPU instance profiles in: by slice count,
# then the profile's revision (NVML_GPU_INSTANCE_PROFILE_* indexes).
GI_PROFILE_ORDER = [0, 7, 9, 1, 8, 2, 3, 6, 4, 5, 10, 11, 12, 13]


def gi_profiles(g):
    profiles = g.get("mig", {}).get("gpuInstanceProfiles", [])
    return sorted(profiles, key=lambda p: (GI_PROFILE_ORDER.index(p.get("profile"))
                                           if p.get("profile") in GI_PROFILE_ORDER else 99, p.get("id", 0)))


def gpu_mig_state(g, state):
    """The GPU's entry in the state file; before the library wrote one, the
    profile's static GPU instances (their start and placement size, which is
    all remaining_capacity needs)."""
    if g.get("uuid") in state.get("gpus", {}):
        return state["gpus"][g["uuid"]]
    mig = g.get("mig") or {}
    sizes = {(p.get("id"), s): n for p in mig.get("gpuInstanceProfiles", []) for s, n in p.get("placements", [])}
    return {"gpuInstances": [{"profileId": gi.get("profileId"), "start": gi.get("start", 0),
                              "size": sizes.get((gi.get("profileId"), gi.get("start", 0)), 0)}
                             for gi in mig.get("gpuInstances", [])]}


def remaining_capacity(p, gpu_state):
    """As the mock library's RemainingCapacity (mig_state.cc)."""
    gis = gpu_state.get("gpuInstances", [])
    existing = sum(1 for gi in gis if gi.get("profileId") == p.get("id"))
    if existing >= p.get("instanceCount", 0):
        return 0
    taken = [(gi.get("start", 0), gi.get("size", 0)) for gi in gis]
    free = 0
    for start, size in p.get("placements", []):
        if not any(start < t + ts and t < start + size for t, ts in taken):
            free += 1
            taken.append((start, size))
    return min(free, p.get("instanceCount", 0) - existing)


def mig_command(args, indexed, state):
    """`nvidia-smi mig -lgip` and `-lgipp` (optionally with -i), in R580's
    layout: with MIG off the profiles are listed with every instance free,
    as the real H100 showed."""
    if "-lgip" in args or "--list-gpu-instance-profiles" in args:
        mode = "lgip"
    elif "-lgipp" in args or "--list-gpu-instance-possible-placements" in args:
        mode = "lgipp"
    else:
        sys.exit("nvidia-smi (simulated): mig supports -lgip and -lgipp; not %s" % " ".join(args))
    capable = [(i, g) for i, g in indexed if g.get("mig") and g["mig"].get("gpuInstanceProfiles")]
    if not capable:
        print("No MIG-supported devices found.")
        return 6
    if mode == "lgipp":
        for i, g in capable:
            for p in gi_profiles(g):
                pl = p.get("placements", [])
                starts = ",".join(str(s) for s, _ in pl)
                size = pl[0][1] if pl else p.get("sliceCount", 0)
                print("GPU %2d Profile ID %2d Placement%s: {%s}:%d"
                      % (i, p.get("id", 0), "s" if len(pl) > 1 else " ", starts, size))
        return 0
    rule = "+" + "-" * 79 + "+"
    print(rule)
    print("| %-78s|" % "GPU instance profiles:")
    print("| GPU   Name               ID    Instances   Memory     P2P    SM    DEC   ENC  |")
    print("|                                Free/Total   GiB              CE    JPEG  OFA  |")
    print("|" + "=" * 79 + "|")
    for i, g in capable:
        gpu_state = gpu_mig_state(g, state)
        on = (mig_mode(g, state) or (0, 0))[0]
        for p in gi_profiles(g):
            total = p.get("instanceCount", 0)
            free = remaining_capacity(p, gpu_state) if on else total
            print("|%4d  %-18s%4d     %-11s%-11s%-7s%-7d%-6d%-4d|"
                  % (i, p.get("name", ""), p.get("id", 0), "%d/%d" % (free, total),
                     "%.2f" % (p.get("memorySizeMB", 0) / 1024.0),
                     "Yes" if p.get("isP2pSupported") else "No", p.get("multiprocessorCount", 0),
                     p.get("decoderCount", 0), p.get("encoderCount", 0)))
            print("|%64d     %-6d%-4d|" % (p.get("copyEngineCount", 0), p.get("jpegCount", 0),
                                          p.get("ofaCount", 0)))
            print(rule)
    return 0


def table(profile, indexed):
    print("NVIDIA-SMI (simulated)    Driver Version: %s    CUDA Version: %s"
          % (profile.get("driverVersion", ""), cuda_version(profile)))
    for i, g in indexed:
        mem = g.get("memory", {})
        print("| %3d  %-28s | %s | %9s / %9s |" % (i, g.get("name", "")[:28], g.get("pci", {}).get("busId", ""),
                                                  mib(mem.get("used", 0)), mib(mem.get("total", 0))))


if __name__ == "__main__":
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # `nvidia-smi ... | head` ends quietly
    sys.exit(main(sys.argv))
