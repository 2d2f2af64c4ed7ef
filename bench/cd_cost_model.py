#!/usr/bin/env python3
"""The ComputeDomain workload's cost model (issue 27), fitted from the scale benchmark's runs.

    bench/cd_cost_model.py [build/bench-raw/cd_scale.jsonl] [--fit 4,18,72] [--check 128]

Reads the "cd_scale_run" lines TestComputeDomainScaleBench writes (one per run: requests by client from
the API server's audit log, CPU seconds by program from /proc, stage times; ours and the floor's) and
prints, as Markdown:

  1. per component (ours and Kubernetes'), API requests and CPU seconds per node at each size;
  2. a fit of each component's totals, a + b*N (least squares over the --fit sizes, the median run of a
     size);
  3. this machine's time model: the window (submission to workers Running) is CPU-bound here, so
     T(N) = t0 + CPU(N) / c, with t0 and c fitted over the --fit sizes and CPU(N) = b*N + q*N^2 the CPU of
     every program in the window (least squares): per node, a share of each pod's events reaches every
     node's watchers (the API server filters each event for each of them), and everything queues longer
     on a saturated machine, so the CPU per node grows with N (0.2 s for the kubelets at 4 nodes, 1.6 s at
     72 on 2 cores). Its prediction for the --check size against the measured run, and for 256 and 1,000;
  4. a control plane with the room (cores enough that CPU does not bound it): what the client-side rate
     limits make the paced writers take, T(N) = t_chain + max over the paced clients of
     (requests(N) - burst) / qps, at the control plane's default limits (kube-controller-manager 20/s
     burst 30, kube-scheduler 50/s burst 100; our controller 20/s burst 40) and with them raised to 100.

  5. per stage of a domain's formation (the work a kind of request stands for: claims made, pods
     scheduled, daemon pods made, nodes labelled, clique entries, daemon readiness, prepare, pods on the
     nodes...), the requests per node at each size and their fit a + b*N, and each stage's component,
     whose CPU per node is in 1. (runs that carry requests by kind, "requests_by_kind").

Only the median run of each size and control-plane setting is used; runs with raised control-plane
limits (control_plane_qps != "default") are left out of the fit.
"""
import argparse
import json
import statistics
import sys

# Programs (argv[0]'s base name, /proc) by component; what is not here is "other".
PROGRAMS = {
    "kube-apiserver": "kube-apiserver",
    "etcd": "etcd",
    "kube-controller-manager": "kube-controller-manager",
    "kube-scheduler": "kube-scheduler",
    "simnode": "kubelets and runtime (simnode)",
    "simnode children": "kubelets and runtime (simnode)",
    "container-init": "kubelets and runtime (simnode)",
    "container-init children": "kubelets and runtime (simnode)",
    "compute-domain-controller": "controller",
    "compute-domain-kubelet-plugin": "cd-plugin",
    "compute-domain-daemon": "cd-daemon",
    "compute-domain-daemon children": "cd-daemon",
    "nvidia-imex": "cd-daemon",
    "nvidia-imex-ctl": "cd-daemon",
    "simnode-test-driver": "floor-driver",
}
# Clients (the benchmark's audit groups) whose writes a client-side limit paces: qps, burst at the
# defaults, and whether the "raised" setting raises them (the control plane's own do; ours is ours).
PACED = {
    "kube-controller-manager": (20.0, 30, True),
    "kube-scheduler": (50.0, 100, True),
    "controller": (20.0, 40, False),
}
RAISED_QPS = 100.0
# Stages of a domain's formation by the requests that do them: (client, prefix of "verb resource[/sub]")
# -> stage; the first match wins, "" matches any request of the client. The stage's component is the
# client's.
STAGES = [
    ("kube-controller-manager", "create resourceclaims", "claims made from templates"),
    ("kube-controller-manager", "create pods", "daemon pods made (DaemonSet controller)"),
    ("kube-controller-manager", "", "other control loops"),
    ("kube-scheduler", "", "pods scheduled, claims allocated"),
    ("controller", "patch nodes", "nodes labelled for the domain"),
    ("controller", "update nodes", "nodes labelled for the domain"),
    ("controller", "update computedomaincliques", "clique entries and indexes"),
    ("controller", "patch computedomaincliques", "clique entries and indexes"),  # server-side apply too
    ("controller", "create computedomaincliques", "clique entries and indexes"),
    ("controller", "patch computedomains/status", "domain status"),
    ("controller", "create events", "domain Events"),
    ("controller", "", "domain objects (finalizer, templates, DaemonSet)"),
    ("cd-daemon", "", "daemon joins and says Ready"),
    ("cd-plugin", "", "channel prepared (plugin)"),
    ("kubelet", "", "pods on the nodes (kubelet)"),
    ("bench", "", "the workload's submission (benchmark)"),
]


