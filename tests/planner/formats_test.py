#!/usr/bin/python3
"""tools/planner/traces.py and profiles.py: the formats, the generators, and bad files refused with
the file, line and field named (ctest planner_formats_test, label unit)."""

import io
import json
import os
import statistics
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools", "planner"))

from errors import PlanError  # noqa: E402
from profiles import fit_decode, load_profile  # noqa: E402
from traces import parse_trace, synthetic, write_trace  # noqa: E402

GOOD_PROFILE = {"schema": "yoco-profile/1", "device": "cpu", "kv_bytes_per_token": 1024, "state_bytes": 100,
                "prefill": [{"tokens": 64, "seconds": 0.01}, {"tokens": 256, "seconds": 0.05}],
                "decode": {"base_seconds": 0.01, "per_sequence_seconds": 0.001, "per_context_token_seconds": 1e-7},
                "transfer": {"latency_seconds": 0.001, "bytes_per_second": 1e9}}


class Traces(unittest.TestCase):
    def test_azure_columns_and_timestamps(self):
        text = ("TIMESTAMP,ContextTokens,GeneratedTokens\n"
                "2023-11-16 18:15:46.6805900,374,44\n"
                "2023-11-16 18:15:50.9951690,396,109\n")
        reqs = parse_trace(text, "azure.csv")
        self.assertEqual([(r.prompt, r.output) for r in reqs], [(374, 44), (396, 109)])
        self.assertAlmostEqual(reqs[1].arrival, 4.314579, places=5)
        self.assertEqual(reqs[0].arrival, 0.0)

    def test_documents_round_trip(self):
        reqs = synthetic(50, 10, (10, 20), (5, 5), seed=1, documents=2, document_tokens=64, document_share=0.5)
        buf = io.StringIO()
        write_trace(reqs, buf)
        back = parse_trace(buf.getvalue())
        self.assertEqual([(r.prompt, r.output, r.doc, r.doc_tokens) for r in back],
                         [(r.prompt, r.output, r.doc, r.doc_tokens) for r in reqs])
        self.assertTrue(any(r.doc for r in back) and any(not r.doc for r in back))

    def test_generators_hit_their_rate_and_burstiness(self):
        def gaps(reqs):
            return [b.arrival - a.arrival for a, b in zip(reqs, reqs[1:])]
        p = gaps(synthetic(4000, 5.0, seed=2))
        self.assertAlmostEqual(statistics.mean(p), 0.2, delta=0.02)
        self.assertAlmostEqual(statistics.stdev(p) / statistics.mean(p), 1.0, delta=0.1)
        g = gaps(synthetic(4000, 5.0, arrivals="gamma", cv=3.0, seed=2))
        self.assertAlmostEqual(statistics.mean(g), 0.2, delta=0.04)
        self.assertAlmostEqual(statistics.stdev(g) / statistics.mean(g), 3.0, delta=0.5)

    def bad(self, text, *parts):
        with self.assertRaises(PlanError) as e:
            parse_trace(text, "t.csv")
        for p in parts:
            self.assertIn(p, str(e.exception))

    def test_bad_traces_name_line_and_field(self):
        self.bad("", "t.csv:1", "empty")
        self.bad("TIMESTAMP,ContextTokens\n0,1\n", "t.csv:1: GeneratedTokens: missing column")
        self.bad("TIMESTAMP,ContextTokens,GeneratedTokens\n0,5,1\n1,x,2\n", "t.csv:3: ContextTokens: not a whole number")
        self.bad("TIMESTAMP,ContextTokens,GeneratedTokens\n0,5,0\n", "t.csv:2: GeneratedTokens: must be >= 1")
        self.bad("TIMESTAMP,ContextTokens,GeneratedTokens\nyesterday,5,1\n", "t.csv:2: TIMESTAMP")
        self.bad("TIMESTAMP,ContextTokens,GeneratedTokens\n2,5,1\n1,5,1\n", "t.csv:3: TIMESTAMP: goes back in time")
        self.bad("TIMESTAMP,ContextTokens,GeneratedTokens\n0,5\n", "t.csv:2", "2 fields")
        self.bad("TIMESTAMP,ContextTokens,GeneratedTokens,DocumentId\n0,5,1,a\n", "t.csv:1: DocumentTokens")
        self.bad("TIMESTAMP,ContextTokens,GeneratedTokens,DocumentId,DocumentTokens\n0,5,1,a,5\n",
                 "t.csv:2: DocumentTokens", "below ContextTokens")
        self.bad("TIMESTAMP,ContextTokens,GeneratedTokens,DocumentId,DocumentTokens\n0,50,1,a,5\n1,50,1,a,6\n",
                 "t.csv:3: DocumentTokens", "5 tokens on an earlier line")
        self.bad("TIMESTAMP,ContextTokens,GeneratedTokens\n", "t.csv:2", "no requests")


