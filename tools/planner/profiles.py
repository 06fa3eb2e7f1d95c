"""A worker's cost model on one device, as bench/planner/profile.py measures it (schema: the
"Profiles" section of tools/planner/README.md). The simulator asks it four questions: how long a
prefill slice takes, how long a decode step of a batch takes, how long the unhidden part of a
transfer takes, and how long a cached prefix takes to load from the KV store."""

import bisect
import json
import math

from errors import PlanError, where

SCHEMA = "yoco-profile/1"


class Profile:
    def __init__(self, doc, path="<profile>"):
        self.path = path
        self._doc = doc
        g = _Getter(doc, path)
        if g.req("schema", str) != SCHEMA:
            raise PlanError(where(path, None, "schema") + ": must be %r (got %r)" % (SCHEMA, doc.get("schema")))
        self.device = g.req("device", str)
        if self.device not in ("cpu", "cuda"):
            raise PlanError(where(path, None, "device") + ": must be cpu or cuda (got %r)" % self.device)
        self.model = g.opt("model", str, "")
        self.source = g.opt("source", str, "")
        self.kv_bytes_per_token = g.positive("kv_bytes_per_token")
        self.state_bytes = g.nonneg("state_bytes")
        # Prefill: seconds to prefill a prompt of n tokens alone, from position 0.
        pts = g.req("prefill", list)
        if len(pts) < 2:
            raise PlanError(where(path, None, "prefill") + ": needs at least 2 points (got %d)" % len(pts))
        self.prefill_points = []
        for i, p in enumerate(pts):
            pg = _Getter(p, path, "prefill[%d]" % i)
            self.prefill_points.append((pg.positive("tokens"), pg.positive("seconds")))
        self.prefill_points.sort()
        for (n0, _), (n1, _) in zip(self.prefill_points, self.prefill_points[1:]):
            if n0 == n1:
                raise PlanError(where(path, None, "prefill") + ": two points at %g tokens" % n0)
        # Decode step: base + per_sequence·B + per_context_token·Σcontext (a least-squares fit of the
        # measured points, made by the profile tool; the points stay for the record).
        d = _Getter(g.req("decode", dict), path, "decode")
        self.decode_base = d.nonneg("base_seconds")
        self.decode_per_seq = d.nonneg("per_sequence_seconds")
        self.decode_per_ctx = d.nonneg("per_context_token_seconds")
        # What a step costs in the worker beyond the engine's step (the batcher's turn, sampling,
        # handing tokens to the stream), measured through a running cluster by the profile tool.
        self.decode_overhead = d.opt_num("step_overhead_seconds", 0.0)
        # The spread of a lone stream's step around its median, measured through a running cluster:
        # [quantile, multiplier] pairs, quantiles ascending in [0, 1], multipliers > 0 and
        # non-decreasing. The simulator draws each decode turn's multiplier from it (absent: every
        # step takes its modelled time).
        self.step_jitter = []
        for i, q in enumerate(d.opt("step_jitter", list, [])):
            at = where(path, None, "decode.step_jitter[%d]" % i)
            _number_pair(q, at, "[quantile, multiplier]")
            if not 0 <= q[0] <= 1 or not q[1] > 0:
                raise PlanError(at + ": quantile in [0, 1] and multiplier > 0 (got %r)" % (q,))
            if self.step_jitter and (q[0] <= self.step_jitter[-1][0] or q[1] < self.step_jitter[-1][1]):
                raise PlanError(at + ": quantiles must ascend and multipliers not decrease")
            self.step_jitter.append((float(q[0]), float(q[1])))
        if len(self.step_jitter) == 1:
            raise PlanError(where(path, None, "decode.step_jitter") + ": at least two pairs")
        # Optional: the step's batch term measured per batch size through a running cluster:
        # [[B, seconds], ...] at no context (B whole, ascending). Where given, a step costs the
        # piecewise-linear value at B (the last segment's slope beyond the last point, the first
        # point's value below it) + per_context_token·Σcontext, replacing base + per_sequence·B:
        # the worker's step is not linear in B (the engine changes products at small batches).
        self.batch_points = []
        for i, q in enumerate(d.opt("batch_points", list, [])):
            at = where(path, None, "decode.batch_points[%d]" % i)
            _number_pair(q, at, "[batch, seconds]")
            if not (q[0] >= 1 and float(q[0]).is_integer()) or not (math.isfinite(q[1]) and q[1] > 0):
                raise PlanError(at + ": batch a whole number >= 1 and seconds > 0 (got %r)" % (q,))
            if self.batch_points and q[0] <= self.batch_points[-1][0]:
                raise PlanError(at + ": batches must ascend")
            self.batch_points.append((int(q[0]), float(q[1])))
        for i, p in enumerate(d.opt("points", list, [])):
            pg = _Getter(p, path, "decode.points[%d]" % i)
            pg.positive("batch"), pg.nonneg("context"), pg.positive("seconds")
        if self.decode_step(1, 1) <= 0:
            raise PlanError(where(path, None, "decode") + ": a step of one sequence must take some time")
        t = _Getter(g.req("transfer", dict), path, "transfer")
        self.transfer_latency = t.nonneg("latency_seconds")
        self.transfer_bw = t.positive("bytes_per_second")
        s = _Getter(g.opt("store", dict, {"latency_seconds": 0.0, "bytes_per_second": 1e12}), path, "store")
        self.store_latency = s.nonneg("latency_seconds")
        self.store_bw = s.positive("bytes_per_second")
        # What resuming from a cached document costs beyond reading its bytes (lookup, checks, the
        # state restored), measured through a running cluster by the profile tool.
        self.resume_overhead = s.opt_num("resume_overhead_seconds", 0.0)
        # What a request pays outside the workers' compute (router, RPC hops, reservation, commit
        # acknowledgement): added to every time to first token.
        self.request_overhead = g.opt_num("request_overhead_seconds", 0.0)
        # The prefill as the worker runs it against the engine's points (fitted through a running
        # cluster by the profile tool; 1: as measured alone).
        self.prefill_scale = g.opt_num("prefill_scale", 1.0)
        if not self.prefill_scale > 0:
            raise PlanError(where(path, None, "prefill_scale") + ": must be > 0")
        # Where the profile's workers shared one host (the local cluster): how much slower a decode
        # step runs while a prefill computes beside it, and a prefill while a decode worker steps
        # (fractions, measured through the cluster by the profile tool). The simulator applies them
        # only to a cluster set up with shared_host (a calibration on one machine).
        h = _Getter(g.opt("shared_host", dict, {}), path, "shared_host")
        self.decode_slowdown_beside_prefill = h.opt_num("decode_slowdown_beside_prefill", 0.0)
        self.prefill_slowdown_beside_decode = h.opt_num("prefill_slowdown_beside_decode", 0.0)
        # And the part of a request's wait beside a busy decode worker that holds no worker (the
        # router's, the client's and the RPC hops' turns for a core): seconds added to its commit
        # when its last prefill step started while a decode worker stepped.
        self.request_delay_beside_decode = h.opt_num("request_delay_beside_decode_seconds", 0.0)
        # A device profile may size the decode pool: its bytes for K/V (and, with state_in_pool,
        # for each sequence's fixed state too, as a GPU engine holds the self-decoder's state
        # beside the K/V; the CPU pool holds K/V rows only).
        self.memory_bytes = g.opt_num("kv_memory_bytes", 0.0)
        self.state_in_pool = g.opt("state_in_pool", bool, False)

    def to_json(self):
        return dict(self._doc)

    # Cumulative prefill time of the first n tokens: piecewise linear through the points, through
    # (0, 0) below the first and along the last segment's slope beyond the last.
    def prefill_time(self, n):
        return self.prefill_scale * self.engine_prefill_time(n)

    def engine_prefill_time(self, n):
        if n <= 0:
            return 0.0
        xs = [p[0] for p in self.prefill_points]
        if n <= xs[0]:
            return self.prefill_points[0][1] * n / xs[0]
        i = bisect.bisect_left(xs, n)
        if i >= len(xs):
            (x0, y0), (x1, y1) = self.prefill_points[-2], self.prefill_points[-1]
        else:
            (x0, y0), (x1, y1) = self.prefill_points[i - 1], self.prefill_points[i]
        return y0 + (y1 - y0) * (n - x0) / (x1 - x0)

    # A slice computing positions [start, start + tokens) of one prompt.
    def slice_time(self, start, tokens):
        return max(0.0, self.prefill_time(start + tokens) - self.prefill_time(start))

    def decode_step(self, batch, context_sum):
        return self.batch_term(batch) + self.decode_overhead + self.decode_per_ctx * context_sum

    def batch_term(self, batch):
        """The step's cost at B sequences and no context: batch_points where measured, else the fit."""
        pts = self.batch_points
        if not pts:
            return self.decode_base + self.decode_per_seq * batch
        if batch <= pts[0][0] or len(pts) == 1:
            return pts[0][1] if batch <= pts[0][0] else pts[0][1] * batch / pts[0][0]
        i = bisect.bisect_left([b for b, _ in pts], batch)
        (x0, y0), (x1, y1) = pts[-2:] if i >= len(pts) else pts[i - 1:i + 1]
        return max(0.0, y0 + (y1 - y0) * (batch - x0) / (x1 - x0))

    def jitter(self, u):
        """The step multiplier at quantile u of decode.step_jitter (linear between its pairs)."""
        j = self.step_jitter
        if not j:
            return 1.0
        if u <= j[0][0]:
            return j[0][1]
        for (q0, m0), (q1, m1) in zip(j, j[1:]):
            if u <= q1:
                return m0 + (m1 - m0) * (u - q0) / (q1 - q0)
        return j[-1][1]

    def transfer_time(self, nbytes):
        return self.transfer_latency + nbytes / self.transfer_bw

    def store_load_time(self, nbytes):
        return 0.0 if nbytes <= 0 else self.store_latency + nbytes / self.store_bw