def load(path):
    runs = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line:
                item = json.loads(line)
                if item.get("bench") == "cd_scale_run":
                    runs.append(item)
    return runs


def median_run(runs):
    """The run whose time to all workers Running is the median of its size's runs."""
    ordered = sorted(runs, key=lambda r: r["running_s"])
    return ordered[(len(ordered) - 1) // 2]


def cpu_by_component(cpu):
    out = {}
    for program, seconds in cpu.items():
        comp = PROGRAMS.get(program, "other")
        out[comp] = out.get(comp, 0.0) + seconds
    return out


def stage_of(client, kind):
    for c, prefix, stage in STAGES:
        if c == client and kind.startswith(prefix):
            return stage
    return f"{client}: other"


def requests_by_stage(run):
    """{(stage, client): requests} of a run; None when it carries no requests by kind."""
    kinds = run.get("requests_by_kind")
    if kinds is None:
        return None
    out = {}
    for client, counts in kinds.items():
        for kind, n in counts.items():
            key = (stage_of(client, kind), client)
            out[key] = out.get(key, 0) + n
    return out


def fit_quadratic_through_zero(xs, ys):
    """Least squares y = b x + q x^2 (nothing at zero nodes)."""
    s11 = sum(x * x for x in xs)
    s12 = sum(x ** 3 for x in xs)
    s22 = sum(x ** 4 for x in xs)
    t1 = sum(x * y for x, y in zip(xs, ys))
    t2 = sum(x * x * y for x, y in zip(xs, ys))
    det = s11 * s22 - s12 * s12
    if det == 0:
        return (t1 / s11 if s11 else 0.0), 0.0
    return (t1 * s22 - t2 * s12) / det, (s11 * t2 - s12 * t1) / det


def fit_line(xs, ys):
    """Least squares y = a + b x."""
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    if sxx == 0:
        return my, 0.0
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx
    return my - b * mx, b


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("path", nargs="?", default="build/bench-raw/cd_scale.jsonl")
    ap.add_argument("--fit", default="4,18,72", help="sizes to fit over (default 4,18,72)")
    ap.add_argument("--check", default="128", help="size to predict and compare (default 128)")
    ap.add_argument("--cores", type=float, default=None, help="this machine's cores (default: from the runs' CPU)")
    args = ap.parse_args()
    fit_sizes = [int(s) for s in args.fit.split(",")]
    check = int(args.check)

    by_size = {}
    for r in load(args.path):
        if r.get("control_plane_qps", "default") == "default":
            by_size.setdefault(r["nodes"], []).append(r)
    missing = [n for n in fit_sizes if n not in by_size]
    if missing:
        sys.exit(f"cd_cost_model: no run of {missing} nodes in {args.path} (sizes there: {sorted(by_size)})")
    chosen = {n: median_run(rs) for n, rs in by_size.items()}
    sizes = sorted(chosen)

    # 1. Per component, per node.
    comps_req = sorted({c for r in chosen.values() for c in r["requests"]})
    comps_cpu = sorted({c for r in chosen.values() for c in cpu_by_component(r["cpu_s"])})
    print("### Requests per node in the window, by client (audit log; the median run of each size)\n")
    print("| client | " + " | ".join(f"{n} nodes" for n in sizes) + " |")
    print("|---|" + "---|" * len(sizes))
    for c in comps_req:
        print(f"| {c} | " + " | ".join(f"{chosen[n]['requests'].get(c, 0) / n:.2f}" for n in sizes) + " |")
    print("\n### CPU seconds per node in the window, by component (/proc)\n")
    print("| component | " + " | ".join(f"{n} nodes" for n in sizes) + " |")
    print("|---|" + "---|" * len(sizes))
    for c in comps_cpu:
        print(f"| {c} | " + " | ".join(f"{cpu_by_component(chosen[n]['cpu_s']).get(c, 0.0) / n:.3f}"
                                         for n in sizes) + " |")
    print("| window (s), workers Running | " + " | ".join(f"{chosen[n]['running_s']:.2f}" for n in sizes) + " |")
    floor = [n for n in sizes if "floor" in chosen[n]]
    if floor:
        print("| floor: workers Running (s) | " + " | ".join(
            f"{chosen[n]['floor']['running_s']:.2f}" if n in floor else "-" for n in sizes) + " |")

    # 2. Fits of totals over the fit sizes.
    xs = fit_sizes
    req_fit = {c: fit_line(xs, [chosen[n]["requests"].get(c, 0) for n in xs]) for c in comps_req}
    cpu_total = {n: sum(chosen[n]["cpu_s"].values()) for n in sizes}
    cpu_fit = fit_quadratic_through_zero(xs, [cpu_total[n] for n in xs])
    print(f"\n### Fits over {xs} nodes (totals in the window, a + b*N)\n")
    print("| what | a | b (per node) |")
    print("|---|---|---|")
    for c in comps_req:
        a, b = req_fit[c]
        print(f"| requests, {c} | {a:.1f} | {b:.2f} |")
    print(f"\nCPU seconds of all programs in the window: CPU(N) = {cpu_fit[0]:.3f} N + {cpu_fit[1]:.5f} N^2")

    # 3. This machine: T = t0 + CPU / c.
    t_fit = fit_line([cpu_total[n] for n in xs], [chosen[n]["running_s"] for n in xs])
    t0, per_cpu = t_fit
    cores = 1.0 / per_cpu if per_cpu > 0 else float("inf")
    print(f"\n### This machine (CPU-bound): T(N) = {t0:.2f} s + CPU(N) / {cores:.2f} cores\n")
    print("| nodes | CPU(N) predicted, s | T predicted, s | T measured, s | error |")
    print("|---|---|---|---|---|")
    for n in sorted(set(xs + [check, 256, 1000])):
        cpu = cpu_fit[0] * n + cpu_fit[1] * n * n
        t = t0 + per_cpu * cpu
        measured = chosen[n]["running_s"] if n in chosen else None
        err = f"{(t - measured) / measured * 100:+.0f} %" if measured else "-"
        shown = f"{measured:.2f}" if measured is not None else "-"
        print(f"| {n} | {cpu:.1f} | {t:.1f} | {shown} | {err} |")

    # 4. A control plane with the room: the paced clients' budgets.
    t_chain = min(chosen[n]["running_s"] for n in xs)  # the smallest size: latency, no pacing
    print(f"\n### A control plane with the room: T(N) = {t_chain:.2f} s (the {min(xs)}-node chain) + the slowest "
          "paced client's (requests(N) - burst) / qps\n")
    print("| nodes | limits | " + " | ".join(PACED) + " | T predicted, s |")
    print("|---|---|" + "---|" * len(PACED) + "---|")
    for n in (check, 256, 1000):
        for label in ("default", "raised to 100/s"):
            waits = []
            for c, (qps, burst, raised) in PACED.items():
                if label != "default" and raised:
                    qps, burst = RAISED_QPS, max(burst, 200)
                a, b = req_fit.get(c, (0.0, 0.0))
                waits.append(max(0.0, (a + b * n - burst) / qps))
            print(f"| {n} | {label} | " + " | ".join(f"{w:.1f} s" for w in waits) +
                  f" | {t_chain + max(waits):.1f} |")

    # 5. Per stage.
    staged = {n: requests_by_stage(chosen[n]) for n in sizes}
    if any(staged[n] is None for n in xs):
        print("\n(No requests by kind in these runs: the per-stage table needs a newer benchmark run.)")
        return
    keys = sorted({k for n in sizes if staged[n] for k in staged[n]}, key=lambda k: (k[1], k[0]))
    print(f"\n### Requests per node by stage (the kind of request that does it) and its fit over {xs} nodes\n")
    print("| stage | component | " + " | ".join(f"{n} nodes" for n in sizes) + " | a | b (per node) |")
    print("|---|---|" + "---|" * len(sizes) + "---|---|")
    for key in keys:
        a, b = fit_line(xs, [staged[n].get(key, 0) for n in xs])
        cells = " | ".join(f"{staged[n].get(key, 0) / n:.2f}" if staged[n] is not None else "-" for n in sizes)
        print(f"| {key[0]} | {key[1]} | {cells} | {a:.1f} | {b:.2f} |")


if __name__ == "__main__":
    main()
