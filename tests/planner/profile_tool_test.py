#!/usr/bin/python3
"""bench/planner/profile.py's arithmetic on measured data: the token gaps of an open-loop run and
the isotonic fit of the batch points (ctest planner_profile_tool_test, label unit)."""

import importlib.util
import os
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
# By path: the file's name is also a module of the standard library.
_spec = importlib.util.spec_from_file_location("yoco_profile_tool",
                                               os.path.join(HERE, "..", "..", "bench", "planner", "profile.py"))
tool = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(tool)


class Isotonic(unittest.TestCase):
    def test_pools_adjacent_violators(self):
        self.assertEqual(tool.isotonic([1, 2, 3]), [1, 2, 3])
        self.assertEqual(tool.isotonic([3, 1, 2]), [2, 2, 2])
        self.assertEqual(tool.isotonic([1, 3, 2, 4]), [1, 2.5, 2.5, 4])
        self.assertEqual(tool.isotonic([]), [])


class TokenGaps(unittest.TestCase):
    def test_batch_context_admissions_and_prefills(self):
        rows = [
            # A: four deltas, the last of two tokens.
            {"index": 0, "sent": 0.0, "prompt_tokens": 10, "output_tokens": 5, "status": "OK",
             "deltas": [[0.010, 1], [0.012, 1], [0.014, 1], [0.016, 2]]},
            # B: sent while A decodes; its first token lands inside A's second gap.
            {"index": 1, "sent": 0.0105, "prompt_tokens": 20, "output_tokens": 2, "status": "OK",
             "deltas": [[0.0030, 1], [0.0055, 1]]},
            # Neither a failed request nor a one-token one has gaps or counts in a batch.
            {"index": 2, "sent": 0.0, "prompt_tokens": 5, "output_tokens": 0, "status": "UNAVAILABLE", "deltas": []},
            {"index": 3, "sent": 0.02, "prompt_tokens": 5, "output_tokens": 1, "status": "OK", "deltas": [[0.001, 1]]},
        ]
        got = tool.token_gaps(rows)
        want = [(1, 11, 0.002, True),     # A alone, B prefilling; A's context 10 + 1
                # A's second gap admitted B: left out
                (2, 34, 0.001, False),    # 2 tokens in 2 ms; contexts 10 + 3 and 20 + 1
                (2, 34, 0.0025, False)]   # B's one gap, both decoding
        self.assertEqual(len(got), len(want))
        for g, w in zip(got, want):
            self.assertEqual(g[0], w[0])
            self.assertEqual(g[1], w[1])
            self.assertAlmostEqual(g[2], w[2])
            self.assertEqual(g[3], w[3])


class FitPrefill(unittest.TestCase):
    def profile(self):
        import sys
        sys.path.insert(0, os.path.join(HERE, "..", "..", "tools", "planner"))
        from profiles import SCHEMA, Profile
        return Profile({"schema": SCHEMA, "device": "cpu", "kv_bytes_per_token": 1000.0, "state_bytes": 5000,
                        "prefill": [{"tokens": 16, "seconds": 0.002}, {"tokens": 256, "seconds": 0.020},
                                    {"tokens": 512, "seconds": 0.050}],
                        "decode": {"base_seconds": 0.001, "per_sequence_seconds": 0.0002,
                                   "per_context_token_seconds": 1e-7},
                        "transfer": {"latency_seconds": 1e-4, "bytes_per_second": 1e9}})

    def test_recovers_scale_and_overhead(self):
        p = self.profile()
        lone = []
        for n in (16, 64, 256, 512):
            for noise in (-1e-4, 1e-4):  # symmetric: the least-squares line is unchanged
                t = 0.003 + 1.2 * p.engine_prefill_time(n) + p.transfer_time(n * 1000 + 5000) + p.decode_step(1, n)
                lone.append((n, t + noise))
        scale, overhead = tool.fit_prefill(p, lone)
        self.assertAlmostEqual(scale, 1.2, places=4)
        self.assertAlmostEqual(overhead, 0.003, places=5)

    def test_scale_floor_and_overhead_never_negative(self):
        p = self.profile()
        # TTFTs shrinking with length: the slope is clamped at 0.5, the intercept at 0.
        lone = [(16, 0.020), (256, 0.010), (512, 0.001)]
        scale, overhead = tool.fit_prefill(p, lone)
        self.assertEqual(scale, 0.5)
        self.assertGreaterEqual(overhead, 0.0)


class SplitBeside(unittest.TestCase):
    def test_fixed_and_proportional_parts(self):
        p = FitPrefill().profile()  # prefill 2 ms at 16 tokens, 20 ms at 256
        t32, t256 = p.prefill_time(32), p.prefill_time(256)
        slow, delay = tool.split_beside(p, {32: 0.003 + 0.4 * t32, 256: 0.003 + 0.4 * t256})
        self.assertAlmostEqual(slow, 0.4, places=4)
        self.assertAlmostEqual(delay, 0.003, places=6)

    def test_clamps(self):
        p = FitPrefill().profile()
        # Longer prompts gaining less than short ones: no proportional part, the mean as the delay.
        self.assertEqual(tool.split_beside(p, {32: 0.004, 256: 0.002}), (0.0, 0.003))
        # A line through a negative delay: all proportional, through the longer prompt's point.
        slow, delay = tool.split_beside(p, {32: 0.0, 256: 0.010})
        self.assertEqual(delay, 0.0)
        self.assertAlmostEqual(slow, 0.010 / p.prefill_time(256), places=4)


if __name__ == "__main__":
    unittest.main()
