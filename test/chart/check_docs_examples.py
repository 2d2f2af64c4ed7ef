#!/usr/bin/env python3
"""Every ```yaml block of docs/*.md and README.md is covered by a test, so the
docs cannot drift from what runs.

The line right before each block is a marker saying how it is covered:

  <!-- e2e: NAME -->
      An e2e test applies the block verbatim: it reads it from the Markdown
      with docsExample(t, doc, "NAME") (test/simnode/e2e). Checked here: NAME
      is unique and named, as a string literal, in a Go test of
      test/simnode/e2e.
  <!-- example: values -->
      A values file (or an excerpt of one) for the Helm chart: rendered here
      with `helm template` against the chart, whose values.schema.json refuses
      unknown keys and wrong types.
  <!-- example: excerpt of PATH -->
      Part of a file PATH (relative to the checkout) that an e2e test applies
      whole: checked here that the block's lines appear, consecutively and
      unchanged, in PATH, and that a Go test of test/simnode/e2e names PATH's
      file (or, for a spec of several files, its folder).
  <!-- example: not-applied, REASON -->
      Deliberately applied by nobody (an excerpt of an object's status, say);
      REASON must say why.

A block without a marker, or with one whose check fails, fails this program
with the block's file:line.

  check_docs_examples.py --helm PATH --source-dir DIR [--self-test]
"""

import argparse
import glob
import os
import re
import subprocess
import sys
import tempfile

MARKER = re.compile(r"^<!-- (e2e: (?P<e2e>[a-z0-9-]+)|example: (?P<kind>values|excerpt of (?P<path>\S+)|not-applied, (?P<reason>.+?))) -->$")
FENCE_OPEN = re.compile(r"^```ya?ml\s*$")
E2E_DIR = os.path.join("test", "simnode", "e2e")
CHART = os.path.join("deployments", "helm", "dra-driver-nvidia-gpu")


def yaml_blocks(path):
    """Yields (line number of the fence, line before it, block text)."""
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    i = 0
    while i < len(lines):
        if FENCE_OPEN.match(lines[i]):
            start = i
            end = start + 1
            while end < len(lines) and lines[end].rstrip() != "```":
                end += 1
            before = lines[start - 1] if start > 0 else ""
            yield start + 1, before, "\n".join(lines[start + 1:end]) + "\n"
            i = end + 1
        else:
            i += 1


def go_test_sources(source_dir):
    text = ""
    for p in sorted(glob.glob(os.path.join(source_dir, E2E_DIR, "*_test.go"))):
        with open(p, encoding="utf-8") as f:
            text += f.read()
    return text


def check(source_dir, helm, docs):
    """Returns the list of failures, each starting with file:line."""
    failures = []
    tests = go_test_sources(source_dir)
    names = {}
    counts = {"e2e": 0, "values": 0, "excerpt": 0, "not-applied": 0}
    for doc in docs:
        rel = os.path.relpath(doc, source_dir)
        for line, before, body in yaml_blocks(doc):
            where = f"{rel}:{line}"
            m = MARKER.match(before.strip())
            if not m:
                failures.append(f"{where}: yaml block without a marker on the line before it; add one of "
                                "<!-- e2e: NAME --> (and a test applying it), <!-- example: values -->, "
                                "<!-- example: excerpt of PATH --> or <!-- example: not-applied, REASON -->")
                continue
            if m.group("e2e"):
                counts["e2e"] += 1
                name = m.group("e2e")
                if name in names:
                    failures.append(f"{where}: example name {name!r} already used at {names[name]}")
                names[name] = where
                if f'"{name}"' not in tests:
                    failures.append(f"{where}: no Go test in {E2E_DIR} names example {name!r} "
                                    "(apply it with docsExample)")
            elif m.group("kind") == "values":
                counts["values"] += 1
                failures += check_values(helm, os.path.join(source_dir, CHART), where, body)
            elif m.group("path"):
                counts["excerpt"] += 1
                failures += check_excerpt(source_dir, tests, where, m.group("path"), body)
            else:
                counts["not-applied"] += 1
    return failures, counts


def check_values(helm, chart, where, body):
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
        f.write(body)
        values = f.name
    try:
        # As chart.template renders it: a test cluster's version, resources on.
        r = subprocess.run([helm, "template", "docs", chart, "--namespace", "nvidia-dra", "--kube-version", "1.34.0",
                            "--set", "gpuResourcesEnabledOverride=true", "-f", values],
                           capture_output=True, text=True)
    finally:
        os.unlink(values)
    if r.returncode != 0:
        return [f"{where}: helm template with this values block fails: {r.stderr.strip()}"]
    return []


def check_excerpt(source_dir, tests, where, path, body):
    full = os.path.join(source_dir, path)
    if not os.path.isfile(full):
        return [f"{where}: excerpt of {path}: no such file"]
    with open(full, encoding="utf-8") as f:
        text = f.read()
    failures = []
    if body not in text:
        failures.append(f"{where}: the block is not, line for line, in {path}; copy it from there again")
    # A test names the file, or the folder of a multi-file spec.
    names = [os.path.basename(path), os.path.basename(os.path.dirname(path))]
    if not any(f'"{n}"' in tests for n in names):
        failures.append(f"{where}: no Go test in {E2E_DIR} names {names[0]!r} (or its folder), so nothing applies {path}")
    return failures


def self_test(source_dir, helm):
    """The checks can fail: a docs folder with one bad block of each kind."""
    bad = """
```yaml
kind: Unmarked
```
<!-- e2e: no-test-applies-this-name -->
```yaml
kind: Pod
```
<!-- example: values -->
```yaml
featureGates:
  NoSuchGate: true
nosuchkey: 1
```
<!-- example: excerpt of scripts/setup -->
```yaml
this line is in no file: true
```
<!-- example: not-applied, an excerpt of a status -->
```yaml
status: {}
```
"""
    with tempfile.TemporaryDirectory() as d:
        doc = os.path.join(d, "bad.md")
        with open(doc, "w") as f:
            f.write(bad)
        failures, counts = check(source_dir, helm, [doc])
    want = ["without a marker", "no Go test", "helm template", "not, line for line", "names 'setup'"]
    missing = [w for w in want if not any(w in f for f in failures)]
    if missing or len(failures) != len(want):
        print(f"self-test: failures {failures}; wanted one each containing {want}")
        return False
    return True


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--helm", required=True)
    ap.add_argument("--source-dir", required=True)
    args = ap.parse_args()
    if not self_test(args.source_dir, args.helm):
        return 1
    docs = sorted(glob.glob(os.path.join(args.source_dir, "docs", "*.md"))) + [os.path.join(args.source_dir, "README.md")]
    failures, counts = check(args.source_dir, args.helm, docs)
    for f in failures:
        print(f)
    print(f"{sum(counts.values())} yaml blocks in {len(docs)} files: {counts['e2e']} applied by e2e tests, "
          f"{counts['values']} values rendered, {counts['excerpt']} excerpts of applied files, "
          f"{counts['not-applied']} not applied; {len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