def load_profile(path):
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        raise PlanError(where(path) + ": cannot read (%s)" % e.strerror)
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise PlanError(where(path, e.lineno) + ": not JSON (%s, column %d)" % (e.msg, e.colno))
    if not isinstance(doc, dict):
        raise PlanError(where(path, 1) + ": must be a JSON object")
    return Profile(doc, path)


def fit_decode(points):
    """Least-squares fit of step = a + b·batch + c·Σcontext over (batch, context, seconds) points,
    coefficients clamped at 0 (a negative one is noise). Returns (a, b, c)."""
    rows = [(1.0, float(b), float(b) * float(c), float(s)) for b, c, s in points]
    if not rows:
        raise PlanError("decode: no points to fit")

    def solve(cols):
        k = len(cols)
        m = [[sum(r[i] * r[j] for r in rows) for j in cols] for i in cols]
        v = [sum(r[i] * r[3] for r in rows) for i in cols]
        for i in range(k):  # tiny ridge: a design with one batch size is singular in (a, b)
            m[i][i] += 1e-12 * (1 + m[i][i])
        for i in range(k):  # Gaussian elimination with partial pivoting
            p = max(range(i, k), key=lambda r: abs(m[r][i]))
            m[i], m[p], v[i], v[p] = m[p], m[i], v[p], v[i]
            for r in range(i + 1, k):
                f = m[r][i] / m[i][i]
                for c in range(i, k):
                    m[r][c] -= f * m[i][c]
                v[r] -= f * v[i]
        x = [0.0] * k
        for i in reversed(range(k)):
            x[i] = (v[i] - sum(m[i][c] * x[c] for c in range(i + 1, k))) / m[i][i]
        return x

    cols = [0, 1, 2]
    while True:
        x = solve(cols)
        neg = [c for c, val in zip(cols, x) if val < 0]
        if not neg or len(cols) == 1:
            out = [0.0, 0.0, 0.0]
            for c, val in zip(cols, x):
                out[c] = max(0.0, val)
            return tuple(out)
        cols = [c for c in cols if c != neg[0]]


