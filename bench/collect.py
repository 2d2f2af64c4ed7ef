#!/usr/bin/env python3
"""Collects raw benchmark output into build/bench-results.json and prints a table.

Inputs (in the raw directory given as argv[1]):
  <name>_bench.json          Google Benchmark JSON (aggregates: the median is used)
  control_plane_start.txt    one start-up time in seconds per line
  informer.json              bench/informer/run: our informer and client-go's
  gpu_plugin_direct.json     build/bench/plugin-prepare-bench: the GPU plugin over its socket
  gpu_sharing_time_sliced.json  plugin-prepare-bench with a time-sliced claim (gpu_sharing.*)
  gpu_dynamic_mig.json       plugin-prepare-bench with a dynamic MIG device (gpu_mig.dynamic_*)
  gpu_fabric.json            plugin-prepare-bench --fabric: a 4-GPU Fabric Manager partition (gpu_fabric.*)
  gpu_vfio.json              plugin-prepare-bench --vfio: a passed-through GPU, and the republished slice
                             seen through a watch (gpu_vfio.*)
  gpu_sharing_mps.jsonl      test/simnode TestGPUSharingMPS/gpu-test-mps (gpu_sharing.mps_*)
  gpu_plugin_kubelet.json    test/simnode TestGPUPluginKubeletPrepareLatency: through the kubelet
  gpu_health.json            test/simnode TestGPUDeviceHealthLatency: XID to the device taint in the slice and to
                             the pod's status Unhealthy, reset annotation to both cleared (gpu_health.*)
  cd_e2e.jsonl               test/simnode TestComputeDomainOnSimulatedGB200Nodes: daemon start to Ready
                             entry, Ready entry to the waiting channel claim prepared (JSON lines)
  cd_scale.jsonl             test/simnode TestComputeDomainScaleBench: a ComputeDomain workload on N
                             simulated nodes, submission to prepared/Running/Ready and API requests
                             (JSON lines {"bench":"cd_scale","nodes","name","value","unit"})
  cd_many.jsonl              test/simnode TestComputeDomainManyBench: many ComputeDomains, 8 of 9 nodes at once
                             and 100 on 18 nodes one after another (cd_many.<mode>.<name>; JSON lines
                             {"bench":"cd_many","mode","shape","name","value","unit"})

A Google Benchmark may name a peer for a figure with a user counter called
"peer_<counter>" and the label "peer=<who>"; it is copied into peer fields.
"""
import json
import os
import statistics
import sys

TIME_UNITS = {"ns": 1.0, "us": 1e3, "ms": 1e6, "s": 1e9}


def google_benchmark(path, results):
    with open(path) as f:
        data = json.load(f)
    for b in data.get("benchmarks", []):
        if b.get("aggregate_name", "median") != "median":
            continue
        name = b.get("run_name", b["name"]).replace("/", "_")
        ns = b["real_time"] * TIME_UNITS[b.get("time_unit", "ns")]
        entry = {"name": name, "value": round(ns, 1), "unit": "ns", "better": "lower"}
        label = b.get("label", "")
        if label.startswith("peer="):
            entry["peer"] = label[len("peer="):]
            if "peer_ns" in b:
                entry["peer_value"] = b["peer_ns"]
        results.append(entry)
        for key, value in b.items():
            # Counters that the benchmark reports itself (bytes, RSS, ...).
            if key.startswith("rss_") or key.endswith("_bytes"):
                results.append({"name": f"{name}_{key}", "value": value, "unit": "bytes", "better": "lower"})


def simnode_scale(path, results):
    """test/simnode TestScaleFootprint (simnode_scale.json): per node count N,
    start-up to all Ready, PSS over the nodes' processes, idle CPU per node."""
    with open(path) as f:
        data = json.load(f)
    for run in data.get("runs", []):
        n = run["nodes"]
        for key, name, unit in (("startup_s", "startup_s", "s"), ("pss_total_mib", "pss_total_mib", "MiB"),
                                ("pss_per_node_mib", "pss_per_node_mib", "MiB"),
                                ("cpu_per_node_pct", "idle_cpu_per_node_pct", "%")):
            results.append({"name": f"simnode.{name}_{n}", "value": round(run[key], 3), "unit": unit,
                            "better": "lower"})


