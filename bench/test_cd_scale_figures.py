#!/usr/bin/env python3
"""Unit tests of the ComputeDomain scale figures' tooling: collect.py's cd_scale results (the floor as the
peer of ours, run lines skipped, medians) and cd_cost_model.py's fits and predictions, on runs made up here
whose costs follow known lines, so every expected figure is computed by hand."""
import json
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import collect  # noqa: E402
import cd_cost_model  # noqa: E402


def figure(nodes, name, value, unit="s"):
    return {"bench": "cd_scale", "nodes": nodes, "name": name, "value": value, "unit": unit}


def run(nodes, qps="default", running=None):
    """A run whose costs follow known curves in N: requests kcm 4N+10, scheduler 2N, controller 3N+20,
    kubelet 20N; CPU 0.5N + 0.001N^2 (kube-apiserver 0.3N + 0.001N^2, simnode 0.2N); time 1 + CPU/2
    unless given."""
    cpu = {"kube-apiserver": 0.3 * nodes + 0.001 * nodes * nodes, "simnode": 0.2 * nodes}
    return {"bench": "cd_scale_run", "nodes": nodes, "control_plane_qps": qps,
            "running_s": running if running is not None else 1 + (0.5 * nodes + 0.001 * nodes * nodes) / 2,
            "window_s": 0, "requests": {"kube-controller-manager": 4 * nodes + 10, "kube-scheduler": 2 * nodes,
                                        "controller": 3 * nodes + 20, "kubelet": 20 * nodes},
            "requests_by_kind": {"kube-controller-manager": {"create resourceclaims": 2 * nodes,
                                                             "create pods": 2 * nodes + 10},
                                 "controller": {"patch nodes": nodes, "patch computedomains/status": 20,
                                                "update computedomaincliques": 2 * nodes}},
            "cpu_s": cpu, "stages": {}, "floor": {"running_s": 1.0, "requests": {}, "cpu_s": {}, "stages": {}}}


class CollectTest(unittest.TestCase):
    def collect(self, lines):
        with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as f:
            for line in lines:
                f.write(json.dumps(line) + "\n")
        results = []
        collect.cd_scale(f.name, results)
        os.unlink(f.name)
        return {r["name"]: r for r in results}

    def test_floor_is_the_peer_of_ours_and_medians_are_taken(self):
        got = self.collect([
            figure(18, "submit_to_all_running_s", 5.0), figure(18, "submit_to_all_running_s", 7.0),
            figure(18, "submit_to_all_running_s", 6.0), figure(18, "floor_submit_to_all_running_s", 4.0),
            figure(18, "floor_submit_to_all_running_s", 3.0), figure(18, "floor_submit_to_all_running_s", 5.0),
            figure(18, "cp_qps_100.submit_to_all_running_s", 4.5),
            figure(18, "cp_qps_100.floor_submit_to_all_running_s", 3.5),
            run(18),
        ])
        ours = got["cd_scale.18.submit_to_all_running_s"]
        self.assertEqual(ours["value"], 6.0)
        self.assertEqual(ours["peer_value"], 4.0)
        self.assertIn("floor", ours["peer"])
        raised = got["cd_scale.18.cp_qps_100.submit_to_all_running_s"]
        self.assertEqual(raised["peer_value"], 3.5)
        self.assertNotIn("peer", got["cd_scale.18.floor_submit_to_all_running_s"])
        self.assertEqual(len(got), 4, "the run line is not a figure")

    def test_no_peer_without_a_floor(self):
        got = self.collect([figure(4, "submit_to_all_running_s", 1.0)])
        self.assertNotIn("peer", got["cd_scale.4.submit_to_all_running_s"])


