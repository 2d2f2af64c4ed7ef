#!/usr/bin/env python3
"""The RBAC table of docs/install.md (section Security) says what the chart
grants each service account: this renders the chart with `helm template` in
several configurations and checks that, for each account, the rules the table
states for that configuration are exactly the rendered ClusterRole (column
"Everywhere") and driver-namespace Role (column "Driver namespace") rules.

The table's cells are read as: segments separated by "; ", each
"`[GROUP/]RESOURCE` VERBS", where VERBS is a list ("get, list and watch"),
optionally followed by ", plus VERBS with COND" parts and a trailing
"(with COND)" or "(gate on)"; a cell may start with "with COND only: ",
which applies to all its segments; "nothing ..." is no rule. COND names a
feature gate in backquotes (`NVMLDeviceHealthCheck`, `X` or `Y`,
`ComputeDomainCliques=false`) or "ComputeDomains" (resources.computeDomains
.enabled); "(with COND)" after the account's name means it has no rules
without COND. The ADDITIONAL_NAMESPACES column is not checked here
(chart.rbac covers it with real tokens).

  check_docs_rbac.py --helm PATH --source-dir DIR
"""

import argparse
import os
import re
import subprocess
import sys

import yaml

CHART = os.path.join("deployments", "helm", "dra-driver-nvidia-gpu")
NAMESPACE = "nvidia-dra-driver-gpu"
# Configurations: helm --set values, and the conditions they make true.
DEFAULT_GATES_ON = {"ComputeDomainCliques"}
CONFIGS = [
    ("default", [], {"ComputeDomains"} | DEFAULT_GATES_ON),
    ("gpu gates on", ["featureGates.NVMLDeviceHealthCheck=true", "featureGates.MPSSupport=true",
                      "featureGates.FabricTopologySupport=true"],
     {"ComputeDomains", "NVMLDeviceHealthCheck", "MPSSupport", "FabricTopologySupport"} | DEFAULT_GATES_ON),
    ("ComputeDomainCliques off", ["featureGates.ComputeDomainCliques=false"],
     {"ComputeDomains", "ComputeDomainCliques=false"}),
    ("GPUs only, health on", ["resources.computeDomains.enabled=false", "featureGates.NVMLDeviceHealthCheck=true"],
     {"NVMLDeviceHealthCheck"} | DEFAULT_GATES_ON),
]
# Table account -> how its ServiceAccount's name ends.
ACCOUNTS = {
    "<base>-kubeletplugin": "-service-account-kubeletplugin",
    "<base>-controller": "-service-account-controller",
    "compute-domain-daemon-service-account": "compute-domain-daemon-service-account",
    "<fullname>-webhook-service-account": "-webhook-service-account",
}


def table_rows(install_md):
    """Account -> (everywhere cell, driver-namespace cell) of the RBAC table."""
    rows = {}
    with open(install_md, encoding="utf-8") as f:
        for line in f:
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if len(cells) == 4 and cells[0].startswith("`"):
                account = cells[0].split("`")[1]
                if account in ACCOUNTS:
                    # "`name` (driverManaged, with COND)": the account exists under COND only.
                    m = re.search(r"with ([^)]+)\)", cells[0])
                    rows[account] = (cells[1], cells[2], m.group(1) if m else None)
    return rows


def holds(cond, on):
    """COND: "ComputeDomains", or backquoted gates joined by " or "."""
    cond = cond.strip()
    if cond == "ComputeDomains":
        return "ComputeDomains" in on
    gates = re.findall(r"`([^`]+)`", cond)
    if not gates:
        raise ValueError(f"condition {cond!r} names no gate")
    return any(g in on for g in gates)


def verbs_of(text):
    return [v for v in re.split(r",\s*|\s+and\s+", text.strip()) if v]


