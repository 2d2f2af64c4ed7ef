#!/usr/bin/env python3
"""Lays out the mock sysfs PCI tree of a mock driver root (run by make-driver-root).

    make-sysfs.py <driver root> <profile.json>

Gives <root>/sys and <root>/dev/{vfio,iommu} the shape the Linux kernel gives
a host's /sys and /dev for the profile's GPUs, so that code reading sysfs
(PCIe root, NUMA node, BARs, IOMMU groups, the bound driver) and code moving
a GPU between drivers through the driver core's bind/unbind files can run
against it. test/simsysfs plays the kernel's driver core for this tree; the
binding done here at layout must be exactly what its bind leaves behind
(Bind below is the same steps, see simsysfs's driver_core.cc).

Per GPU (profile device merged over deviceDefaults, RFC 7386), with its bus id
"00000000:18:00.0" named as sysfs names it, "0000:18:00.0":
  sys/devices/<pcie root>/<bdf>/     the device; pcie root is pci.pcieRoot,
                                     else pci<domain>:<bus - 1>
    vendor device subsystem_vendor subsystem_device class numa_node
    modalias driver_override resource
    iommu_group -> ../../../kernel/iommu_groups/<G>
    driver      -> ../../../bus/pci/drivers/<nvidia|vfio-pci>
    vfio-dev/vfio<K>/                while bound to vfio-pci (IOMMUFD cdev)
  sys/bus/pci/devices/<bdf> -> ../../../devices/<pcie root>/<bdf>
  sys/bus/pci/drivers/{nvidia,vfio-pci}/{bind,unbind,<bdf> -> the device}
  sys/bus/pci/drivers/vfio-pci/{new_id,remove_id}
  sys/kernel/iommu_groups/<G>/devices/<bdf> -> the device; G is
                                     pci.iommuGroup, else 20 + device index
                                     (skipping numbers a profile names)
  sys/module/{nvidia,vfio_pci}/
  dev/iommu, dev/vfio/vfio           the IOMMU API devices (placeholders)
  dev/vfio/<G>, dev/vfio/devices/vfio<K>   while a device of G is on vfio-pci

Every GPU is bound to nvidia, except those whose bus ids are listed in
$NVDRA_MOCK_VFIO_BOUND (comma separated, either spelling), which are bound to
vfio-pci with driver_override "vfio-pci" (as the VFIO rebind sequence leaves
them). sys/ and dev/{vfio,iommu} are removed and laid out afresh each run.
Links are relative, as the kernel's, so the tree works wherever it is mounted
(a container's /driver-root, a node's /host-root).

Exit status 2 with a message for a bad profile or an unknown bus id in
$NVDRA_MOCK_VFIO_BOUND.
"""
import json
import os
import shutil
import sys

NVIDIA = "nvidia"
VFIO_PCI = "vfio-pci"
NVIDIA_VENDOR = 0x10DE
PCI_CLASS_3D = 0x030200
DEFAULT_GROUP_BASE = 20

# Resource flags as the kernel prints them in sysfs `resource`:
# IORESOURCE_MEM | IORESOURCE_SIZEALIGN, and for 64-bit prefetchable BARs
# also IORESOURCE_PREFETCH, IORESOURCE_MEM_64 and the BAR type bits (0xc).
FLAGS_MEM32 = 0x0000000000040200
FLAGS_MEM64_PREFETCH = 0x000000000014220C
BAR0_SIZE = 16 << 20
BAR3_SIZE = 32 << 20
RESOURCE_LINES = 13  # 6 BARs, the ROM and the 6 SR-IOV BARs


def fail(message):
    sys.stderr.write("make-sysfs.py: %s\n" % message)
    sys.exit(2)


def merge(base, over):
    """RFC 7386 merge patch, as the mock library applies deviceDefaults."""
    if not isinstance(over, dict):
        return over
    out = dict(base) if isinstance(base, dict) else {}
    for k, v in over.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = merge(out.get(k), v)
    return out


def sysfs_bdf(bus_id):
    """"00000000:18:00.0" or "0000:18:00.0" -> (domain, bus, "0000:18:00.0")."""
    try:
        domain, bus, rest = bus_id.split(":")
        device, function = rest.split(".")
        d, b, dev, fn = int(domain, 16), int(bus, 16), int(device, 16), int(function, 16)
    except ValueError:
        raise ValueError("pci.busId %r: expected DDDDDDDD:BB:DD.F" % bus_id)
    return d, b, "%04x:%02x:%02x.%x" % (d, b, dev, fn)


