#!/usr/bin/python3
"""tools/planner/simulator.py on hand-computable cases: one request's TTFT is its prefill + the
transfer's unhidden tail + the first token's logits; queueing, slices, saturation, preemption,
admission and KV-aware routing of documents (ctest planner_simulator_test, label unit)."""

import os
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools", "planner"))

from profiles import Profile  # noqa: E402
from simulator import Cluster, simulate  # noqa: E402
from traces import Request  # noqa: E402


def profile(**kw):
    doc = {"schema": "yoco-profile/1", "device": "cpu", "kv_bytes_per_token": 1000, "state_bytes": 5000,
           # 1 ms per prompt token, linear
           "prefill": [{"tokens": 100, "seconds": 0.1}, {"tokens": 1000, "seconds": 1.0}],
           # a step: 10 ms + 1 ms per sequence
           "decode": {"base_seconds": 0.010, "per_sequence_seconds": 0.001, "per_context_token_seconds": 0.0},
           "transfer": {"latency_seconds": 0.002, "bytes_per_second": 1e6}}
    doc.update(kw)
    return Profile(doc)


class OneRequest(unittest.TestCase):
    def test_ttft_is_prefill_plus_transfer_plus_first_logits(self):
        p = profile(request_overhead_seconds=0.003)
        r = simulate(p, Cluster(), [Request(0, 0.5, 200, 4)])
        s = r.seqs[0]
        prefill = 0.2                            # 200 tokens in one 512-token step
        transfer = 0.002 + (200 * 1000 + 5000) / 1e6  # the last slice's rows and the state
        logits = 0.010 + 0.001                   # a step of one sequence
        self.assertAlmostEqual(s.first - 0.5, prefill + transfer + logits, places=9)
        self.assertAlmostEqual(r.ttft[0], prefill + transfer + logits + 0.003, places=9)
        # Then one step per token, each with the batch of one.
        self.assertEqual(len(s.itl), 3)
        for gap in s.itl:
            self.assertAlmostEqual(gap, 0.011, places=9)
        self.assertEqual(r.completed, 1)

    def test_long_prompt_is_sliced_by_chunk_tokens(self):
        p = profile()
        r = simulate(p, Cluster(chunk_tokens=128), [Request(0, 0.0, 300, 1)])
        # 128 + 128 + 44 tokens: the compute is the same 0.3 s; the unhidden transfer is the last 44 rows.
        expected = 0.3 + 0.002 + (44 * 1000 + 5000) / 1e6 + 0.011
        self.assertAlmostEqual(r.seqs[0].first, expected, places=9)


class Queueing(unittest.TestCase):
    def test_second_prompt_waits_for_the_first_with_one_active(self):
        p = profile()
        r = simulate(p, Cluster(max_active=1), [Request(0, 0.0, 100, 1), Request(1, 0.0, 100, 1)])
        tail = 0.002 + (100 * 1000 + 5000) / 1e6 + 0.011
        self.assertAlmostEqual(r.seqs[0].first, 0.1 + tail, places=9)
        self.assertAlmostEqual(r.seqs[1].first, 0.2 + tail, places=9)

    def test_active_prompts_share_a_step_in_arrival_order(self):
        p = profile()
        # Budget 150 a step. A arrives first and steps alone: 150 of its 200 tokens. Step 2: A's last
        # 50, whose commit starts as soon as they ran (0.2 s), then all 100 of B (0.3 s).
        r = simulate(p, Cluster(chunk_tokens=150), [Request(0, 0.0, 200, 1), Request(1, 0.0, 100, 1)])
        self.assertAlmostEqual(r.seqs[0].first, 0.20 + 0.002 + 0.055 + 0.011, places=9)
        self.assertAlmostEqual(r.seqs[1].first, 0.30 + 0.002 + 0.105 + 0.011, places=9)

    def test_saturation_grows_the_queue_without_bound(self):
        p = profile(transfer={"latency_seconds": 0.0, "bytes_per_second": 1e12})
        # 0.1 s of prefill each, arriving every 0.05 s: the k-th waits about k·0.05 s more.
        reqs = [Request(i, i * 0.05, 100, 1) for i in range(40)]
        r = simulate(p, Cluster(max_active=1), reqs)
        waits = [s.first - s.req.arrival for s in r.seqs]
        self.assertAlmostEqual(waits[-1] - waits[0], 39 * 0.05, places=6)
        self.assertGreater(max(x["prefill_waiting"] for x in r.timeline), 5)
        # Half the load: no queue.
        reqs = [Request(i, i * 0.2, 100, 1) for i in range(40)]
        r = simulate(p, Cluster(max_active=1), reqs)
        self.assertAlmostEqual(max(r.ttft) - min(r.ttft), 0.0, places=9)

    def test_two_prefill_workers_halve_the_saturated_wait(self):
        p = profile(transfer={"latency_seconds": 0.0, "bytes_per_second": 1e12})
        reqs = [Request(i, i * 0.05, 100, 1) for i in range(40)]
        one = simulate(p, Cluster(max_active=1), reqs).summary()
        # Prompts of random tokens have no common prefix: with the router's default affinity slack
        # (4096 tokens) each goes where its prefix hashes; without slack, to the shorter queue.
        two = simulate(p, Cluster(max_active=1, prefill_workers=2, affinity_max_extra=0), reqs).summary()
        self.assertLess(two["ttft_ms"]["p90"], one["ttft_ms"]["p90"] / 3)