def cell_rules(cell, on):
    """The (group, resource, verb) triples a cell states under conditions `on`."""
    rules = set()
    if cell.startswith("nothing"):
        return rules
    m = re.match(r"with (.+?) only: (.*)$", cell)
    if m:
        if not holds(m.group(1), on):
            return rules
        cell = m.group(2)
    for segment in cell.split("; "):
        trailing = re.search(r"\s*\((with (.+)|gate on)\)$", segment)
        if trailing:
            if trailing.group(2) and not holds(trailing.group(2), on):
                continue
            segment = segment[:trailing.start()]
        # `resource`, `resource/subresource` or `group.with.dots/resource`.
        m = re.match(r"`(?:([a-z0-9-]+\.[a-z0-9.-]+)/)?([a-z/]+)` (.*)$", segment)
        if not m:
            raise ValueError(f"cannot read {segment!r}")
        group = m.group(1) or ("" if m.group(2) in ("nodes", "pods") else None)
        resource = m.group(2)
        parts = m.group(3).split(", plus ")
        verbs = verbs_of(parts[0])
        for extra in parts[1:]:
            em = re.match(r"(.+?) with (.+)$", extra)
            if not em:
                raise ValueError(f"cannot read {extra!r} in {segment!r}")
            if holds(em.group(2), on):
                verbs += verbs_of(em.group(1))
        for v in verbs:
            rules.add((group, resource, v))
    return rules


def rendered(helm, chart, sets):
    args = [helm, "template", "nvdra", chart, "--namespace", NAMESPACE, "--kube-version", "1.34.0",
            "--set", "gpuResourcesEnabledOverride=true"]
    for s in sets:
        args += ["--set", s]
    out = subprocess.run(args, capture_output=True, text=True, check=True).stdout
    return [d for d in yaml.safe_load_all(out) if d]


def rendered_rules(objects, sa_suffix):
    """(everywhere, driver namespace) rule triples bound to the account."""
    roles = {(o["kind"], o["metadata"].get("namespace", ""), o["metadata"]["name"]): o
             for o in objects if o["kind"] in ("ClusterRole", "Role")}
    everywhere, namespaced = set(), set()
    for b in objects:
        if b["kind"] not in ("ClusterRoleBinding", "RoleBinding"):
            continue
        if not any(s.get("kind") == "ServiceAccount" and s["name"].endswith(sa_suffix) for s in b.get("subjects", [])):
            continue
        ns = b["metadata"].get("namespace", "")
        if b["kind"] == "RoleBinding" and ns != NAMESPACE:
            continue
        key = (b["roleRef"]["kind"], ns if b["roleRef"]["kind"] == "Role" else "", b["roleRef"]["name"])
        target = everywhere if b["kind"] == "ClusterRoleBinding" else namespaced
        for r in roles[key].get("rules", []):
            for g in r.get("apiGroups", []):
                for res in r.get("resources", []):
                    for v in r.get("verbs", []):
                        target.add((g, res, v))
    return everywhere, namespaced


def fill_groups(doc_rules, rendered_set):
    """The table names a group only where it matters; take the rendered one."""
    groups = {(res): g for g, res, _ in rendered_set}
    return {(g if g is not None else groups.get(res, "?"), res, v) for g, res, v in doc_rules}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--helm", required=True)
    ap.add_argument("--source-dir", required=True)
    args = ap.parse_args()
    rows = table_rows(os.path.join(args.source_dir, "docs", "install.md"))
    failures = []
    for account in ACCOUNTS:
        if account not in rows:
            failures.append(f"docs/install.md: the RBAC table has no row for `{account}`")
    chart = os.path.join(args.source_dir, CHART)
    checked = 0
    for name, sets, on in CONFIGS:
        objects = rendered(args.helm, chart, sets)
        for account, suffix in ACCOUNTS.items():
            if account not in rows:
                continue
            got_everywhere, got_ns = rendered_rules(objects, suffix)
            exists = rows[account][2] is None or holds(rows[account][2], on)
            for column, cell, got in (("Everywhere", rows[account][0], got_everywhere),
                                      ("Driver namespace", rows[account][1], got_ns)):
                try:
                    want = fill_groups(cell_rules(cell, on), got) if exists else set()
                except ValueError as e:
                    failures.append(f"docs/install.md: `{account}`, {column}: {e}")
                    continue
                checked += 1
                if want != got:
                    failures.append(f"[{name}] `{account}`, {column}: the docs say more: {sorted(want - got)}; "
                                    f"the chart grants more: {sorted(got - want)}")
    for f in failures:
        print(f)
    print(f"{checked} cells of the RBAC table checked in {len(CONFIGS)} configurations; {len(failures)} failures")
    return 1 if failures or checked == 0 else 0


if __name__ == "__main__":
    sys.exit(main())