class Profiles(unittest.TestCase):
    def write(self, obj):
        fd, path = tempfile.mkstemp(suffix=".json")
        with os.fdopen(fd, "w") as f:
            f.write(obj if isinstance(obj, str) else json.dumps(obj, indent=1))
        self.addCleanup(os.unlink, path)
        return path

    def test_interpolation(self):
        p = load_profile(self.write(GOOD_PROFILE))
        self.assertAlmostEqual(p.prefill_time(32), 0.005)
        self.assertAlmostEqual(p.prefill_time(160), 0.03)
        self.assertAlmostEqual(p.prefill_time(448), 0.09)  # the last slope, extended
        self.assertAlmostEqual(p.slice_time(64, 96), 0.02)
        self.assertAlmostEqual(p.decode_step(4, 1000), 0.01 + 0.004 + 1e-4)
        d = json.loads(json.dumps(GOOD_PROFILE))
        d["decode"]["step_overhead_seconds"] = 0.002  # the worker's turn beyond the engine's step
        self.assertAlmostEqual(load_profile(self.write(d)).decode_step(4, 1000), 0.01 + 0.002 + 0.004 + 1e-4)

    def test_batch_points_replace_the_line_in_batch(self):
        d = json.loads(json.dumps(GOOD_PROFILE))
        d["decode"]["batch_points"] = [[1, 0.002], [2, 0.003], [4, 0.007], [8, 0.009]]
        p = load_profile(self.write(d))
        self.assertAlmostEqual(p.decode_step(1, 1000), 0.002 + 1e-4)
        self.assertAlmostEqual(p.decode_step(3, 0), 0.005)      # between 2 and 4
        self.assertAlmostEqual(p.decode_step(4, 0), 0.007)      # not on the line through 1 and 8
        self.assertAlmostEqual(p.decode_step(16, 0), 0.013)     # the last segment's slope beyond 8
        d["decode"]["batch_points"] = [[2, 0.004]]
        p = load_profile(self.write(d))
        self.assertAlmostEqual(p.decode_step(1, 0), 0.004)
        self.assertAlmostEqual(p.decode_step(4, 0), 0.008)

    def bad(self, obj, *parts):
        path = self.write(obj)
        with self.assertRaises(PlanError) as e:
            load_profile(path)
        for p in parts:
            self.assertIn(p, str(e.exception))
        self.assertIn(path, str(e.exception))

    def test_bad_profiles_name_the_field(self):
        def with_(key, value):
            d = json.loads(json.dumps(GOOD_PROFILE))
            parts = key.split(".")
            o = d
            for k in parts[:-1]:
                o = o[int(k)] if isinstance(o, list) else o[k]
            if value is None:
                del o[parts[-1]]
            elif isinstance(o, list):
                o[int(parts[-1])] = value
            else:
                o[parts[-1]] = value
            return d
        self.bad('{"schema": "yoco-profile/1",\n "device": "cpu",\n "kv_bytes_per_token": ,\n}', ":3: not JSON")
        self.bad(with_("schema", "v0"), "schema: must be")
        self.bad(with_("device", "tpu"), "device: must be cpu or cuda")
        self.bad(with_("kv_bytes_per_token", None), "kv_bytes_per_token: missing")
        self.bad(with_("kv_bytes_per_token", "big"), "kv_bytes_per_token: must be a number")
        self.bad(with_("prefill", [{"tokens": 1, "seconds": 1}]), "prefill: needs at least 2 points")
        p = with_("prefill", [{"tokens": 64, "seconds": 0.01}, {"tokens": 128, "seconds": -1}])
        self.bad(p, "prefill[1].seconds: must be > 0")
        self.bad(with_("decode.per_sequence_seconds", None), "decode.per_sequence_seconds: missing")
        self.bad(with_("transfer.bytes_per_second", 0), "transfer.bytes_per_second: must be > 0")
        self.bad(with_("decode.points", [{"batch": 1, "context": 5}]), "decode.points[0].seconds: missing")
        self.bad(with_("decode.step_jitter", [[0.5, 1.0], [0.9]]), "decode.step_jitter[1]: a [quantile, multiplier]")
        self.bad(with_("decode.step_jitter", [[0.5, 1.0], [1.5, 2.0]]), "decode.step_jitter[1]: quantile in [0, 1]")
        self.bad(with_("decode.step_jitter", [[0.5, 1.0], [0.9, 0.8]]), "decode.step_jitter[1]: quantiles must ascend")
        self.bad(with_("decode.batch_points", [[1, 0.002], [0.5, 0.003]]), "decode.batch_points[1]: batch a whole")
        self.bad(with_("decode.batch_points", [[2, 0.002], [2, 0.003]]), "decode.batch_points[1]: batches must ascend")
        self.bad(with_("decode.batch_points", [[1, 0.0]]), "decode.batch_points[0]: batch a whole number >= 1 and seconds > 0")
        self.bad(with_("decode.batch_points", [[1]]), "decode.batch_points[0]: a [batch, seconds] pair")
        self.bad(with_("decode.step_jitter", [[0.5, 1.0]]), "decode.step_jitter: at least two pairs")
        self.bad(with_("prefill_scale", 0), "prefill_scale: must be > 0")
        self.bad(with_("shared_host", {"decode_slowdown_beside_prefill": -0.1}),
                 "shared_host.decode_slowdown_beside_prefill: must be >= 0")
        self.bad(with_("store", {"latency_seconds": 0, "bytes_per_second": 1e9, "resume_overhead_seconds": "x"}),
                 "store.resume_overhead_seconds: must be a number")

    def test_decode_fit_recovers_the_coefficients(self):
        pts = [(b, c, 0.004 + 0.0005 * b + 2e-8 * b * c) for b in (1, 4, 16) for c in (128, 1024)]
        a, b, c = fit_decode(pts)
        self.assertAlmostEqual(a, 0.004, places=6)
        self.assertAlmostEqual(b, 0.0005, places=7)
        self.assertAlmostEqual(c, 2e-8, places=10)
        # One batch size only: the intercept and the per-sequence term cannot be told apart; the
        # fit still reproduces the measured steps.
        pts = [(32, c, 0.01 + 32 * 1e-6 * c) for c in (100, 1000)]
        a, b, c = fit_decode(pts)
        for _, ctx, s in pts:
            self.assertAlmostEqual(a + 32 * b + 32 * ctx * c, s, places=6)


if __name__ == "__main__":
    unittest.main()