def informer(path, results):
    """Initial sync, RSS and CPU per 1,000 updates: ours, with client-go as the peer."""
    with open(path) as f:
        data = json.load(f)
    size = f"{data['slices'] // 1000}k_slices" if data["slices"] >= 1000 else f"{data['slices']}_slices"
    figures = [
        (f"informer_initial_sync_{size}", "synced", "sync_seconds", "s"),
        (f"informer_rss_{size}", "synced", "rss_bytes", "bytes"),
        # Again after the updates: Go's RSS right after sync depends on where
        # its collector happens to be; this one is a steady state.
        (f"informer_rss_{size}_after_updates", "done", "rss_bytes", "bytes"),
        ("informer_cpu_per_1000_updates", "done", "cpu_seconds_per_1000_updates", "s"),
    ]
    ours, peer = data.get("nvdra"), data.get("client-go")
    for name, event, key, unit in figures:
        if ours:
            entry = {"name": name, "value": round(ours[event][key], 4), "unit": unit, "better": "lower"}
            if peer:
                entry["peer"] = "client-go"
                entry["peer_value"] = round(peer[event][key], 4)
            results.append(entry)
        elif peer:
            # Our informer is not built yet: client-go's figure alone, named as such.
            results.append({"name": name + "_client_go", "value": round(peer[event][key], 4),
                            "unit": unit, "better": "lower"})


def prepare_latency(data, results, name):
    """p50 and p99 of prepare and unprepare from plugin-prepare-bench's JSON; name(call, p) names them."""
    for call in ("prepare", "unprepare"):
        for p in ("p50", "p99"):
            results.append({"name": name(call, p), "value": data[call][f"{p}_ms"], "unit": "ms", "better": "lower"})


def gpu_sharing_time_sliced(path, results):
    """Prepare/unprepare latency of a time-sliced GPU over the plugin's socket."""
    with open(path) as f:
        prepare_latency(json.load(f), results, lambda call, p: f"gpu_sharing.time_sliced_{call}_{p}_ms")


def gpu_fabric(path, results):
    """Prepare/unprepare latency of a 4-GPU Fabric Manager partition claim over the plugin's socket."""
    with open(path) as f:
        prepare_latency(json.load(f), results, lambda call, p: f"gpu_fabric.partition4_{call}_{p}_ms")


def gpu_plugin_direct(path, results):
    """Prepare/unprepare latency over the plugin's socket and the plugin's memory (MiB)."""
    with open(path) as f:
        data = json.load(f)
    prepare_latency(data, results, lambda call, p: f"gpu_plugin.{call}_direct_{p}_ms")
    by_label = {m["label"]: m for m in data["memory"]}
    idle, warm, end = by_label.get("idle"), by_label.get("warm"), by_label.get("end")
    cycles = data["cycles"]
    mib = lambda kib: round(kib / 1024.0, 2)
    for key, name in (("vmrss_kib", "rss"), ("rss_anon_kib", "anon"), ("pss_kib", "pss")):
        if idle and key in idle:
            results.append({"name": f"gpu_plugin.{name}_idle_mib", "value": mib(idle[key]),
                            "unit": "MiB", "better": "lower"})
        if end and key in end:
            results.append({"name": f"gpu_plugin.{name}_after_{cycles}_cycles_mib", "value": mib(end[key]),
                            "unit": "MiB", "better": "lower"})
        # Growth over the timed cycles, from the first (warm-up) cycle on:
        # what a leak would show.
        if warm and end and key in warm and key in end:
            results.append({"name": f"gpu_plugin.{name}_growth_{cycles}_cycles_mib",
                            "value": mib(end[key] - warm[key]), "unit": "MiB", "better": "lower"})


def gpu_plugin_kubelet(path, results):
    """Latency of the plugin's calls as the kubelet measured them, per pod."""
    with open(path) as f:
        data = json.load(f)
    for key, name in (("grpc_prepare", "prepare_kubelet"), ("grpc_unprepare", "unprepare_kubelet"),
                      ("manager_prepare", "prepare_kubelet_manager"),
                      ("manager_unprepare", "unprepare_kubelet_manager")):
        for p in ("p50", "p99"):
            results.append({"name": f"gpu_plugin.{name}_{p}_ms", "value": data[key][f"{p}_ms"],
                            "unit": "ms", "better": "lower"})


