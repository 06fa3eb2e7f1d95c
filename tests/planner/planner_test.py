#!/usr/bin/python3
"""tools/planner/search.py and autoscaler.py: the recommendation meets the SLOs and is the smallest
that does, its neighbours are shown; the router's metrics become a window of traffic; hysteresis;
the command line's errors (ctest planner_test, label unit)."""

import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
PLANNER = os.path.join(HERE, "..", "..", "tools", "planner")
sys.path.insert(0, PLANNER)

from autoscaler import Histogram, Hysteresis, Window, feedback, parse_prometheus  # noqa: E402
from errors import PlanError  # noqa: E402
from profiles import Profile  # noqa: E402
from search import Search, Slo  # noqa: E402
from simulator import Cluster  # noqa: E402
from traces import synthetic  # noqa: E402

PROFILE = {"schema": "yoco-profile/1", "device": "cpu", "kv_bytes_per_token": 1000, "state_bytes": 5000,
           "prefill": [{"tokens": 100, "seconds": 0.05}, {"tokens": 1000, "seconds": 0.5}],
           "decode": {"base_seconds": 0.010, "per_sequence_seconds": 0.002, "per_context_token_seconds": 0.0},
           "transfer": {"latency_seconds": 0.001, "bytes_per_second": 1e8}}


class Planner(unittest.TestCase):
    def test_recommendation_is_the_smallest_that_meets_the_slos(self):
        # 20 req/s of 200-token prompts: 2 s of prefill a second, so at least 3 prefill workers.
        reqs = synthetic(400, 20.0, (200, 200), (20, 20), seed=4)
        slo = Slo(0.5, 0.05)
        s = Search(Profile(PROFILE), Cluster(max_active=1), reqs, slo, 8, 8)
        out = s.plan()
        rec = out["recommended"]
        self.assertTrue(rec["meets_slo"])
        self.assertGreaterEqual(rec["prefill"], 3)
        total = rec["prefill"] + rec["decode"]
        for p in range(1, 9):  # nothing smaller works
            for d in range(1, 9):
                if p + d < total:
                    self.assertFalse(s.ok(p, d), (p, d))
        self.assertTrue(out["neighbours"])
        below = [n for n in out["neighbours"] if n["prefill"] + n["decode"] < total]
        self.assertTrue(below and not any(n["meets_slo"] for n in below))

    def test_impossible_slo_is_an_error(self):
        reqs = synthetic(20, 1.0, (200, 200), (5, 5), seed=1)
        with self.assertRaises(PlanError) as e:
            Search(Profile(PROFILE), Cluster(), reqs, Slo(0.01, 1.0), 4, 4).plan()
        self.assertIn("TTFT", str(e.exception))


METRICS_A = """# HELP yoco_request_prompt_tokens x
# TYPE yoco_request_prompt_tokens histogram
yoco_request_prompt_tokens_bucket{le="64"} 0
yoco_request_prompt_tokens_bucket{le="256"} 10
yoco_request_prompt_tokens_bucket{le="+Inf"} 10
yoco_request_prompt_tokens_sum 1600
yoco_request_prompt_tokens_count 10
yoco_request_generation_tokens_bucket{le="16"} 10
yoco_request_generation_tokens_bucket{le="+Inf"} 10
yoco_request_generation_tokens_sum 100
yoco_request_generation_tokens_count 10
yoco_time_to_first_token_seconds_bucket{le="0.1"} 10
yoco_time_to_first_token_seconds_bucket{le="1"} 10
yoco_time_to_first_token_seconds_bucket{le="+Inf"} 10
yoco_time_to_first_token_seconds_count 10
yoco_requests_total{status="ok"} 10
"""
METRICS_B = METRICS_A.replace('le="256"} 10', 'le="256"} 70').replace('le="+Inf"} 10\nyoco_request_prompt_tokens_sum 1600\n'
                                                                     'yoco_request_prompt_tokens_count 10',
                                                                     'le="+Inf"} 70\nyoco_request_prompt_tokens_sum 11200\n'
                                                                     'yoco_request_prompt_tokens_count 70').replace(
    '_seconds_bucket{le="1"} 10', '_seconds_bucket{le="1"} 70').replace(
    'yoco_time_to_first_token_seconds_bucket{le="+Inf"} 10\nyoco_time_to_first_token_seconds_count 10',
    'yoco_time_to_first_token_seconds_bucket{le="+Inf"} 70\nyoco_time_to_first_token_seconds_count 70')