class _Getter:
    def __init__(self, obj, path, prefix=""):
        if not isinstance(obj, dict):
            raise PlanError(where(path, None, prefix or "(top)") + ": must be an object")
        self.obj, self.path, self.prefix = obj, path, prefix

    def name(self, key):
        return (self.prefix + "." if self.prefix else "") + key

    def fail(self, key, msg):
        raise PlanError(where(self.path, None, self.name(key)) + ": " + msg)

    def req(self, key, typ):
        if key not in self.obj:
            self.fail(key, "missing")
        v = self.obj[key]
        if not isinstance(v, typ) or (isinstance(v, bool) and typ is not bool):
            self.fail(key, "must be %s (got %s)" % (_type_name(typ), json.dumps(v)[:40]))
        return v

    def opt(self, key, typ, default):
        return self.req(key, typ) if key in self.obj else default

    def num(self, key):
        v = self.req(key, (int, float))
        if not math.isfinite(v):
            self.fail(key, "must be finite")
        return float(v)

    def opt_num(self, key, default):
        return self.nonneg(key) if key in self.obj else default

    def nonneg(self, key):
        v = self.num(key)
        if v < 0:
            self.fail(key, "must be >= 0 (got %g)" % v)
        return v

    def positive(self, key):
        v = self.num(key)
        if v <= 0:
            self.fail(key, "must be > 0 (got %g)" % v)
        return v


def _type_name(typ):
    if typ is str:
        return "a string"
    if typ is list:
        return "an array"
    if typ is dict:
        return "an object"
    if typ is bool:
        return "true or false"
    return "a number"


def _number_pair(q, at, shape):
    """Raises naming `at` unless q is a list of two numbers (booleans are not numbers here)."""
    if (not isinstance(q, list) or len(q) != 2 or
            not all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in q)):
        raise PlanError(at + ": a %s pair of numbers" % shape)