def next_power_of_two(n):
    p = 1
    while p < n:
        p <<= 1
    return p


def align_up(n, alignment):
    return (n + alignment - 1) // alignment * alignment


def relative_link(target, link):
    os.symlink(os.path.relpath(target, os.path.dirname(link)), link)


def write(path, text, mode=0o644):
    with open(path, "w") as f:
        f.write(text)
    os.chmod(path, mode)


class Layout:
    def __init__(self, root):
        self.root = root
        self.sys = os.path.join(root, "sys")
        self.dev = os.path.join(root, "dev")
        self.drivers = os.path.join(self.sys, "bus/pci/drivers")
        self.devices = os.path.join(self.sys, "bus/pci/devices")
        self.groups = os.path.join(self.sys, "kernel/iommu_groups")

    def clear(self):
        shutil.rmtree(self.sys, ignore_errors=True)
        shutil.rmtree(os.path.join(self.dev, "vfio"), ignore_errors=True)
        if os.path.lexists(os.path.join(self.dev, "iommu")):
            os.remove(os.path.join(self.dev, "iommu"))

    def skeleton(self):
        for module in ("nvidia", "vfio_pci"):
            os.makedirs(os.path.join(self.sys, "module", module))
        for driver, module in ((NVIDIA, "nvidia"), (VFIO_PCI, "vfio_pci")):
            d = os.path.join(self.drivers, driver)
            os.makedirs(d)
            files = ["bind", "unbind"] + (["new_id", "remove_id"] if driver == VFIO_PCI else [])
            for name in files:
                write(os.path.join(d, name), "")
            relative_link(os.path.join(self.sys, "module", module), os.path.join(d, "module"))
        os.makedirs(self.devices)
        os.makedirs(self.groups)
        os.makedirs(os.path.join(self.dev, "vfio"))
        write(os.path.join(self.dev, "vfio", "vfio"), "", 0o666)
        write(os.path.join(self.dev, "iommu"), "", 0o666)

    def add_device(self, gpu, pcie_root, group, bars):
        d, b, bdf = sysfs_bdf(gpu["pci"]["busId"])
        device_dir = os.path.join(self.sys, "devices", pcie_root, bdf)
        os.makedirs(device_dir)
        pci = gpu["pci"]
        vendor, device = pci["pciDeviceId"] & 0xFFFF, pci["pciDeviceId"] >> 16
        sub_vendor, sub_device = pci["pciSubSystemId"] & 0xFFFF, pci["pciSubSystemId"] >> 16
        numa = gpu.get("numaNode")
        files = {
            "vendor": "0x%04x\n" % vendor,
            "device": "0x%04x\n" % device,
            "subsystem_vendor": "0x%04x\n" % sub_vendor,
            "subsystem_device": "0x%04x\n" % sub_device,
            "class": "0x%06x\n" % PCI_CLASS_3D,
            "numa_node": "%d\n" % (numa if isinstance(numa, int) else -1),
            "modalias": "pci:v%08Xd%08Xsv%08Xsd%08Xbc%02Xsc%02Xi%02X\n" % (
                vendor, device, sub_vendor, sub_device, PCI_CLASS_3D >> 16, (PCI_CLASS_3D >> 8) & 0xFF,
                PCI_CLASS_3D & 0xFF),
            "driver_override": "(null)\n",
            "resource": "".join("0x%016x 0x%016x 0x%016x\n" % line for line in bars),
        }
        for name, text in files.items():
            write(os.path.join(device_dir, name), text)
        group_dir = os.path.join(self.groups, str(group), "devices")
        os.makedirs(group_dir, exist_ok=True)
        relative_link(device_dir, os.path.join(group_dir, bdf))
        relative_link(os.path.join(self.groups, str(group)), os.path.join(device_dir, "iommu_group"))
        relative_link(device_dir, os.path.join(self.devices, bdf))
        return bdf

    def bind(self, bdf, driver):
        """What simsysfs's Bind does (driver_core.cc), in the same order:
        for vfio-pci the group node and the IOMMUFD cdev first, then the
        driver's link to the device, the device's `driver` link last."""
        device_dir = os.path.realpath(os.path.join(self.devices, bdf))
        driver_dir = os.path.join(self.drivers, driver)
        if driver == VFIO_PCI:
            write(os.path.join(device_dir, "driver_override"), "%s\n" % VFIO_PCI)
            group = os.path.basename(os.readlink(os.path.join(device_dir, "iommu_group")))
            group_node = os.path.join(self.dev, "vfio", group)
            if not os.path.exists(group_node):
                write(group_node, "", 0o666)
            cdevs = os.path.join(self.dev, "vfio", "devices")
            os.makedirs(cdevs, exist_ok=True)
            k = 0
            while os.path.exists(os.path.join(cdevs, "vfio%d" % k)):
                k += 1
            os.makedirs(os.path.join(device_dir, "vfio-dev", "vfio%d" % k))
            write(os.path.join(cdevs, "vfio%d" % k), "", 0o666)
        relative_link(device_dir, os.path.join(driver_dir, bdf))
        relative_link(driver_dir, os.path.join(device_dir, "driver"))