class Autoscaler(unittest.TestCase):
    def test_window_rate_lengths_and_measured_ttft(self):
        w = Window(parse_prometheus(METRICS_A), parse_prometheus(METRICS_B), 30.0)
        self.assertAlmostEqual(w.rate, 2.0)  # 60 arrivals in 30 s
        self.assertAlmostEqual(w.prompts.sum / w.prompts.count, 160.0)
        # 60 new first tokens, all in the (0.1, 1] bucket: p90 interpolates to 0.1 + 0.9·0.9.
        self.assertAlmostEqual(w.ttft.quantile(0.9), 0.91)
        reqs = w.trace(100.0, seed=3)
        self.assertAlmostEqual(len(reqs) / 100.0, 2.0, delta=0.4)
        self.assertTrue(all(64 <= r.prompt <= 256 for r in reqs))

    def test_histogram_quantile_as_prometheus(self):
        h = Histogram(parse_prometheus('x_bucket{le="1"} 2\nx_bucket{le="2"} 4\nx_bucket{le="+Inf"} 4\nx_count 4\n'), "x")
        self.assertAlmostEqual(h.quantile(0.5), 1.0)
        self.assertAlmostEqual(h.quantile(0.75), 1.5)

    def test_bad_metrics_line(self):
        with self.assertRaises(PlanError) as e:
            parse_prometheus("ok 1\nbroken{a=\"b\"} nope\n")
        self.assertIn("metrics:2", str(e.exception))

    def test_hysteresis_up_at_once_down_slowly(self):
        h = Hysteresis(lo=1, hi=10, down_after=3, max_step=4)
        self.assertEqual(h.next(2, 9), 6)   # capped step
        self.assertEqual(h.next(6, 20), 10)  # capped range
        self.assertEqual(h.next(10, 3), 10)
        self.assertEqual(h.next(10, 3), 10)
        self.assertEqual(h.next(10, 3), 9)   # third evaluation below: one goes
        self.assertEqual(h.next(9, 12), 10)  # up resets the count
        self.assertEqual(h.next(10, 3), 10)

    def test_measured_slo_misses_add_a_worker(self):
        w = Window(parse_prometheus(METRICS_A), parse_prometheus(METRICS_B), 30.0)
        self.assertEqual(feedback(2, 2, w, Slo(0.5, 0.05)), (3, 2))
        self.assertEqual(feedback(2, 2, w, Slo(2.0, 0.05)), (2, 2))


class AutoscaleDryRun(unittest.TestCase):
    def test_targets_from_a_live_metrics_endpoint(self):
        """A loopback /metrics whose counters grow between scrapes: the loop prints the window's rate
        and a target it would set (nothing is scaled with --dry-run)."""
        import http.server
        import json
        import threading
        scrapes = []

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                body = (METRICS_A if not scrapes else METRICS_B).encode()
                scrapes.append(1)
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        try:
            with tempfile.TemporaryDirectory() as d:
                prof = os.path.join(d, "p.json")
                with open(prof, "w") as f:
                    json.dump(PROFILE, f)
                r = subprocess.run([sys.executable, os.path.join(PLANNER, "yoco_plan.py"), "autoscale", "--profile", prof,
                                    "--metrics-url", "http://127.0.0.1:%d/metrics" % server.server_port,
                                    "--ttft-p90", "0.5", "--itl-p90", "0.05", "--interval", "0.5", "--horizon", "20",
                                    "--iterations", "1", "--max-replicas", "4", "--dry-run"],
                                   capture_output=True, text=True, timeout=120)
        finally:
            server.shutdown()
            thread.join()
        self.assertEqual(r.returncode, 0, r.stderr)
        line = json.loads(r.stdout.splitlines()[-1])
        self.assertGreater(line["window"]["rate"], 0)
        self.assertAlmostEqual(line["window"]["prompt_mean"], 160.0)
        # The measured TTFT p90 (0.91 s) is over the 0.5 s SLO: at least one more prefill worker.
        self.assertGreaterEqual(line["target"]["prefill"], 2)
        self.assertLessEqual(line["target"]["prefill"], 4)


class CommandLine(unittest.TestCase):
    def run_cli(self, *args):
        return subprocess.run([sys.executable, os.path.join(PLANNER, "yoco_plan.py")] + list(args),
                              capture_output=True, text=True, timeout=120)

    def test_trace_simulate_plan(self):
        with tempfile.TemporaryDirectory() as d:
            prof = os.path.join(d, "p.json")
            with open(prof, "w") as f:
                import json
                json.dump(PROFILE, f)
            trace = os.path.join(d, "t.csv")
            r = self.run_cli("trace", "--requests", "50", "--rate", "5", "--documents", "2", "--document-tokens", "64",
                             "--document-share", "0.5", "--out", trace)
            self.assertEqual(r.returncode, 0, r.stderr)
            r = self.run_cli("simulate", "--profile", prof, "--trace", trace, "--json", "--timeline",
                             os.path.join(d, "tl.json"))
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertIn('"completed": 50', r.stdout)
            r = self.run_cli("plan", "--profile", prof, "--trace", trace, "--ttft-p90", "1", "--itl-p90", "0.1")
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertIn("recommended", r.stdout)
            with open(trace, "a") as f:
                f.write("0.1,7,7,,\n")
            r = self.run_cli("simulate", "--profile", prof, "--trace", trace)
            self.assertEqual(r.returncode, 2)
            self.assertIn("t.csv:52: TIMESTAMP: goes back in time", r.stderr)
            r = self.run_cli("simulate", "--profile", prof, "--requests", "5", "--rate", "1", "--set", "kv_blocks=x")
            self.assertEqual(r.returncode, 2)
            self.assertIn("kv_blocks: not a whole number", r.stderr)


if __name__ == "__main__":
    unittest.main()
