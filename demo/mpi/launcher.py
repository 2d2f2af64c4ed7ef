#!/usr/bin/env python3
"""The launcher of the demo's MPI-style job (demo/specs/05-launcher.yaml).

Stands in for `mpirun nvbandwidth -t multinode_device_to_device_memcpy_read_ce`
of seed 000. It:
  1. lists the worker pods through the API server (its service account's
     token; the MPI operator would hand it a hostfile instead);
  2. fetches each worker's report (demo/mpi/worker.py): the GPUs and IMEX
     channel that container really got from the DRA driver;
  3. reads the ComputeDomain's status.nodes: the IMEX daemons that joined,
     with the IP and index from which each node's daemon writes its IMEX
     peer list (compute-domain-daemon-<index> in /etc/hosts);
  4. prints nvbandwidth's process list and matrix. THE MATRIX IS SIMULATED:
     no CUDA, no copy. A cell holds NVLink 5's nominal one-way figure,
     900 GB/s (1.8 TB/s bidirectional per GPU), when the two GPUs' workers
     each hold an IMEX channel and their nodes' daemons are Ready in the same
     IMEX domain (clique); else 0.00. So the matrix shows what the driver
     set up, not a measured bandwidth.
Exits 1 when a worker lacks its GPUs or channel, or a pair is unreachable.
"""
import json
import os
import ssl
import sys
import urllib.parse
import urllib.request

SA = "/var/run/secrets/kubernetes.io/serviceaccount"
NOMINAL_GBPS = 900.0
TEST = "multinode_device_to_device_memcpy_read_ce"


def api(path):
    host = os.environ["KUBERNETES_SERVICE_HOST"]
    port = os.environ.get("KUBERNETES_SERVICE_PORT", "443")
    if ":" in host:
        host = "[%s]" % host
    with open(os.path.join(SA, "token")) as f:
        token = f.read().strip()
    req = urllib.request.Request("https://%s:%s%s" % (host, port, path),
                                 headers={"Authorization": "Bearer " + token})
    ctx = ssl.create_default_context(cafile=os.path.join(SA, "ca.crt"))
    with urllib.request.urlopen(req, context=ctx, timeout=30) as r:
        return json.load(r)


def main():
    ns = os.environ["NAMESPACE"]
    cd_name = os.environ["COMPUTE_DOMAIN"]
    want = int(os.environ.get("WORKERS", "0"))
    selector = urllib.parse.quote(os.environ["WORKER_SELECTOR"])
    pods = api("/api/v1/namespaces/%s/pods?labelSelector=%s" % (ns, selector))["items"]
    workers = sorted((p for p in pods if p["status"].get("phase") == "Running"), key=lambda p: p["metadata"]["name"])
    if want and len(workers) != want:
        print("launcher: %d of %d workers are running" % (len(workers), want))
        return 1
    reports = []
    for p in workers:
        url = "http://%s:2222/" % p["status"]["podIP"]
        with urllib.request.urlopen(url, timeout=30) as r:
            reports.append(json.load(r))
    cd = api("/apis/resource.nvidia.com/v1beta1/namespaces/%s/computedomains/%s" % (ns, cd_name))
    status = cd.get("status") or {}
    daemons = {n["name"]: n for n in status.get("nodes") or []}

    print("nvbandwidth-like launcher (SIMULATED: no CUDA, no data copied; see the note at the end)")
    print("ComputeDomain: %s/%s, status %s, %d IMEX daemon(s) joined" % (ns, cd_name, status.get("status", "?"), len(daemons)))
    print()
    print("What each worker got from the DRA driver:")
    print("  %-27s %-11s %-5s %-22s %s" % ("WORKER", "NODE", "GPUS", "IMEX CHANNEL", "IMEX DAEMON (index ip clique status)"))
    problems = []
    for r in reports:
        d = daemons.get(r["node"])
        chan = ", ".join("%s %s" % kv for kv in r["imexChannels"].items()) or "none"
        daemon = ("compute-domain-daemon-%04d %s %s %s" % (d.get("index", -1), d["ipAddress"], d["cliqueID"], d.get("status"))
                  if d else "none")
        print("  %-27s %-11s %-5d %-22s %s" % (r["pod"], r["node"], len(r["gpus"]), chan, daemon))
        if r.get("gpuError"):
            problems.append("%s: %s" % (r["pod"], r["gpuError"]))
        if len(r["imexChannels"]) != 1:
            problems.append("%s: %d IMEX channels, want 1" % (r["pod"], len(r["imexChannels"])))
        if not d or d.get("status") != "Ready":
            problems.append("%s: no Ready IMEX daemon on %s in the domain's status" % (r["pod"], r["node"]))
    print()

    procs = []  # (worker report, local index, gpu)
    for r in reports:
        for i, g in enumerate(r["gpus"]):
            procs.append((r, i, g))
    for k, (r, i, g) in enumerate(procs):
        print("Process %d (%s): device %d: %s (%s) %s" % (k, r["pod"], i, g.get("name", "?"), g.get("busId", "?"), g.get("uuid", "")))
    print()

    def reachable(a, b):
        da, db = daemons.get(a["node"]), daemons.get(b["node"])
        return (len(a["imexChannels"]) == 1 and len(b["imexChannels"]) == 1 and da and db
                and da.get("status") == "Ready" and db.get("status") == "Ready" and da["cliqueID"] == db["cliqueID"])

    print("Running %s." % TEST)
    print("memcpy CE GPU(row) -> GPU(column) bandwidth (GB/s)  [SIMULATED: nominal NVLink 5 figure where the driver made the pair reachable]")
    n = len(procs)
    print("      " + "".join("%10d" % c for c in range(n)))
    total = 0.0
    for row in range(n):
        cells = []
        for col in range(n):
            if row == col:
                cells.append("%10s" % "N/A")
                continue
            ok = reachable(procs[row][0], procs[col][0])
            if not ok:
                problems.append("process %d -> %d: not in one IMEX domain with channels" % (row, col))
            value = NOMINAL_GBPS if ok else 0.0
            total += value
            cells.append("%10.2f" % value)
        print("%-6d%s" % (row, "".join(cells)))
    print()
    print("SUM %s %.2f" % (TEST, total))
    print()
    print("NOTE: SIMULATED. No GPU memory was copied and nothing was timed. The processes and their")
    print("devices are what each worker's container holds (nvidia-smi -q, /dev/nvidia-caps-imex-channels);")
    print("a cell is %.2f GB/s (NVLink 5 nominal, one way) when both workers hold an IMEX channel and" % NOMINAL_GBPS)
    print("their nodes' IMEX daemons are Ready in one IMEX domain per the ComputeDomain's status, else 0.00.")
    if problems:
        print()
        print("FAILED:")
        for p in sorted(set(problems))[:20]:
            print("  " + p)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
