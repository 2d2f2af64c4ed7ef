#!/usr/bin/env python3
"""Compares nvidia-dra-inspect's JSON with what nvidia-smi says about the same GPUs.

  compare-with-nvidia-smi.py INSPECT.json SMI-Q.xml SMI-QUERY.csv SMI-LGIP.txt SMI-LGIPP.txt

SMI-QUERY.csv is `nvidia-smi --query-gpu=uuid,compute_cap --format=csv,noheader`.
Prints one line per compared value ("ok" or "MISMATCH") and exits 1 on any
mismatch. Used by scripts/check-real-gpu on a machine with a real GPU.
"""
import json
import re
import sys
import xml.etree.ElementTree as ET

failures = 0


def check(what, ours, theirs):
    global failures
    ok = ours == theirs
    if not ok:
        failures += 1
    print(f"{'ok      ' if ok else 'MISMATCH'} {what}: ours={ours!r} nvidia-smi={theirs!r}")


def text(node, path):
    found = node.find(path)
    return found.text.strip() if found is not None and found.text else None


def bus_id(value):
    value = value.lower()
    return value[4:] if re.match(r"^0{4}[0-9a-f]{4}:", value) else value


def main():
    inspect_path, xml_path, query_path, lgip_path, lgipp_path = sys.argv[1:6]
    ours = json.load(open(inspect_path))
    root = ET.parse(xml_path).getroot()
    compute_caps = {}
    for line in open(query_path):
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 2:
            compute_caps[parts[0]] = parts[1]

    check("driver version", ours["nvml"]["driverVersion"], text(root, "driver_version"))
    cuda = ours["nvml"]["cudaDriverVersion"]
    check("CUDA driver version", f"{cuda // 1000}.{(cuda % 1000) // 10}", text(root, "cuda_version"))
    smi_gpus = {text(g, "uuid"): g for g in root.findall("gpu")}
    check("GPU count", len(ours["gpus"]), len(smi_gpus))
    devices = {d["name"]: d for d in ours["resourceSlice"]["devices"]}

    for gpu in ours["gpus"]:
        uuid = gpu["uuid"]
        smi = smi_gpus.get(uuid)
        check(f"GPU {uuid} known to nvidia-smi", smi is not None, True)
        if smi is None:
            continue
        g = f"GPU {gpu['index']}"
        check(f"{g} minor number", str(gpu["minor"]), text(smi, "minor_number"))
        check(f"{g} PCI bus id", gpu["pciBusID"], bus_id(text(smi, "pci/pci_bus_id")))
        total_mib = int(text(smi, "fb_memory_usage/total").split()[0])
        check(f"{g} memory MiB", gpu["memoryBytes"] // (1024 * 1024), total_mib)
        check(f"{g} product name", gpu["productName"], text(smi, "product_name"))
        check(f"{g} architecture", gpu["architecture"], text(smi, "product_architecture"))
        check(f"{g} brand (case-insensitive)", gpu["brand"].lower(), text(smi, "product_brand").lower())
        check(f"{g} compute capability", gpu["cudaComputeCapability"], compute_caps.get(uuid))
        smi_mode = text(smi, "addressing_mode")
        check(f"{g} addressing mode", gpu["addressingMode"] or "N/A", smi_mode)
        check(f"{g} module id", str(gpu["moduleID"]), text(smi, ".//module_id"))
        check(f"{g} MIG enabled", gpu["mig"]["enabled"],
              text(smi, "mig_mode/current_mig") == "Enabled")

        # The published full-GPU device carries the same identity.
        name = f"gpu-{gpu['minor']}"
        if not gpu["mig"]["enabled"]:
            dev = devices.get(name)
            check(f"{g} published as {name}", dev is not None, True)
            if dev:
                attrs = dev["attributes"]
                check(f"{name} uuid attribute", attrs["uuid"]["string"], uuid)
                check(f"{name} pciBusID attribute",
                      attrs["resource.kubernetes.io/pciBusID"]["string"], bus_id(text(smi, "pci/pci_bus_id")))
                check(f"{name} memory capacity", dev["capacity"]["memory"]["value"], f"{total_mib}Mi")
                check(f"{name} cudaComputeCapability attribute",
                      attrs["cudaComputeCapability"]["version"], compute_caps.get(uuid) + ".0")

        # MIG profiles (nvidia-smi mig -lgip) and placements (-lgipp).
        profiles = {p["id"]: p for p in gpu["mig"]["profiles"]}
        lines = open(lgip_path).read().splitlines()
        smi_profiles = {}
        row = re.compile(r"^\|\s+(\d+)\s+(MIG \S+)\s+(\d+)\s+(\d+)/(\d+)\s+([\d.]+)\s+(\w+)\s+(\d+)\s+(\d+)\s+(\d+)\s+\|")
        row2 = re.compile(r"^\|\s+(\d+)\s+(\d+)\s+(\d+)\s+\|")
        for i, line in enumerate(lines):
            m = row.match(line)
            if not m or int(m.group(1)) != gpu["index"]:
                continue
            m2 = row2.match(lines[i + 1])
            smi_profiles[int(m.group(3))] = {
                "nvmlName": m.group(2), "instanceCount": int(m.group(5)), "memoryGiB": m.group(6),
                "multiprocessors": int(m.group(8)), "decoders": int(m.group(9)),
                "encoders": int(m.group(10)), "copyEngines": int(m2.group(1)),
                "jpegEngines": int(m2.group(2)), "ofaEngines": int(m2.group(3))}
        check(f"{g} MIG profile ids", sorted(profiles), sorted(smi_profiles))
        for pid, smi_p in sorted(smi_profiles.items()):
            p = profiles.get(pid)
            if p is None:
                continue
            for key in ("nvmlName", "instanceCount", "multiprocessors", "decoders", "encoders",
                        "copyEngines", "jpegEngines", "ofaEngines"):
                check(f"{g} MIG profile {pid} {key}", p[key], smi_p[key])
            check(f"{g} MIG profile {pid} memory GiB", f"{p['memoryMiB'] / 1024:.2f}", smi_p["memoryGiB"])
        for line in open(lgipp_path):
            m = re.match(r"^GPU\s+(\d+)\s+Profile ID\s+(\d+)\s+Placements?\s*:\s*\{([\d,]+)\}:(\d+)", line)
            if not m or int(m.group(1)) != gpu["index"]:
                continue
            pid = int(m.group(2))
            smi_placements = [[int(s), int(m.group(4))] for s in m.group(3).split(",")]
            ours_placements = [[x["start"], x["size"]] for x in profiles.get(pid, {}).get("placements", [])]
            check(f"{g} MIG profile {pid} placements", ours_placements, smi_placements)

    print(f"{failures} mismatches")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
