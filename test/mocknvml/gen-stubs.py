#!/usr/bin/env python3
"""Generates api_stubs.cc: the mock NVML's answer for every function NVIDIA's
nvml.h declares that the mock does not implement by hand.

    gen-stubs.py <nvml.h> <out.cc>          write the stubs
    gen-stubs.py --check <nvml.h> <out.cc>  exit 1 when <out.cc> differs
    gen-stubs.py --names <nvml.h>           print every function nvml.h declares

The header is go-nvml's pkg/nvml/nvml.h from the Go module cache (NVIDIA's
header is not copied into this repository; test/mocknvml/nvml-header finds
it). Run once per header version and commit the output (see README.md,
"Every NVML function"): the build must not need Go or the network, and the
committed file shows in review what a new header changes.

Declared functions: every `nvmlReturn_t DECLDIR nvmlX(...)` (both sides of
NVML_NO_UNVERSIONED_FUNC_DEFS, so the plain v1 names as well as the versioned
ones), nvmlErrorString, and the plain names of the `#define nvmlX nvmlY`
block at the top (nvmlGetBlacklistDeviceCount has no declaration of its own;
the real library exports it).

Hand-implemented functions are found in the mock's own sources (a definition
`nvmlReturn_t nvmlX(` at the start of a line in test/mocknvml/*.cc other than
the output, or a one-line macro use `NVDRA_MOCKNVML_...(nvmlX)`) and get
no stub.

Each stub, as a real GPU without the feature answers:
  1. NVML_ERROR_UNINITIALIZED before nvmlInit (and FUNCTION_NOT_FOUND when
     the profile's missingFunctions names it), via NVDRA_MOCKNVML_BEGIN;
  2. the handles: a device, GPU instance or compute instance handle the mock
     does not know, or an event set that is not live, gives
     INVALID_ARGUMENT (GPU_IS_LOST for a lost GPU); a NULL unit or GPM
     sample handle too, and any unit handle (the mock has no units);
  3. INVALID_ARGUMENT for a NULL pointer argument, except an array beside a
     count or size pointer (callers pass NULL to ask for the size);
  4. NVML_ERROR_NOT_SUPPORTED.
Nothing is written through any pointer. Parameters are declared with types of
the same class and size as the header's (pointers as const void*, enums as
int), which is all the calling convention (x86-64, aarch64) sees: every
parameter of every NVML function is an integer-class scalar, a pointer or a
one-pointer handle struct; the generator stops on anything else.
"""

import pathlib
import re
import sys

HERE = pathlib.Path(__file__).resolve().parent

# Handle types: go-nvml's header wraps each in a struct of one pointer
# (`typedef struct { struct nvmlDevice_st* handle; } nvmlDevice_t;`), passed
# as the pointer is. Value: (parameter type in the stub, check).
HANDLES = {
    "nvmlDevice_t": ("nvmlDevice_t", "device"),
    "nvmlGpuInstance_t": ("nvmlGpuInstance_t", "gpu_instance"),
    "nvmlComputeInstance_t": ("nvmlComputeInstance_t", "compute_instance"),
    "nvmlEventSet_t": ("nvmlEventSet_t", "event_set"),
    "nvmlUnit_t": ("const void*", "unit"),
    "nvmlGpmSample_t": ("const void*", "non_null"),
}
SCALARS = {
    "int": "int",
    "unsigned int": "unsigned int",
    "unsigned long long": "unsigned long long",
    "unsigned char": "unsigned char",
    "char": "char",
}
# Pointer parameter names that are a count or size (always checked); an
# array parameter beside one may be NULL.
COUNT_NAME = re.compile(r"(count|size|length)$", re.IGNORECASE)


def strip_comments(text):
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    return re.sub(r"//[^\n]*", "", text)


def parse(header_text):
    """Returns ({name: [(type, is_pointer, pname)] or None for aliases}, aliases, types)."""
    text = strip_comments(header_text)
    enums = set(re.findall(r"typedef\s+enum\b[^;{]*\{[^}]*\}\s*(\w+)\s*;", text))
    scalar_typedefs = {
        name: base
        for base, name in re.findall(
            r"typedef\s+((?:unsigned\s+)?(?:long\s+long|int|char|short))\s+(\w+)\s*;", text)
    }
    functions = {}
    for name, params in re.findall(r"nvmlReturn_t\s+DECLDIR\s+(\w+)\s*\(([^)]*)\)\s*;", text):
        plist = []
        params = " ".join(params.split())
        if params not in ("", "void"):
            for raw in params.split(","):
                raw = raw.strip()
                m = re.fullmatch(r"(.*?)(\w+)(\s*\[\s*\w*\s*\])?", raw)
                if not m:
                    sys.exit(f"gen-stubs: cannot parse parameter {raw!r} of {name}")
                ptype, pname, array = m.group(1).strip(), m.group(2), m.group(3)
                is_ptr = "*" in ptype or array is not None
                ptype = ptype.replace("*", " ").replace("const", " ")
                ptype = " ".join(ptype.split())
                plist.append((ptype, is_ptr, pname))
        if name in functions:
            sys.exit(f"gen-stubs: {name} declared twice")
        functions[name] = plist
    if "nvmlErrorString" not in re.findall(r"const\s+DECLDIR\s+char\s*\*\s*(\w+)\s*\(", text):
        sys.exit("gen-stubs: nvmlErrorString not found; is this nvml.h?")
    aliases = {}
    block = re.search(r"#ifndef NVML_NO_UNVERSIONED_FUNC_DEFS(.*?)#endif", text, flags=re.S)
    if not block:
        sys.exit("gen-stubs: no NVML_NO_UNVERSIONED_FUNC_DEFS block; is this nvml.h?")
    for plain, target in re.findall(r"#define\s+(nvml\w+)\s+(nvml\w+)", block.group(1)):
        if plain.endswith("_t"):
            continue  # a type alias (nvmlBlacklistDeviceInfo_t)
        if target not in functions:
            sys.exit(f"gen-stubs: {plain} aliases {target}, which nvml.h does not declare")
        aliases[plain] = target
    return functions, aliases, enums, scalar_typedefs


