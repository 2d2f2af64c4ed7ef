#!/usr/bin/env python3
"""Simulated nvidia-smi for mock driver roots (installed by make-driver-root).

Answers `-L` and `-q` (plus `-i <index|uuid|bus id>` and plain `nvidia-smi`,
a short table) from the mock NVML profile: the driver root's
mock-nvml/profile.json when this script sits in a driver root's usr/bin, else
the copy make-driver-root embedded below (inside a container the script is
mounted alone). Static profile only: MIG devices created at run time through
the mock library's state.json are not listed.

Visible GPUs are those whose device node /dev/nvidia<minor> exists, as with a
real driver in a container: looked up in the driver root this script lies in
(<root>/dev, every GPU: the host's or a plugin's view), else in /dev (a
container's, holding only the devices it was given). GPUs are numbered
0..n-1 over the visible ones, as real nvidia-smi does in a container.
"""
import base64
import datetime
import json
import os
import sys

EMBEDDED_PROFILE = ""  # base64 JSON, filled in by make-driver-root

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


def has_gpu_nodes(root):
    d = os.path.join(root, "dev")
    try:
        return any(n.startswith("nvidia") and n[6:].isdigit() for n in os.listdir(d))
    except OSError:
        return False


def main(argv):
    here = os.path.dirname(os.path.realpath(__file__))
    root = os.path.dirname(os.path.dirname(here))  # <root>/usr/bin -> <root>
    profile = load_profile(root)
    dev_root = root if has_gpu_nodes(root) else "/"
    gpus = []
    for d in profile.get("devices", []):
        g = merge(profile.get("deviceDefaults", {}), d)
        if os.path.exists(os.path.join(dev_root, "dev", "nvidia%d" % g["minor"])):
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
    if "-L" in args or "--list-gpus" in args:
        for i, g in indexed:
            print("GPU %d: %s (UUID: %s)" % (i, g.get("name", "NVIDIA GPU"), g.get("uuid")))
        return 0
    if "-q" in args or "--query" in args:
        query(profile, indexed, len(gpus))
        return 0
    if args:
        sys.exit("nvidia-smi (simulated): supports -L, -q, -i; not %s" % " ".join(args))
    table(profile, indexed)
    return 0


def mib(b):
    return "%d MiB" % (int(b) // (1 << 20))


def query(profile, indexed, attached):
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
                     ("    Used", mib(mem.get("used", 0))), ("    Free", mib(mem.get("free", 0)))]:
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
