#!/usr/bin/env python3
"""Simulated nvidia-smi for mock driver roots (installed by make-driver-root).

Answers `-L` and `-q` (plus `-i <index|uuid|bus id>` and plain `nvidia-smi`,
a short table) from the mock NVML profile, and changes the compute mode
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
(<root>/dev, every GPU: the host's or a plugin's view), else in /dev (a
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
    dev_root = root if has_gpu_nodes(root) else "/"
    gpus = []
    for d in profile.get("devices", []):
        g = merge(profile.get("deviceDefaults", {}), d)
        if os.path.exists(os.path.join(dev_root, "dev", "nvidia%d" % g["minor"])) and on_nvidia_driver(root, g):
            gpus.append(g)
    gpus.sort(key=lambda g: g.get("pci", {}).get("busId", ""))

    args = argv[1:]
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
            for n, (profile_name, uuid) in enumerate(mig_devices(g, state, dev_root, dev_root == root)):
                print("  MIG %-12s Device %2d: (UUID: %s)" % (profile_name, n, uuid))
        return 0
    if "-q" in args or "--query" in args:
        query(profile, indexed, len(gpus), read_state(state_path) if state_path else {})
        return 0
    if args:
        sys.exit("nvidia-smi (simulated): supports -L, -q, -i, -c, compute-policy --set-timeslice; not %s"
                 % " ".join(args))
    table(profile, indexed)
    return 0


def mib(b):
    return "%d MiB" % (int(b) // (1 << 20))


def query(profile, indexed, attached, state):
    cuda = profile.get("cudaDriverVersion", 0)
    print("\n==============NVSMI LOG==============\n")
    print("%-40s: %s" % ("Timestamp", datetime.datetime.now().strftime("%a %b %d %H:%M:%S %Y")))
    print("%-40s: %s" % ("Driver Version", profile.get("driverVersion", "")))
    print("%-40s: %d.%d" % ("CUDA Version", cuda // 1000, cuda % 1000 // 10))
    print()
    print("%-40s: %d" % ("Attached GPUs", attached))
    for _, g in indexed:
        mem = g.get("memory", {})
        mig = g.get("mig", {})
        mig_on = "Enabled" if mig.get("gpuInstances") or mig.get("mode") in (1, "1", "enabled") else "Disabled"
        print("GPU %s" % g.get("pci", {}).get("busId", ""))
        for k, v in [("Product Name", g.get("name", "")),
                     ("Product Architecture", ARCHITECTURES.get(g.get("architecture"), "Unknown")),
                     ("Persistence Mode", "Enabled"),
                     ("MIG Mode", ""), ("    Current", mig_on), ("    Pending", mig_on),
                     ("GPU UUID", g.get("uuid", "")),
                     ("Minor Number", g.get("minor")),
                     ("Module ID", g.get("moduleId", "N/A")),
                     ("PCI", ""), ("    Bus Id", g.get("pci", {}).get("busId", "")),
                     ("FB Memory Usage", ""), ("    Total", mib(mem.get("total", 0))),
                     ("    Used", mib(mem.get("used", 0))), ("    Free", mib(mem.get("free", 0))),
                     ("Compute Mode",
                      COMPUTE_MODE_NAMES.get(compute_policy(state, g.get("uuid")).get("computeMode", 0)))]:
            print("    %-36s: %s" % (k, v) if v != "" else "    %s" % k)
        print()


def table(profile, indexed):
    cuda = profile.get("cudaDriverVersion", 0)
    print("NVIDIA-SMI (simulated)    Driver Version: %s    CUDA Version: %d.%d"
          % (profile.get("driverVersion", ""), cuda // 1000, cuda % 1000 // 10))
    for i, g in indexed:
        mem = g.get("memory", {})
        print("| %3d  %-28s | %s | %9s / %9s |" % (i, g.get("name", "")[:28], g.get("pci", {}).get("busId", ""),
                                                  mib(mem.get("used", 0)), mib(mem.get("total", 0))))


if __name__ == "__main__":
    sys.exit(main(sys.argv))
