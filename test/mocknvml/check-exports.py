#!/usr/bin/env python3
"""ctest mocknvml.exports_match_header: the mock's dynamic symbols are
exactly the functions NVIDIA's nvml.h declares (go-nvml's copy, found by
nvml-header in the project's Go module cache), and api_stubs.cc is what
gen-stubs.py makes from that header and the hand-written sources.

    check-exports.py <libnvidia-ml.so.1>

Both directions: every declared function (versioned and plain names, the
#define aliases) must be exported, and nothing else may be, apart from
ALLOWED_EXTRA (empty: the version script exports nvml* only).
"""

import pathlib
import subprocess
import sys

HERE = pathlib.Path(__file__).resolve().parent
sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, str(HERE))
gen = __import__("gen-stubs")

# Exported names nvml.h does not declare, with the reason. None today.
ALLOWED_EXTRA = {}


def main(argv):
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    lib = argv[0]
    found = subprocess.run([str(HERE / "nvml-header")], capture_output=True, text=True)
    if found.returncode != 0:
        print(found.stderr, end="", file=sys.stderr)
        return 1
    header = pathlib.Path(found.stdout.strip())
    functions, aliases, _, _ = gen.parse(header.read_text())
    declared = set(gen.declared_names(functions, aliases))
    nm = subprocess.run(["nm", "-D", "--defined-only", lib], capture_output=True, text=True,
                        check=True)
    exported = set()
    for line in nm.stdout.splitlines():
        fields = line.split()
        if len(fields) == 3:
            exported.add(fields[2].split("@")[0])
    missing = sorted(declared - exported)
    extra = sorted(exported - declared - set(ALLOWED_EXTRA))
    ok = True
    if missing:
        ok = False
        print(f"{len(missing)} functions nvml.h declares are not exported by {lib}:")
        for name in missing:
            print(f"  {name}")
    if extra:
        ok = False
        print(f"{len(extra)} exported symbols nvml.h does not declare:")
        for name in extra:
            print(f"  {name}")
    stubs = HERE / "api_stubs.cc"
    if gen.main(["--check", str(header), str(stubs)]) != 0:
        ok = False
    print(f"{header}: {len(declared)} functions; {lib}: {len(exported)} exported; "
          f"{len(missing)} missing, {len(extra)} extra")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