def gpu_health(path, results):
    """NVMLDeviceHealthCheck latency on a simulated node: from an injected XID to the taint in the slice and to
    the pod's allocatedResourcesStatus Unhealthy, and from the reset annotation to both cleared."""
    with open(path) as f:
        data = json.load(f)
    for key in ("xid_to_slice_taint", "xid_to_pod_unhealthy", "reset_to_slice_cleared", "reset_to_pod_healthy"):
        for p in ("p50", "p99"):
            results.append({"name": f"gpu_health.{key}_{p}_ms", "value": data[key][f"{p}_ms"], "unit": "ms",
                            "better": "lower"})


def cd_e2e(path, results):
    """test/simnode TestComputeDomainOnSimulatedGB200Nodes (SIMNODE_CD_BENCH_OUT): one JSON line per
    figure and node ({"bench", "node", "ms"}); the median over the nodes, and the maximum for the
    waiting channel claim."""
    figures = {}
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line:
                item = json.loads(line)
                figures.setdefault(item["bench"], []).append(item["ms"])
    for name, values in sorted(figures.items()):
        short = name[len("cd_"):] if name.startswith("cd_") else name
        results.append({"name": f"cd.{short}_p50_ms", "value": round(statistics.median(values), 2),
                        "unit": "ms", "better": "lower"})
        if name == "cd_ready_entry_to_channel_prepared":
            results.append({"name": f"cd.{short}_max_ms", "value": round(max(values), 2),
                            "unit": "ms", "better": "lower"})


def gpu_dynamic_mig(path, results):
    """Prepare/unprepare latency of a dynamic MIG device over the plugin's socket."""
    with open(path) as f:
        prepare_latency(json.load(f), results, lambda call, p: f"gpu_mig.dynamic_{call}_{p}_ms")


def gpu_vfio(path, results):
    """Prepare/unprepare latency of a VFIO device over the plugin's socket, and from the call to the
    republished slice (its full GPU gone, back) as a watch of the API server sees it."""
    with open(path) as f:
        data = json.load(f)
    prepare_latency(data, results, lambda call, p: f"gpu_vfio.{call}_{p}_ms")
    for key, label in (("republish_withdrawn", "prepare_to_slice_withdrawn"),
                       ("republish_restored", "unprepare_to_slice_restored")):
        for p in ("p50", "p99"):
            results.append({"name": f"gpu_vfio.{label}_{p}_ms", "value": data[key][f"{p}_ms"], "unit": "ms",
                            "better": "lower"})


def gpu_sharing_mps(path, results):
    """test/simnode TestGPUSharingMPS/gpu-test-mps (SIMNODE_MPS_BENCH_OUT): one JSON line per figure."""
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line:
                item = json.loads(line)
                results.append({"name": item["name"], "value": round(item["value"], 1), "unit": item["unit"],
                                "better": "lower"})


def figure_lines(path, bench):
    """The JSON lines of a benchmark's figures file whose "bench" is `bench`."""
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line:
                item = json.loads(line)
                if item.get("bench") == bench:
                    yield item


def cd_scale(path, results):
    """test/simnode TestComputeDomainScaleBench (SIMNODE_CD_SCALE_OUT): one JSON line per figure and node
    count; cd_scale.<N>.<name>, the median where a size ran more than once. The floor's time to all workers
    Running (the same workload shape with the test driver, same nodes, same run) is the peer of ours. Lines
    of "bench": "cd_scale_run" (a whole run, for bench/cd_cost_model.py) are not figures."""
    figures, units = {}, {}
    for item in figure_lines(path, "cd_scale"):
        key = (item["nodes"], item["name"])
        figures.setdefault(key, []).append(item["value"])
        units[key] = item["unit"]
    medians = {key: round(statistics.median(values), 3) for key, values in figures.items()}
    for (nodes, name), value in sorted(medians.items()):
        entry = {"name": f"cd_scale.{nodes}.{name}", "value": value, "unit": units[(nodes, name)], "better": "lower"}
        prefix, _, base = name.rpartition(".")
        floor = (nodes, (prefix + "." if prefix else "") + "floor_" + base)
        if base == "submit_to_all_running_s" and floor in medians:
            entry["peer"], entry["peer_value"] = "floor (test driver, no IMEX)", medians[floor]
        results.append(entry)


