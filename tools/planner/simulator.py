"""A discrete-event simulator of the disaggregated cluster (docs/design.md §3.3, §3.4): the router's
admission and routing (prefix-affine power-of-two prefill choice, KV-aware decode choice), each
prefill worker's step plan (prefill_service/plan.cc: FCFS starts up to max_active, chunk_tokens per
step in arrival order), the KV store's cached documents, the transfer's unhidden tail, and each
decode worker's continuous batcher (decode_service/batcher.cc: admit, make room by preempting the
newest, one batched step) over a paged pool with resident document prefixes. Costs come from a
Profile (profiles.py). What it leaves out is listed in tools/planner/README.md."""

import hashlib
import heapq
import math
import random


class Cluster:
    """The knobs, named and defaulted as the binaries' flags (the local cluster's --kv-blocks)."""

    FIELDS = {
        "prefill_workers": 1, "decode_workers": 1,
        "chunk_tokens": 512, "max_active": 4, "prefill_max_queued_tokens": 1 << 20,
        "kv_blocks": 1024, "block_size": 32, "max_running": 32, "max_waiting": 256, "reserve_ahead_rows": 32,
        "max_in_flight": 256, "max_queued_tokens": 1 << 20, "affinity_tokens": 64, "affinity_max_extra": 4096,
        "decode_routing": "kv", "ship_weight": 1.0, "load_weight": 1.0, "seed": 1, "shared_host": 0,
    }

    def __init__(self, **kw):
        for k, v in self.FIELDS.items():
            setattr(self, k, v)
        for k, v in kw.items():
            self.set(k, v)

    def set(self, key, value):
        from errors import PlanError
        if key not in self.FIELDS:
            raise PlanError("cluster: unknown setting %r (known: %s)" % (key, ", ".join(sorted(self.FIELDS))))
        d = self.FIELDS[key]
        try:
            v = type(d)(value)
        except (TypeError, ValueError):
            kind = {int: "a whole number", float: "a number", str: "a string"}[type(d)]
            raise PlanError("cluster: %s: not %s (%r)" % (key, kind, value))
        if key == "decode_routing" and v not in ("kv", "free-blocks"):
            raise PlanError("cluster: decode_routing: kv or free-blocks (got %r)" % v)
        lo = 0 if key in ("seed", "reserve_ahead_rows", "ship_weight", "load_weight", "max_waiting",
                             "affinity_max_extra", "shared_host") else 1
        if not isinstance(d, str) and v < lo:
            raise PlanError("cluster: %s: must be >= %d (got %r)" % (key, lo, v))
        setattr(self, key, v)

    def copy(self, **kw):
        c = Cluster(**{k: getattr(self, k) for k in self.FIELDS})
        for k, v in kw.items():
            c.set(k, v)
        return c


class _Seq:
    __slots__ = ("req", "first", "last", "itl", "ctx", "generated", "own_blocks", "rows", "doc_held", "decode",
                 "prefill", "remaining", "pos", "resume", "resident_rows", "preempted", "done", "rejected", "running",
                 "end")

    def __init__(self, req):
        self.req = req
        self.first = self.last = None
        self.itl = []
        self.ctx = 0
        self.generated = 0
        self.own_blocks = 0
        self.rows = 0
        self.doc_held = False
        self.decode = self.prefill = None
        self.remaining = self.pos = self.resume = self.resident_rows = 0
        self.preempted = 0
        self.done = False
        self.rejected = ""
        self.end = None
        self.running = False  # in its decode worker's running batch


class _PrefillWorker:
    def __init__(self, i):
        self.i, self.name = i, "prefill-%d" % i
        self.waiting, self.active = [], []
        self.busy = False
        self.queued_tokens = 0
        self.busy_time = 0.0


