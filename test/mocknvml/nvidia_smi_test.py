#!/usr/bin/env python3
"""The simulated nvidia-smi (nvidia-smi.py) against what NVIDIA's nvidia-smi
printed on a real H100 (test/data/h100/), line by line.

  nvidia_smi_test.py <built libnvidia-ml.so.1>      (ctest: mocknvml.nvidia_smi)

The driver root is laid out by make-driver-root from h100-sxm.json (whose
values come from the probed H100) cut to its GPU 0, with the captured GPU's
identity read from nvidia-smi-q.txt: UUID, PCI bus id (a VM's
00000000:00:06.0), module id, serial, VBIOS version and board part number.
Then:

- `mig -lgip` and `mig -lgipp` equal the captures, every line.
- `-q`: every line the simulated tool prints is the capture's line at the
  same place (same section path, label and value), in the capture's order;
  the one allowed difference is the Timestamp's value. The real tool prints
  more (clocks, power, ECC, ...); those lines are counted, not required.
- `--query-gpu=uuid,compute_cap --format=csv,noheader` equals the capture
  of the second H100 machine (check/nvidia-smi-query.csv), from a root with
  that machine's UUID.
- `--version`, `--query-gpu` with the fields of
  test/data/nvidia-smi-query-gpu-fields.txt (header, units, nounits) and the
  unknown-field error: equal to test/data/h100/nvidia-smi-version.txt,
  nvidia-smi-query-gpu.csv, nvidia-smi-query-gpu-noheader-nounits.csv,
  nvidia-smi-L.txt and nvidia-smi-help-query-gpu.txt where those captures
  exist (test/data/capture-nvidia-smi makes them on the next lent GPU
  machine); until then, checked against the profile and the documented
  format.
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.dirname(os.path.dirname(HERE))
DATA = os.path.join(SOURCE, "test", "data")
# The captures; NVDRA_NVIDIA_SMI_CAPTURES names another folder of them (a
# fresh test/data/capture-nvidia-smi run, before it is copied here).
H100 = os.environ.get("NVDRA_NVIDIA_SMI_CAPTURES") or os.path.join(DATA, "h100")
LIBRARY = os.environ.get("NVDRA_MOCKNVML_PATH", "")


def read(path):
    with open(path) as f:
        return f.read()


def capture(name):
    path = os.path.join(H100, name)
    return read(path) if os.path.exists(path) else None


def capture_profile(**override):
    """h100-sxm.json cut to GPU 0, with the identity of the captured GPU
    (read from its nvidia-smi-q.txt, so a new capture set stays consistent):
    UUID, PCI bus id, module id, serial, VBIOS version, board part number."""
    profile = json.loads(read(os.path.join(HERE, "profiles", "h100-sxm.json")))
    q = dict(q_lines(read(os.path.join(H100, "nvidia-smi-q.txt"))))
    gpu_path = next(path for path in q if path.startswith("GPU ") and "/" not in path)
    got = lambda label: q[gpu_path + "/" + label]
    gpu = dict(profile["devices"][0])
    gpu.update({"uuid": got("GPU UUID"), "pci": {"busId": got("PCI/Bus Id")},
                "moduleId": int(got("Platform Info/Module Id")), "serial": got("Serial Number"),
                "vbiosVersion": got("VBIOS Version"), "boardPartNumber": got("Board Part Number")})
    gpu.update(override)
    profile["devices"] = [gpu]
    return profile


class DriverRoot:
    def __init__(self, profile):
        self.dir = tempfile.mkdtemp(prefix="nvidia-smi-test-")
        path = os.path.join(self.dir, "profile.json")
        with open(path, "w") as f:
            json.dump(profile, f, indent=1)  # make-driver-root reads driverVersion by line
        self.root = os.path.join(self.dir, "root")
        env = dict(os.environ)
        env.pop("NVDRA_MOCK_VFIO_BOUND", None)
        subprocess.run([os.path.join(HERE, "make-driver-root"), self.root, path, LIBRARY], check=True,
                       env=env, stdout=subprocess.DEVNULL)

    def smi(self, *args):
        env = {k: v for k, v in os.environ.items() if not k.startswith("MOCK_NVML")}
        p = subprocess.run([os.path.join(self.root, "usr", "bin", "nvidia-smi")] + list(args),
                           capture_output=True, text=True, env=env)
        return p.returncode, p.stdout

    def close(self):
        shutil.rmtree(self.dir, ignore_errors=True)


def q_lines(text):
    """-q output as (section path, value) per line: the path is the labels
    of the enclosing sections (by indentation, 4 spaces a level) and the
    line's own label; value None for a section header, "" for a blank line."""
    out, stack = [], []
    for line in text.split("\n"):
        if not line.strip():
            out.append(("", ""))
            continue
        depth = (len(line) - len(line.lstrip(" "))) // 4
        label, sep, value = line.partition(" : ")
        if not sep and line.rstrip().endswith(" :"):
            label, sep, value = line.rstrip()[:-2], " : ", ""
        stack = stack[:depth] + [label.strip()]
        out.append(("/".join(stack), value.strip() if sep else None))
    return out