class CostModelTest(unittest.TestCase):
    def model(self, runs, *args):
        with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as f:
            for r in runs:
                f.write(json.dumps(r) + "\n")
        try:
            return subprocess.run([sys.executable, os.path.join(HERE, "cd_cost_model.py"), f.name, *args],
                                  check=True, capture_output=True, text=True).stdout
        finally:
            os.unlink(f.name)

    def test_fit_quadratic_through_zero(self):
        b, q = cd_cost_model.fit_quadratic_through_zero([4, 18, 72], [0.5 * n + 0.001 * n * n for n in (4, 18, 72)])
        self.assertAlmostEqual(b, 0.5)
        self.assertAlmostEqual(q, 0.001)

    def test_fit_line(self):
        a, b = cd_cost_model.fit_line([4, 18, 72], [4 * 3 + 1, 18 * 3 + 1, 72 * 3 + 1])
        self.assertAlmostEqual(a, 1.0)
        self.assertAlmostEqual(b, 3.0)

    def test_median_run_of_a_size(self):
        runs = [run(18, running=r) for r in (9.0, 5.0, 7.0)]
        self.assertEqual(cd_cost_model.median_run(runs)["running_s"], 7.0)

    def test_predicts_a_run_on_its_curves_exactly_and_leaves_raised_limits_out(self):
        # T = 1 + CPU/2 with CPU = 0.5N + 0.001N^2: at 128, CPU 80.384, T 41.192. The raised-limit run
        # would spoil the fit.
        out = self.model([run(4), run(18), run(72), run(128), run(18, qps="100", running=99.0)])
        self.assertIn("CPU(N) = 0.500 N + 0.00100 N^2", out)
        self.assertIn("T(N) = 1.00 s + CPU(N) / 2.00 cores", out)
        self.assertIn("| 128 | 80.4 | 41.2 | 41.19 | +0 % |", out)
        self.assertIn("| 1000 | 1500.0 | 751.0 | - | - |", out)
        self.assertIn("| requests, kube-controller-manager | 10.0 | 4.00 |", out)
        # Per node at 4 nodes: kubelet 20, controller (3*4+20)/4 = 8; CPU kube-apiserver (1.2+0.016)/4.
        self.assertIn("| kubelet | 20.00 | 20.00 | 20.00 | 20.00 |", out)
        self.assertIn("| controller | 8.00 |", out)
        self.assertIn("| kube-apiserver | 0.304 |", out)
        # The room: at 256 nodes, defaults: kcm (4*256+10-30)/20 = 50.2 s, the slowest; scheduler
        # (512-100)/50 = 8.2 s; ours (3*256+20-40)/20 = 37.4 s; chain 2.008 s (the 4-node run).
        self.assertIn("| 256 | default | 50.2 s | 8.2 s | 37.4 s | 52.2 |", out)
        # Raised: kcm (1034-200)/100 = 8.3 s, scheduler (512-200)/100 = 3.1 s, ours still 20/s: 37.4 s.
        self.assertIn("| 256 | raised to 100/s | 8.3 s | 3.1 s | 37.4 s | 39.4 |", out)

    def test_requests_by_stage_per_node_and_their_fit(self):
        out = self.model([run(4), run(18), run(72)])
        # Claims 2N: 2 per node at every size, a=0 b=2; the DaemonSet's pods 2N+10: 4.5 per node at 4.
        self.assertIn("| claims made from templates | kube-controller-manager | 2.00 | 2.00 | 2.00 | 0.0 | 2.00 |", out)
        self.assertIn("| daemon pods made (DaemonSet controller) | kube-controller-manager | 4.50 |", out)
        self.assertIn("| domain status | controller | 5.00 | 1.11 | 0.28 | 20.0 | 0.00 |", out)
        self.assertIn("| clique entries and indexes | controller | 2.00 |", out)
        self.assertIn("| nodes labelled for the domain | controller | 1.00 |", out)

    def test_no_stage_table_for_runs_without_requests_by_kind(self):
        runs = [run(4), run(18), run(72)]
        for r in runs:
            del r["requests_by_kind"]
        self.assertIn("needs a newer benchmark run", self.model(runs))

    def test_refuses_a_fit_without_its_sizes(self):
        with self.assertRaises(subprocess.CalledProcessError) as e:
            self.model([run(4), run(18)])
        self.assertIn("no run of [72] nodes", e.exception.stderr)


if __name__ == "__main__":
    unittest.main()
