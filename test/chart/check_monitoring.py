#!/usr/bin/env python3
"""Checks the chart's alerts and dashboard against the metrics the binaries serve.

Renders the chart with every monitoring object on, takes each PromQL
expression of the PrometheusRule and of the dashboard (panels and template
variables), and checks that every metric it names, and every label it groups
by or selects on, is in the /metrics bodies the cluster tests scraped from
the running binaries (SaveMetricsScrape in test/cluster/test_cluster.h):
gpu-kubelet-plugin, compute-domain-controller, compute-domain-daemon and
webhook. A renamed metric
or label in the code, or a typo in a query, fails here instead of leaving an
alert that can never fire.

  check_monitoring.py --helm HELM --chart DIR --scrapes DIR
"""

import argparse
import json
import os
import re
import subprocess
import sys

import yaml

COMPONENTS = ("gpu-kubelet-plugin", "compute-domain-controller", "compute-domain-daemon", "webhook")
# Labels Prometheus adds to every scraped series (the Prometheus Operator's
# PodMonitor relabeling) or that a histogram carries.
TARGET_LABELS = {"namespace", "pod", "container", "job", "instance", "endpoint", "le"}
METRIC_PREFIXES = ("nvidia_dra_", "nvdra_", "process_")


def served(scrape_dir):
    """{series name: set of label names} over every component's scrape."""
    series = {}
    for component in COMPONENTS:
        path = os.path.join(scrape_dir, component + ".prom")
        if not os.path.isfile(path) or os.path.getsize(path) == 0:
            sys.exit(f"check_monitoring: no scrape of {component} at {path}: the cluster test that saves it "
                     f"did not run (ctest runs them first, as fixtures)")
        with open(path, encoding="utf-8") as f:
            for line in f:
                line = line.strip()
                if line.startswith("# TYPE "):
                    name, kind = line.split()[2:4]
                    names = [name]
                    if kind == "histogram":
                        names = [name + s for s in ("_bucket", "_sum", "_count")]
                    for n in names:
                        series.setdefault(n, set())
                    continue
                if not line or line.startswith("#"):
                    continue
                m = re.match(r"([a-zA-Z_:][a-zA-Z0-9_:]*)(\{([^}]*)\})?\s", line)
                if m:
                    labels = set(re.findall(r'([a-zA-Z_][a-zA-Z0-9_]*)="', m.group(3) or ""))
                    series.setdefault(m.group(1), set()).update(labels)
    return series


def expressions(helm, chart):
    out = subprocess.run(
        [helm, "template", "t", chart, "--namespace", "nv", "--kube-version", "1.37.0",
         "--set", "gpuResourcesEnabledOverride=true", "--set", "webhook.metrics.enabled=true",
         "--set", "computeDomainDaemon.metrics.enabled=true",
         "--set", "monitoring.podMonitor.enabled=true", "--set", "monitoring.prometheusRule.enabled=true",
         "--set", "monitoring.dashboard.enabled=true"],
        capture_output=True, text=True, check=True).stdout
    exprs = []
    for obj in yaml.safe_load_all(out):
        if not obj:
            continue
        if obj["kind"] == "PrometheusRule":
            for group in obj["spec"]["groups"]:
                for rule in group["rules"]:
                    exprs.append((f"alert {rule['alert']}", str(rule["expr"])))
        if obj["kind"] == "ConfigMap" and obj["metadata"]["name"].endswith("-dashboard"):
            for body in obj["data"].values():
                dash = json.loads(body)
                for panel in dash["panels"]:
                    for target in panel.get("targets", []):
                        exprs.append((f"panel {panel['title']!r}", target["expr"]))
                for var in dash.get("templating", {}).get("list", []):
                    if var.get("type") == "query":
                        exprs.append((f"variable {var['name']}", var["query"]))
    return exprs


def check(exprs, series):
    failures = []
    for where, expr in exprs:
        text = re.sub(r'"[^"]*"', '""', expr)  # label values are not names
        names = [t for t in re.findall(r"[a-zA-Z_:][a-zA-Z0-9_:]*", text) if t.startswith(METRIC_PREFIXES)]
        if not names:
            failures.append(f"{where}: names none of our metrics: {expr}")
        for name in names:
            if name not in series:
                failures.append(f"{where}: {name} is served by no binary")
        labels = set()
        for clause in re.findall(r"\b(?:by|without)\s*\(([^)]*)\)", text):
            labels.update(l.strip() for l in clause.split(",") if l.strip())
        for selector in re.findall(r"\{([^}]*)\}", text):
            labels.update(re.findall(r"([a-zA-Z_][a-zA-Z0-9_]*)\s*(?:=~|!=|!~|=)", selector))
        known = set().union(*(series.get(n, set()) for n in names)) | TARGET_LABELS
        for label in sorted(labels - known):
            failures.append(f"{where}: label {label!r} is on none of {sorted(set(names))}")
    return failures


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--helm", required=True)
    parser.add_argument("--chart", required=True)
    parser.add_argument("--scrapes", required=True)
    args = parser.parse_args()
    series = served(args.scrapes)
    exprs = expressions(args.helm, args.chart)
    if len(exprs) < 10:
        sys.exit(f"check_monitoring: only {len(exprs)} expressions rendered")
    failures = check(exprs, series)
    for f in failures:
        print("FAIL", f)
    print(f"{len(exprs)} expressions checked against {len(series)} served series names: "
          f"{len(failures)} failures")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