class DecodePool(unittest.TestCase):
    def test_batch_steps_cost_per_sequence(self):
        p = profile(transfer={"latency_seconds": 0.0, "bytes_per_second": 1e12})
        r = simulate(p, Cluster(prefill_workers=2), [Request(0, 0.0, 100, 50), Request(1, 0.0, 100, 50)])
        # Both run in one batch: every later step costs 10 + 2 ms.
        self.assertAlmostEqual(sorted(r.itl)[len(r.itl) // 2], 0.012, places=9)

    def test_max_running_queues_the_rest(self):
        p = profile(transfer={"latency_seconds": 0.0, "bytes_per_second": 1e12})
        reqs = [Request(0, 0.0, 100, 20), Request(1, 0.0, 100, 20)]
        r = simulate(p, Cluster(prefill_workers=2, max_running=1), reqs)
        a, b = r.seqs
        self.assertGreaterEqual(b.first, a.end)  # admitted only when the first finished

    def test_preemption_recomputes_and_finishes_every_token(self):
        p = profile(transfer={"latency_seconds": 0.0, "bytes_per_second": 1e12})
        # 10 blocks of 16 rows: the router admits both (each reserves 3 blocks for its 40 prompt rows
        # and 7 are free for the second's 100 rows), but both growing to 100 rows (7 blocks each)
        # cannot fit: the newest is preempted, recomputed later, and still yields 60 tokens.
        c = Cluster(prefill_workers=2, kv_blocks=10, block_size=16, reserve_ahead_rows=0)
        reqs = [Request(0, 0.0, 40, 60), Request(1, 0.0, 40, 60)]
        r = simulate(p, c, reqs)
        self.assertEqual(r.completed, 2)
        self.assertGreater(r.preemptions, 0)
        for s in r.seqs:
            self.assertEqual(s.generated, 60)
        victim = max(r.seqs, key=lambda s: s.preempted)
        # Its longest gap holds the wait for room plus the recompute of prompt + generated.
        self.assertGreater(max(victim.itl), 0.04)
        self.assertEqual(r.seqs[0].decode.own, 0)  # every block back

    def test_no_decode_room_rejects(self):
        p = profile()
        r = simulate(p, Cluster(kv_blocks=2, block_size=16), [Request(0, 0.0, 100, 10)])
        self.assertEqual(r.rejected, {"no decode room": 1})

    def test_state_in_pool_takes_blocks(self):
        # 100 rows + 10 = 4 blocks of 32; a state of 64 rows' bytes takes 2 more where the device keeps
        # it in the pool: 5 blocks hold the sequence without it, not with it.
        plain = profile(state_bytes=64 * 1000)
        held = profile(state_bytes=64 * 1000, state_in_pool=True)
        reqs = [Request(0, 0.0, 100, 10)]
        self.assertEqual(simulate(plain, Cluster(kv_blocks=5), reqs).completed, 1)
        self.assertEqual(simulate(held, Cluster(kv_blocks=5), reqs).rejected, {"no decode room": 1})
        self.assertEqual(simulate(held, Cluster(kv_blocks=6), reqs).completed, 1)

    def test_admission_limit_rejects(self):
        p = profile()
        reqs = [Request(i, 0.0, 100, 5) for i in range(3)]
        r = simulate(p, Cluster(max_in_flight=2), reqs)
        self.assertEqual(r.rejected, {"admission": 1})
        self.assertEqual(r.completed, 2)


class Documents(unittest.TestCase):
    def test_cached_document_resumes_and_stays_resident(self):
        p = profile(transfer={"latency_seconds": 0.0, "bytes_per_second": 1e12},
                    store={"latency_seconds": 0.001, "bytes_per_second": 1e6})
        # A 320-token document (10 blocks of 32) + 80 tokens of prompt, twice, one after the other.
        reqs = [Request(0, 0.0, 400, 2, "d", 320), Request(1, 5.0, 400, 2, "d", 320)]
        r = simulate(p, Cluster(), reqs)
        first, second = r.seqs
        # First: load the document's rows and state from the store, compute only the last 80 tokens.
        load = 0.001 + (320 * 1000 + 5000) / 1e6
        self.assertAlmostEqual(first.first, load + 0.08 + 0.011, places=6)
        # Second: its decode worker still holds the document's blocks (kept), so only the state loads.
        self.assertAlmostEqual(second.first - 5.0, 0.001 + 5000 / 1e6 + 0.08 + 0.011, places=6)

    def test_kv_routing_sends_a_document_where_it_is_resident(self):
        p = profile(transfer={"latency_seconds": 0.0, "bytes_per_second": 1e12})
        reqs = [Request(0, 0.0, 400, 2, "d", 320), Request(1, 1.0, 100, 2), Request(2, 2.0, 400, 2, "d", 320)]
        r = simulate(p, Cluster(decode_workers=2), reqs)
        self.assertIs(r.seqs[2].decode, r.seqs[0].decode)
        self.assertIsNot(r.seqs[1].decode, r.seqs[0].decode)  # the least used for the plain prompt


class MeasuredThroughTheCluster(unittest.TestCase):
    """The profile's terms measured through a running cluster (profiles.py)."""

    def test_prefill_scale_and_resume_overhead(self):
        p = profile(prefill_scale=1.5, transfer={"latency_seconds": 0.0, "bytes_per_second": 1e12},
                    store={"latency_seconds": 0.001, "bytes_per_second": 1e6, "resume_overhead_seconds": 0.004})
        r = simulate(p, Cluster(), [Request(0, 0.0, 200, 1), Request(1, 5.0, 400, 1, "d", 320)])
        self.assertAlmostEqual(r.seqs[0].first, 1.5 * 0.2 + 0.011, places=6)
        load = 0.001 + (320 * 1000 + 5000) / 1e6 + 0.004
        self.assertAlmostEqual(r.seqs[1].first - 5.0, load + 1.5 * 0.08 + 0.011, places=6)

    def test_step_jitter_spreads_the_steps_around_their_median(self):
        jitter = [[0.0, 0.5], [0.5, 1.0], [1.0, 2.0]]
        p = profile(decode={"base_seconds": 0.010, "per_sequence_seconds": 0.0, "per_context_token_seconds": 0.0,
                            "step_jitter": jitter})
        self.assertAlmostEqual(p.jitter(0.25), 0.75)
        self.assertAlmostEqual(p.jitter(0.75), 1.5)
        a = simulate(p, Cluster(), [Request(0, 0.0, 100, 400)])
        b = simulate(p, Cluster(), [Request(0, 0.0, 100, 400)])
        self.assertEqual(a.itl, b.itl)  # the cluster's seed fixes the draws
        gaps = sorted(a.itl)
        self.assertLess(gaps[0], 0.0055)
        self.assertGreater(gaps[-1], 0.0195)
        self.assertAlmostEqual(gaps[len(gaps) // 2], 0.010, delta=0.001)

    def test_shared_host_slows_a_decode_step_beside_a_prefill(self):
        p = profile(shared_host={"decode_slowdown_beside_prefill": 0.5, "prefill_slowdown_beside_decode": 0.0})
        # A stream of 60 tokens, and a 1,000-token prompt arriving just after it whose prefill (1 s)
        # outlasts the stream: its steps take 1.5× on one host, 1× on separate machines.
        reqs = [Request(0, 0.0, 10, 60), Request(1, 0.015, 1000, 1)]
        apart = simulate(p, Cluster(), reqs)
        shared = simulate(p, Cluster(shared_host=1), reqs)
        for gap in apart.seqs[0].itl:
            self.assertAlmostEqual(gap, 0.011, places=6)
        for gap in shared.seqs[0].itl:
            self.assertAlmostEqual(gap, 0.011 * 1.5, places=6)

    def test_shared_host_slows_a_prefill_beside_decode_and_delays_its_commit(self):
        p = profile(shared_host={"prefill_slowdown_beside_decode": 0.5, "request_delay_beside_decode_seconds": 0.004})
        # A stream of 60 tokens (its steps 11 ms), and a 100-token prompt at 0.1 s while it runs:
        # on one host its prefill takes 0.1 s × 1.5 and its commit waits 4 ms more, which holds no
        # worker; then it waits at most the running turn, and its first logits take 11 ms.
        reqs = [Request(0, 0.0, 10, 60), Request(1, 0.1, 100, 2)]
        transfer = 0.002 + (100 * 1000 + 5000) / 1e6
        apart = simulate(p, Cluster(), reqs)
        shared = simulate(p, Cluster(shared_host=1), reqs)
        for r, commit in ((apart, 0.1 + 0.1 + transfer), (shared, 0.1 + 0.15 + transfer + 0.004)):
            first = r.seqs[1].first
            self.assertGreaterEqual(first, commit + 0.011 - 1e-9)
            self.assertLessEqual(first, commit + 0.011 + 0.012 + 1e-9)
        # The stream's own prefill ran with the decode worker idle: as apart.
        self.assertAlmostEqual(shared.seqs[0].first, apart.seqs[0].first, places=9)
        # The prefill worker was held for the slowed compute alone, not the delay.
        self.assertAlmostEqual(shared.prefill_busy[0] * shared.wall, 0.010 + 0.15, places=9)


if __name__ == "__main__":
    unittest.main()