class _DecodeWorker:
    def __init__(self, i, blocks):
        self.i, self.name = i, "decode-%d" % i
        self.total = blocks
        self.own = 0                # blocks held by sequences alone (reservations included)
        self.docs = {}              # doc -> [blocks, holders, last release]: indexed prefix blocks
        self.waiting, self.running = [], []
        self.busy = False
        self.preemptions = 0
        self.busy_time = 0.0

    def doc_blocks(self, held_only):
        return sum(d[0] for d in self.docs.values() if d[1] > 0 or not held_only)

    def free(self):  # as GetLoad reports it: kept prefix blocks count as free
        return self.total - self.own - self.doc_blocks(True)

    def empty(self):
        return self.total - self.own - self.doc_blocks(False)

    def kept(self):
        return self.free() - self.empty()

    def alloc(self, n):
        """n blocks for one sequence, evicting kept prefixes least recently released first."""
        while self.empty() < n:
            kept = [(d[2], k) for k, d in self.docs.items() if d[1] == 0]
            if not kept:
                return False
            del self.docs[min(kept)[1]]
        self.own += n
        return True


def _h(*parts):
    return int.from_bytes(hashlib.blake2b("|".join(map(str, parts)).encode(), digest_size=8).digest(), "little")


class Simulator:
    def __init__(self, profile, cluster, sample_interval=1.0):
        self.p, self.c = profile, cluster
        self.rng = random.Random(cluster.seed)
        self.jitter_rng = random.Random(cluster.seed + 1)  # the decode steps' spread (profiles.py)
        self.prefill = [_PrefillWorker(i) for i in range(cluster.prefill_workers)]
        self.decode = [_DecodeWorker(i, cluster.kv_blocks) for i in range(cluster.decode_workers)]
        self.events, self.n_events, self.pending = [], 0, 0
        self.now = 0.0
        self.in_flight = self.admitted_tokens = 0
        self.sample_interval = sample_interval
        self.timeline = []
        # A sequence's fixed state, where the device keeps it in the pool's memory (profiles.py).
        self.state_blocks = -(-int(profile.state_bytes) // int(profile.kv_bytes_per_token * cluster.block_size)) \
            if profile.state_in_pool else 0

    # --- the event queue -------------------------------------------------------------------
    def at(self, t, fn, *args):
        self.n_events += 1
        if fn != self.sample:
            self.pending += 1
        heapq.heappush(self.events, (t, self.n_events, fn, args))

    def run(self, reqs):
        seqs = [_Seq(r) for r in reqs]
        for s in seqs:
            self.at(s.req.arrival, self.arrive, s)
        if seqs and self.sample_interval > 0:
            self.at(0.0, self.sample)
        while self.events:
            self.now, _, fn, args = heapq.heappop(self.events)
            if fn != self.sample:
                self.pending -= 1
            elif self.pending == 0:  # nothing left to happen (a sequence that can never fit stays undone)
                break
            fn(*args)
        return Result(seqs, self.timeline, self)

    def sample(self):
        self.timeline.append({
            "t": self.now,
            "router_in_flight": self.in_flight,
            "prefill_waiting": sum(len(w.waiting) for w in self.prefill),
            "prefill_queued_tokens": sum(w.queued_tokens for w in self.prefill),
            "decode_waiting": sum(len(w.waiting) for w in self.decode),
            "decode_running": sum(len(w.running) for w in self.decode),
            "pool_used_ratio": sum(w.total - w.free() for w in self.decode) / max(1, sum(w.total for w in self.decode)),
        })
        self.at(self.now + self.sample_interval, self.sample)

    # --- router ----------------------------------------------------------------------------
    def arrive(self, s):
        r, c = s.req, self.c
        if self.in_flight >= c.max_in_flight or self.admitted_tokens + r.prompt > c.max_queued_tokens:
            return self.reject(s, "admission")
        w = self.pick_decode(s)
        if w is None:
            return self.reject(s, "no decode room")
        self.in_flight += 1
        self.admitted_tokens += r.prompt
        # The reservation (docs/design.md §3.4 step 1): claim the resident prefix, reserve the rest.
        B = c.block_size
        s.decode = w
        resident_blocks = self.resident_blocks(w, r)
        if resident_blocks:
            w.docs[r.doc][1] += 1
            s.doc_held = True
        s.resident_rows = resident_blocks * B
        need = -(-r.prompt // B) - resident_blocks + self.state_blocks
        if not w.alloc(need):
            if s.doc_held:
                self.release_doc(w, r.doc)
            self.in_flight -= 1
            self.admitted_tokens -= r.prompt
            return self.reject(s, "no decode room")
        s.own_blocks, s.rows = need, r.prompt
        # Prefill: resume at the cached document's end (its state is in the KV store).
        s.resume = r.doc_tokens if r.doc else 0
        s.pos = s.resume
        s.remaining = r.prompt - s.resume
        pw = self.pick_prefill(r)
        if pw.queued_tokens + s.remaining > c.prefill_max_queued_tokens:
            self.finish_early(s, "prefill queue full")
            return
        s.prefill = pw
        pw.waiting.append(s)
        pw.queued_tokens += s.remaining
        self.kick_prefill(pw)

    def reject(self, s, why):
        s.rejected, s.done, s.end = why, True, self.now

    def finish_early(self, s, why):
        self.free_seq(s)
        self.in_flight -= 1
        self.admitted_tokens -= s.req.prompt
        self.reject(s, why)

    def resident_blocks(self, w, r):
        if not r.doc or r.doc not in w.docs:
            return 0
        return w.docs[r.doc][0]

    def pick_decode(self, s):
        r, c = s.req, self.c
        B = c.block_size
        rows = r.prompt + r.output
        best, best_key = None, None
        for w in self.decode:
            res = self.resident_blocks(w, r) if c.decode_routing == "kv" else 0
            added = max(0, -(-rows // B) - res) + self.state_blocks
            if w.free() < added:
                continue
            if c.decode_routing == "kv":
                used = w.total - w.free()
                evicted = max(0, added - w.empty())
                cost = c.ship_weight * (r.prompt // B - res) + c.load_weight * (used + added + evicted)
                key = (cost, -w.empty(), len(w.running))
            else:
                key = (-w.free(), len(w.running))
            if best_key is None or key < best_key:
                best, best_key = w, key
        return best

    def pick_prefill(self, r):
        ws = self.prefill
        if len(ws) == 1:
            return ws[0]
        a = self.rng.randrange(len(ws))
        b = self.rng.randrange(len(ws) - 1)
        if b >= a:
            b += 1
        balanced = ws[a] if ws[a].queued_tokens <= ws[b].queued_tokens else ws[b]
        # Prefix affinity: the first affinity_tokens of the prompt; a document's when it covers them,
        # otherwise unique to the request.
        key = ("doc", r.doc) if r.doc and r.doc_tokens >= self.c.affinity_tokens else ("req", r.id)
        preferred = max(ws, key=lambda w: _h(key, w.i))
        if preferred.queued_tokens <= balanced.queued_tokens + self.c.affinity_max_extra:
            return preferred
        return balanced

    # --- prefill worker: plan, step, commit --------------------------------------------------
    def kick_prefill(self, pw):
        if pw.busy or not (pw.waiting or pw.active):
            return
        c, p = self.c, self.p
        room = max(0, c.max_active - len(pw.active))
        admitted = pw.waiting[:room]
        del pw.waiting[:room]
        cost = 0.0
        for s in admitted:  # start_job: the cached rows and state from the store, past the resident ones
            load_rows = max(0, s.resume - s.resident_rows)
            if s.resume:
                cost += p.store_load_time(load_rows * p.kv_bytes_per_token + p.state_bytes) + p.resume_overhead
            pw.active.append(s)
        budget, slices = c.chunk_tokens, []
        for s in pw.active:
            if budget <= 0:
                break
            n = min(budget, s.remaining)
            cost += p.slice_time(s.pos, n)
            slices.append((s, n, cost))
            budget -= n
        delay = 0.0
        if c.shared_host and any(w.busy for w in self.decode):
            cost *= 1.0 + p.prefill_slowdown_beside_decode
            slices = [(s, n, end * (1.0 + p.prefill_slowdown_beside_decode)) for s, n, end in slices]
            delay = p.request_delay_beside_decode
        pw.busy = True
        pw.busy_time += cost
        self.at(self.now + cost, self.prefill_step_done, pw, self.now, slices, delay)

    def prefill_step_done(self, pw, start, slices, delay=0.0):
        pw.busy = False
        for s, n, end in slices:
            s.pos += n
            s.remaining -= n
            pw.queued_tokens -= n
            if s.remaining <= 0:
                # To the committers as soon as its last slice ran (docs/design.md §3.4 step 3); the
                # unhidden part is the last slice's rows and the state, the earlier slices having
                # travelled behind the compute.
                pw.active.remove(s)
                shipped = n * self.p.kv_bytes_per_token + self.p.state_bytes
                # Beside a busy decode worker on one host, the hops after it wait for a core too
                # (Profile.request_delay_beside_decode), holding no worker.
                self.at(start + end + self.p.transfer_time(shipped) + delay, self.committed, s)
        self.kick_prefill(pw)

    # --- decode worker: the continuous batcher -----------------------------------------------
    def committed(self, s):
        w, r = s.decode, s.req
        s.ctx = r.prompt
        if r.doc and not s.doc_held:  # share_prefix: the document's whole blocks become indexed
            blocks = r.doc_tokens // self.c.block_size
            if blocks:
                if r.doc in w.docs:
                    w.docs[r.doc][1] += 1
                else:
                    w.docs[r.doc] = [blocks, 1, self.now]
                s.own_blocks -= blocks
                w.own -= blocks
                s.doc_held = True
        w.waiting.append(s)
        self.kick_decode(w)

    def kick_decode(self, w):
        if w.busy or not (w.waiting or w.running):
            return
        c, p = self.c, self.p
        cost = 0.0
        emitted = []  # (sequence, its first token's offset into the turn)
        while w.waiting and len(w.running) < c.max_running:
            s = w.waiting[0]
            if s.preempted and s.own_blocks == 0:  # recomputed locally from prompt + generated
                need = -(-(s.ctx + 1 + c.reserve_ahead_rows) // c.block_size) - self.doc_blocks_of(s) + self.state_blocks
                if not w.alloc(need):
                    break
                s.own_blocks = need
                s.ctx += 1
                cost += p.prefill_time(s.ctx)
            w.waiting.pop(0)
            cost += p.decode_step(1, s.ctx)  # the logits of the last position
            if s.generated + 1 < s.req.output:  # else it finishes with this token
                w.running.append(s)
                s.running = True
            emitted.append((s, cost))
        batch = self.make_room(w)
        if batch:
            cost += p.decode_step(len(batch), sum(s.ctx for s in batch))
        if not emitted and not batch:
            return
        f = p.jitter(self.jitter_rng.random())
        if c.shared_host and any(pw.busy for pw in self.prefill):
            f *= 1.0 + p.decode_slowdown_beside_prefill
        cost *= f
        emitted = [(s, offset * f) for s, offset in emitted]
        w.busy = True
        w.busy_time += cost
        self.at(self.now + cost, self.decode_turn_done, w, self.now, emitted, batch)

    def doc_blocks_of(self, s):
        return s.decode.docs[s.req.doc][0] if s.doc_held else 0

    def make_room(self, w):
        B, ahead = self.c.block_size, self.c.reserve_ahead_rows
        for s in list(w.running):
            if not s.running:
                continue
            have = (s.own_blocks - self.state_blocks + self.doc_blocks_of(s)) * B
            if s.ctx + 1 <= have:
                continue
            need = -(-(s.ctx + 1 + ahead) // B) - (s.own_blocks - self.state_blocks) - self.doc_blocks_of(s)
            while not w.alloc(need):
                victim = w.running[-1]
                self.preempt(w, victim)
                if victim is s:
                    break
            else:
                s.own_blocks += need
        return list(w.running)

    def preempt(self, w, s):
        if w.running[-1] is s:
            w.running.pop()
        else:
            w.running.remove(s)
        s.running = False
        w.own -= s.own_blocks
        s.own_blocks = 0
        s.preempted += 1
        w.preemptions += 1
        w.waiting.insert(0, s)

    def decode_turn_done(self, w, start, emitted, batch):
        w.busy = False
        for s, offset in emitted:
            self.emit(s, start + offset)
        for s in batch:
            if s.running and not s.done:
                s.ctx += 1
                self.emit(s, self.now)
        self.kick_decode(w)

    def emit(self, s, t):
        if s.done:
            return
        if s.first is None:
            s.first = t
        else:
            s.itl.append(t - s.last)
        s.last = t
        s.generated += 1
        if s.generated >= s.req.output:
            w = s.decode
            if s.running:
                w.running.remove(s)
                s.running = False
            self.free_seq(s)
            self.in_flight -= 1
            self.admitted_tokens -= s.req.prompt
            s.done, s.end = True, t

    def free_seq(self, s):
        w = s.decode
        if w is None:
            return
        w.own -= s.own_blocks
        s.own_blocks = 0
        if s.doc_held:
            self.release_doc(w, s.req.doc)
            s.doc_held = False

    def release_doc(self, w, doc):
        d = w.docs[doc]
        d[1] -= 1
        if d[1] == 0:
            d[2] = self.now


def percentile(xs, p):
    """numpy's default (linear between closest ranks), as bench/load_generator.cc computes it."""
    if not xs:
        return math.nan
    v = sorted(xs)
    rank = p / 100.0 * (len(v) - 1)
    lo, hi = math.floor(rank), math.ceil(rank)
    return v[lo] + (v[hi] - v[lo]) * (rank - lo)


class Result:
    def __init__(self, seqs, timeline, sim):
        self.seqs, self.timeline = seqs, timeline
        over = sim.p.request_overhead
        ok = [s for s in seqs if not s.rejected]
        self.completed = len(ok)
        self.rejected = {}
        for s in seqs:
            if s.rejected:
                self.rejected[s.rejected] = self.rejected.get(s.rejected, 0) + 1
        self.ttft = [s.first - s.req.arrival + over for s in ok]
        self.itl = [x for s in ok for x in s.itl]
        self.e2e = [s.end - s.req.arrival + over for s in ok]
        self.output_tokens = sum(s.generated for s in ok)
        t0 = min((s.req.arrival for s in seqs), default=0.0)
        t1 = max((s.end for s in ok), default=t0)
        self.wall = t1 - t0
        self.preemptions = sum(w.preemptions for w in sim.decode)
        self.prefill_busy = [w.busy_time / self.wall if self.wall > 0 else 0 for w in sim.prefill]
        self.decode_busy = [w.busy_time / self.wall if self.wall > 0 else 0 for w in sim.decode]

    def summary(self):
        ms = lambda xs, q: round(percentile(xs, q) * 1e3, 3)
        return {
            "requests": len(self.seqs), "completed": self.completed, "rejected": self.rejected,
            "wall_seconds": round(self.wall, 4),
            "request_throughput": round(self.completed / self.wall, 4) if self.wall > 0 else 0,
            "output_tokens_per_second": round(self.output_tokens / self.wall, 2) if self.wall > 0 else 0,
            "ttft_ms": {"p50": ms(self.ttft, 50), "p90": ms(self.ttft, 90), "p99": ms(self.ttft, 99)},
            "itl_ms": {"p50": ms(self.itl, 50), "p90": ms(self.itl, 90), "p99": ms(self.itl, 99)},
            "e2e_ms": {"p50": ms(self.e2e, 50), "p99": ms(self.e2e, 99)},
            "preemptions": self.preemptions,
            "prefill_busy": [round(x, 3) for x in self.prefill_busy],
            "decode_busy": [round(x, 3) for x in self.decode_busy],
            "peak": {k: max((row[k] for row in self.timeline), default=0) for k in (
                "router_in_flight", "prefill_waiting", "prefill_queued_tokens", "decode_waiting", "decode_running",
                "pool_used_ratio")},
        }


def simulate(profile, cluster, reqs, sample_interval=1.0):
    return Simulator(profile, cluster, sample_interval).run(reqs)