def declared_names(functions, aliases):
    return sorted(set(functions) | set(aliases) | {"nvmlErrorString"})


def hand_implemented(out_path):
    names = set()
    for src in sorted(HERE.glob("*.cc")):
        if src.resolve() == out_path.resolve() or src.name.endswith("_test.cc"):
            continue
        names.update(re.findall(r"^nvmlReturn_t (nvml\w+)\(", src.read_text(), flags=re.M))
        names.update(re.findall(r"^const char\* (nvml\w+)\(", src.read_text(), flags=re.M))
        # Definitions made by a macro, one a line: NVDRA_MOCKNVML_NO_PROCESSES(nvmlX)
        names.update(re.findall(r"^NVDRA_MOCKNVML_\w+\((nvml\w+)\)$", src.read_text(), flags=re.M))
    return names


def stub(name, plist, enums, scalar_typedefs):
    params, handle_checks, checks = [], [], []
    has_count_ptr = any(is_ptr and COUNT_NAME.search(pname) for _, is_ptr, pname in plist)
    for ptype, is_ptr, pname in plist:
        if is_ptr:
            if COUNT_NAME.search(pname) or not has_count_ptr:
                params.append(f"const void* {pname}")
                checks.append(f"  if ({pname} == nullptr) return NVML_ERROR_INVALID_ARGUMENT;")
            else:
                params.append(f"const void* /*{pname}*/")
            continue
        if ptype in HANDLES:
            ctype, check = HANDLES[ptype]
            params.append(f"{ctype} {pname}")
            handle_checks.append(f"  NVDRA_MOCKNVML_CHECK_HANDLE({check}, {pname});")
            continue
        base = scalar_typedefs.get(ptype, ptype)
        if base in SCALARS:
            params.append(f"{SCALARS[base]} /*{pname}*/")
        elif ptype in enums:
            params.append(f"int /*{pname}: {ptype}*/")
        else:
            sys.exit(f"gen-stubs: {name}: parameter {pname} has type {ptype}, passed by value "
                     "and neither a scalar, an enum nor a handle; write it by hand")
    body = "\n".join(["  NVDRA_MOCKNVML_BEGIN();"] + handle_checks + checks + ["  return NVML_ERROR_NOT_SUPPORTED;"])
    return f"nvmlReturn_t {name}({', '.join(params)}) {{\n{body}\n}}\n"


def generate(header_path, out_path):
    functions, aliases, enums, scalar_typedefs = parse(header_path.read_text())
    done = hand_implemented(out_path)
    unknown = done - set(declared_names(functions, aliases))
    if unknown:
        sys.exit(f"gen-stubs: the mock defines functions nvml.h does not declare: {sorted(unknown)}")
    parts = [
        "// GENERATED by gen-stubs.py from go-nvml's pkg/nvml/nvml.h; do not edit.\n"
        "// Re-run test/mocknvml/update-stubs after a header or hand-implementation change.\n"
        "//\n"
        "// Every function nvml.h declares that the mock does not implement by hand,\n"
        "// answering as a GPU without the feature: UNINITIALIZED before nvmlInit,\n"
        "// INVALID_ARGUMENT for a bad handle or a NULL pointer, else NOT_SUPPORTED.\n"
        "// Nothing is written through any pointer (see gen-stubs.py).\n"
        f"// Declared: {len(declared_names(functions, aliases))}; by hand: {len(done)}; "
        f"here: {len(set(declared_names(functions, aliases)) - done)}.\n"
        "\n"
        "#include \"exports.h\"\n"
        "#include \"stub_checks.h\"\n"
        "\n"
        "namespace nvdra::mocknvml::c_api {\n"
        "extern \"C\" {\n"
    ]
    for name in sorted(set(functions) | set(aliases)):
        if name in done:
            continue
        plist = functions[aliases[name]] if name in aliases else functions[name]
        parts.append("\nNVDRA_MOCKNVML_EXPORT " + stub(name, plist, enums, scalar_typedefs))
    parts.append("\n}  // extern \"C\"\n}  // namespace nvdra::mocknvml::c_api\n")
    return "".join(parts)


def main(argv):
    if len(argv) == 2 and argv[0] == "--names":
        functions, aliases, _, _ = parse(pathlib.Path(argv[1]).read_text())
        print("\n".join(declared_names(functions, aliases)))
        return 0
    check = argv[:1] == ["--check"]
    if check:
        argv = argv[1:]
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    header, out = pathlib.Path(argv[0]), pathlib.Path(argv[1])
    text = generate(header, out)
    if check:
        if not out.exists() or out.read_text() != text:
            print(f"gen-stubs: {out} is not what gen-stubs.py makes from {header}; "
                  "run test/mocknvml/update-stubs", file=sys.stderr)
            return 1
        return 0
    out.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
