#!/usr/bin/env python3
"""A worker of the demo's MPI-style job (demo/specs/04-workers.yaml).

Records what this container really got from the DRA driver -- the GPUs that
nvidia-smi sees (it lists only GPUs whose /dev/nvidia<minor> the container
holds), the IMEX channel device nodes, the CDI-injected environment -- into
/report/report.json, then serves that file on $POD_IP:2222 for the launcher
(as an MPI worker's sshd serves mpirun). It runs until the pod is deleted.
"""
import http.server
import json
import os
import signal
import stat
import subprocess
import sys

PORT = 2222
CHANNEL_DIR = "/dev/nvidia-caps-imex-channels"


def gpus():
    """The GPUs nvidia-smi -q reports: bus id, name, uuid, minor."""
    try:
        out = subprocess.run(["nvidia-smi", "-q"], capture_output=True, text=True, timeout=30)
    except FileNotFoundError:
        return [], "no nvidia-smi in the container (no GPU claim prepared?)"
    if out.returncode != 0:
        return [], "nvidia-smi -q: exit %d: %s" % (out.returncode, (out.stdout + out.stderr).strip())
    found, current = [], None
    for line in out.stdout.splitlines():
        if line.startswith("GPU "):
            current = {"busId": line[4:].strip()}
            found.append(current)
        elif current is not None and ":" in line:
            key, value = (s.strip() for s in line.split(":", 1))
            if key in ("Product Name", "GPU UUID", "Minor Number"):
                current[{"Product Name": "name", "GPU UUID": "uuid", "Minor Number": "minor"}[key]] = value
    return found, None


def device(path):
    """A device node as 'c 236:0'. On simulated nodes the runtime binds a
    placeholder file where a real one makes the node from the CDI spec."""
    st = os.stat(path)
    if stat.S_ISCHR(st.st_mode):
        return "c %d:%d" % (os.major(st.st_rdev), os.minor(st.st_rdev))
    return "(simulated)"


def channels():
    if not os.path.isdir(CHANNEL_DIR):
        return {}
    return {name: device(os.path.join(CHANNEL_DIR, name)) for name in sorted(os.listdir(CHANNEL_DIR))}


def main():
    found, gpu_error = gpus()
    report = {
        "pod": os.environ.get("POD_NAME", ""),
        "node": os.environ.get("NODE_NAME", ""),
        "podIP": os.environ.get("POD_IP", ""),
        "gpus": found,
        "gpuError": gpu_error,
        "gpuDeviceNodes": sorted(n for n in os.listdir("/dev") if n.startswith("nvidia") and n[6:].isdigit()),
        "imexChannels": channels(),
        "env": {k: v for k, v in os.environ.items() if k.startswith("NVIDIA_")},
    }
    print(json.dumps(report, indent=1), flush=True)
    tmp = "/report/report.json.tmp"
    with open(tmp, "w") as f:
        json.dump(report, f)
    os.rename(tmp, "/report/report.json")  # the readiness probe sees it whole

    body = json.dumps(report).encode()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, fmt, *args):
            print("served the report to %s" % self.client_address[0], flush=True)

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    http.server.HTTPServer((report["podIP"] or "0.0.0.0", PORT), Handler).serve_forever()


if __name__ == "__main__":
    main()