class CapturedH100(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.node = DriverRoot(capture_profile())

    @classmethod
    def tearDownClass(cls):
        cls.node.close()

    def assertSameLines(self, got, want, what):
        got_lines, want_lines = got.rstrip("\n").split("\n"), want.rstrip("\n").split("\n")
        for n, (g, w) in enumerate(zip(got_lines, want_lines)):
            self.assertEqual(g, w, "%s line %d differs" % (what, n + 1))
        self.assertEqual(len(got_lines), len(want_lines), "%s: line count" % what)

    def test_mig_lgip_equals_capture(self):
        rc, out = self.node.smi("mig", "-lgip")
        self.assertEqual(rc, 0)
        self.assertSameLines(out, capture("nvidia-smi-mig-lgip.txt"), "mig -lgip")

    def test_mig_lgipp_equals_capture(self):
        rc, out = self.node.smi("mig", "-lgipp")
        self.assertEqual(rc, 0)
        self.assertSameLines(out, capture("nvidia-smi-mig-lgipp.txt"), "mig -lgipp")

    def test_q_lines_are_the_captures(self):
        rc, out = self.node.smi("-q")
        self.assertEqual(rc, 0)
        want = read(os.path.join(H100, "nvidia-smi-q.txt"))
        # The layout itself: labels padded to column 55, as captured.
        for line in out.split("\n"):
            if ": " in line:
                self.assertEqual(line.index(" : ") + 1, 55, line)
        got_q, want_q = q_lines(out), q_lines(want)
        i = 0
        matched = 0
        for path, value in got_q:
            while i < len(want_q) and want_q[i][0] != path:
                i += 1
            self.assertLess(i, len(want_q), "-q line %r (value %r) is not in the capture at this place"
                            % (path, value))
            if path == "Timestamp":  # the one documented difference: the time
                self.assertRegex(value, r"^\w{3} \w{3} [ \d]\d \d\d:\d\d:\d\d \d{4}$")
            else:
                self.assertEqual(value, want_q[i][1], "-q %s" % path)
            matched += 1
            i += 1
        self.assertEqual(matched, len(got_q))
        self.assertGreaterEqual(sum(1 for path, _ in got_q if path), 37)
        print("-q: %d of the capture's %d lines printed, all equal (Timestamp's value aside)"
              % (matched, len(want_q)), file=sys.stderr)

    def test_version(self):
        rc, out = self.node.smi("--version")
        self.assertEqual(rc, 0)
        want = capture("nvidia-smi-version.txt")
        if want is not None:
            self.assertSameLines(out, want, "--version")
            return
        # No capture yet: the R535+ format, values from the profile (the
        # capture's driver 580.159.04, CUDA 13.0).
        self.assertEqual(out, "NVIDIA-SMI version  : 580.159.04\n"
                              "NVML version        : 580.159\n"
                              "DRIVER version      : 580.159.04\n"
                              "CUDA Version        : 13.0\n")

    def test_list(self):
        rc, out = self.node.smi("-L")
        self.assertEqual(rc, 0)
        want = capture("nvidia-smi-L.txt")
        if want is not None:
            self.assertSameLines(out, want, "-L")
        self.assertEqual(out, "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-a4f87852-c040-2818-e88b-bf8725dc5f6c)\n")

    def test_query_gpu(self):
        fields = read(os.path.join(DATA, "nvidia-smi-query-gpu-fields.txt")).strip()
        rc, out = self.node.smi("--query-gpu=" + fields, "--format=csv")
        self.assertEqual(rc, 0, out)
        rc2, bare = self.node.smi("--query-gpu", fields, "--format", "csv,noheader,nounits")
        self.assertEqual(rc2, 0, bare)
        want, want_bare = capture("nvidia-smi-query-gpu.csv"), capture("nvidia-smi-query-gpu-noheader-nounits.csv")
        if want is not None:
            self.assertSameLines(out, want, "--query-gpu --format=csv")
        if want_bare is not None:
            self.assertSameLines(bare, want_bare, "--query-gpu --format=csv,noheader,nounits")
        header, row = out.rstrip("\n").split("\n")
        self.assertEqual(header.split(", ")[14:18], ["memory.total [MiB]", "memory.reserved [MiB]",
                                                     "memory.used [MiB]", "memory.free [MiB]"])
        # The values -q shows (the real capture's).
        self.assertEqual(row, "0, NVIDIA H100 80GB HBM3, GPU-a4f87852-c040-2818-e88b-bf8725dc5f6c, 1752624001872, "
                              "00000000:00:06.0, 0x0000, 0x00, 0x06, 0x233010DE, 0x16C110DE, 580.159.04, "
                              "96.00.DA.00.0C, 1, Enabled, 81559 MiB, 480 MiB, 0 MiB, 81079 MiB, Default, 9.0, "
                              "Disabled, Disabled")
        self.assertEqual(bare.rstrip("\n"), row.replace(" MiB", ""))

    def test_query_gpu_unknown_field(self):
        rc, out = self.node.smi("--query-gpu=index,no.such.field", "--format=csv")
        want = capture("nvidia-smi-help-query-gpu.txt")
        if want is not None:
            bad = want.split("--- nvidia-smi --query-gpu=index,no.such.field --format=csv\n", 1)[1]
            self.assertEqual(out + "exit %d\n" % rc, bad)
            return
        self.assertEqual(rc, 2)
        self.assertEqual(out, 'Field "no.such.field" is not a valid field to query.\n\n')


class SecondH100(unittest.TestCase):
    """check/: scripts/check-real-gpu's run on another H100."""

    def test_query_uuid_compute_cap(self):
        check = os.path.join(DATA, "h100", "check")
        xml = read(os.path.join(check, "nvidia-smi-q.xml"))
        uuid = re.search(r"<uuid>(GPU-[^<]+)</uuid>", xml).group(1)
        node = DriverRoot(capture_profile(uuid=uuid))
        try:
            rc, out = node.smi("--query-gpu=uuid,compute_cap", "--format=csv,noheader")
            self.assertEqual(rc, 0)
            self.assertEqual(out, read(os.path.join(check, "nvidia-smi-query.csv")))
        finally:
            node.close()


class MigOn(unittest.TestCase):
    """a100-mig.json: GPU 0 full (3g+2g+2x1g, static), GPU 1 one 7g."""

    def test_free_counts_follow_the_instances(self):
        node = DriverRoot(json.loads(read(os.path.join(HERE, "profiles", "a100-mig.json"))))
        try:
            rc, out = node.smi("mig", "-lgip")
            self.assertEqual(rc, 0)
            rows = re.findall(r"^\|\s+(\d+)  (MIG \S+)\s+(\d+)\s+(\d+)/(\d+) ", out, re.M)
            free = {(int(g), int(pid)): int(f) for g, _, pid, f, _ in rows}
            self.assertEqual(free[(0, 19)], 0)   # every slice of GPU 0 is taken
            self.assertEqual(free[(1, 0)], 0)    # GPU 1: its 7g
            self.assertEqual(free[(2, 19)], 7)   # GPU 2: empty, MIG on
            rc, out = node.smi("--query-gpu=index,mig.mode.current", "--format=csv,noheader", "-i", "1")
            self.assertEqual((rc, out), (0, "1, Enabled\n"))
        finally:
            node.close()


if __name__ == "__main__":
    if len(sys.argv) > 1:
        LIBRARY = os.path.abspath(sys.argv.pop(1))
    if not os.path.exists(LIBRARY):
        sys.exit("usage: nvidia_smi_test.py <built libnvidia-ml.so.1>")
    unittest.main(verbosity=2)