def cd_many(path, results):
    """test/simnode TestComputeDomainManyBench (SIMNODE_CD_MANY_OUT): one JSON line per figure and mode
    ("concurrent": domains submitted at once, "serial": one after another); cd_many.<mode>.<name>, or
    cd_many.<mode>.<shape>.<name> for a shape other than scripts/bench's (8x9, 100x18), the median where a
    figure came more than once."""
    default_shapes = {"concurrent": "8x9", "serial": "100x18"}
    figures, units = {}, {}
    for item in figure_lines(path, "cd_many"):
        mode, shape = item["mode"], item.get("shape", "")
        prefix = f"cd_many.{mode}." if shape in ("", default_shapes.get(mode)) else f"cd_many.{mode}.{shape}."
        key = prefix + item["name"]
        figures.setdefault(key, []).append(item["value"])
        units[key] = item["unit"]
    for name, values in sorted(figures.items()):
        results.append({"name": name, "value": round(statistics.median(values), 4), "unit": units[name],
                        "better": "lower"})


def main():
    raw, out = sys.argv[1], sys.argv[2]
    results = []
    for entry in sorted(os.listdir(raw)):
        path = os.path.join(raw, entry)
        if entry.endswith("_bench.json"):
            google_benchmark(path, results)
    if os.path.exists(os.path.join(raw, "informer.json")):
        informer(os.path.join(raw, "informer.json"), results)
    for entry, collect in (("gpu_plugin_direct.json", gpu_plugin_direct),
                           ("gpu_sharing_time_sliced.json", gpu_sharing_time_sliced),
                           ("gpu_dynamic_mig.json", gpu_dynamic_mig),
                           ("gpu_vfio.json", gpu_vfio),
                           ("gpu_fabric.json", gpu_fabric),
                           ("gpu_plugin_kubelet.json", gpu_plugin_kubelet),
                           ("gpu_health.json", gpu_health)):
        if os.path.exists(os.path.join(raw, entry)):
            collect(os.path.join(raw, entry), results)
    if os.path.exists(os.path.join(raw, "gpu_sharing_mps.jsonl")):
        gpu_sharing_mps(os.path.join(raw, "gpu_sharing_mps.jsonl"), results)
    if os.path.exists(os.path.join(raw, "cd_e2e.jsonl")):
        cd_e2e(os.path.join(raw, "cd_e2e.jsonl"), results)
    if os.path.exists(os.path.join(raw, "cd_scale.jsonl")):
        cd_scale(os.path.join(raw, "cd_scale.jsonl"), results)
    if os.path.exists(os.path.join(raw, "cd_many.jsonl")):
        cd_many(os.path.join(raw, "cd_many.jsonl"), results)
    if os.path.exists(os.path.join(raw, "simnode_scale.json")):
        simnode_scale(os.path.join(raw, "simnode_scale.json"), results)
    start = os.path.join(raw, "control_plane_start.txt")
    if os.path.exists(start):
        with open(start) as f:
            times = [float(line) for line in f if line.strip()]
        if times:
            results.append({"name": "control_plane_start", "value": round(statistics.median(times), 2),
                            "unit": "s", "better": "lower"})
    with open(out, "w") as f:
        json.dump({"results": results}, f, indent=2)
        f.write("\n")
    width = max([len(r["name"]) for r in results] + [4])
    print(f"{'name':<{width}}  {'value':>14}  unit   better  peer")
    for r in results:
        peer = f"{r['peer']}={r['peer_value']}" if "peer" in r and "peer_value" in r else ""
        print(f"{r['name']:<{width}}  {r['value']:>14}  {r['unit']:<5}  {r['better']:<6}  {peer}")
    print(f"wrote {out} ({len(results)} results)")


if __name__ == "__main__":
    main()