def main(argv):
    if len(argv) != 3:
        sys.stderr.write("usage: %s <driver root> <profile.json>\n" % argv[0])
        return 2
    root, profile_path = argv[1], argv[2]
    try:
        with open(profile_path) as f:
            profile = json.load(f)
    except (OSError, ValueError) as e:
        fail("%s: %s" % (profile_path, e))
    defaults = profile.get("deviceDefaults", {})
    gpus = [merge(defaults, d) for d in profile.get("devices", [])]

    vfio_bound = set()
    for entry in os.environ.get("NVDRA_MOCK_VFIO_BOUND", "").split(","):
        if entry.strip():
            try:
                vfio_bound.add(sysfs_bdf(entry.strip())[2])
            except ValueError as e:
                fail("NVDRA_MOCK_VFIO_BOUND: %s" % e)

    # Groups a profile names may be shared (devices behind one bridge); the
    # default ones are one per device and avoid every number in use.
    used_groups = {g["pci"]["iommuGroup"] for g in gpus if isinstance(g.get("pci", {}).get("iommuGroup"), int)}
    # BAR addresses: BAR0s in 32-bit space, 32 MiB apart; BAR1 (the
    # framebuffer aperture, aligned to its size) and BAR3 above 32 TiB, each
    # device after the one before. Distinct and plausible, not any machine's.
    high = 0x200000000000
    planned = []  # (gpu, bdf, pcie root, group, bars)
    for i, gpu in enumerate(gpus):
        pci = gpu.get("pci", {})
        try:
            domain, bus, bdf = sysfs_bdf(pci.get("busId", ""))
            for key in ("pciDeviceId", "pciSubSystemId"):
                if not isinstance(pci.get(key), int):
                    raise ValueError("pci.%s: expected an unsigned integer" % key)
        except ValueError as e:
            fail("%s: devices[%d].%s" % (profile_path, i, e))
        if bdf in [p[1] for p in planned]:
            fail("%s: devices[%d]: bus id %s twice" % (profile_path, i, bdf))
        pcie_root = pci.get("pcieRoot") or "pci%04x:%02x" % (domain, max(bus - 1, 0))
        group = pci.get("iommuGroup")
        if not isinstance(group, int):
            group = DEFAULT_GROUP_BASE + i
            while group in used_groups:
                group += 1
        used_groups.add(group)
        bar0 = 0x80000000 + i * 0x02000000
        bar1_size = next_power_of_two(int(gpu.get("memory", {}).get("total", 1 << 30)))
        bar1 = align_up(high, bar1_size)
        bar3 = bar1 + bar1_size
        high = bar3 + BAR3_SIZE
        bars = [(0, 0, 0)] * RESOURCE_LINES
        bars[0] = (bar0, bar0 + BAR0_SIZE - 1, FLAGS_MEM32)
        bars[1] = (bar1, bar1 + bar1_size - 1, FLAGS_MEM64_PREFETCH)
        bars[3] = (bar3, bar3 + BAR3_SIZE - 1, FLAGS_MEM64_PREFETCH)
        planned.append((gpu, bdf, pcie_root, group, bars))
    bdfs = [p[1] for p in planned]
    unknown = sorted(vfio_bound - set(bdfs))
    if unknown:
        fail("NVDRA_MOCK_VFIO_BOUND names %s, not in %s (%s)" % (", ".join(unknown), profile_path, ", ".join(bdfs)))

    # Checked first, so that a bad input leaves an existing tree alone.
    layout = Layout(root)
    layout.clear()
    layout.skeleton()
    for gpu, _, pcie_root, group, bars in planned:
        layout.add_device(gpu, pcie_root, group, bars)
    for bdf in bdfs:
        layout.bind(bdf, VFIO_PCI if bdf in vfio_bound else NVIDIA)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
