"""Request traces: the file format (CSV with the public Azure LLM inference trace's columns, plus
optional shared documents) and the synthetic generators (Poisson, bursty gamma arrivals).
Format: the "Traces" section of tools/planner/README.md."""

import csv
import datetime
import io
import math
import random

from errors import PlanError, where

REQUIRED = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
OPTIONAL = ("DocumentId", "DocumentTokens")


class Request:
    __slots__ = ("id", "arrival", "prompt", "output", "doc", "doc_tokens")

    def __init__(self, id, arrival, prompt, output, doc="", doc_tokens=0):
        self.id, self.arrival, self.prompt, self.output = id, arrival, prompt, output
        self.doc, self.doc_tokens = doc, doc_tokens

    def __repr__(self):
        return "Request(%d, t=%.4f, prompt=%d, output=%d, doc=%r/%d)" % (
            self.id, self.arrival, self.prompt, self.output, self.doc, self.doc_tokens)


def _timestamp(text):
    """Seconds (a number) or an Azure timestamp `2023-11-16 18:15:46.6805900` (7 fraction digits,
    which datetime does not take: cut to 6)."""
    try:
        v = float(text)
        if math.isfinite(v):
            return v
    except ValueError:
        pass
    t = text.strip()
    if "." in t:
        head, frac = t.rsplit(".", 1)
        t = head + "." + frac[:6]
    for fmt in ("%Y-%m-%d %H:%M:%S.%f", "%Y-%m-%d %H:%M:%S", "%Y-%m-%dT%H:%M:%S.%f", "%Y-%m-%dT%H:%M:%S"):
        try:
            return datetime.datetime.strptime(t, fmt).replace(tzinfo=datetime.timezone.utc).timestamp()
        except ValueError:
            continue
    raise ValueError("not seconds or a timestamp like 2023-11-16 18:15:46.680")


def parse_trace(text, path="<trace>"):
    rows = csv.reader(io.StringIO(text))
    try:
        header = next(rows)
    except StopIteration:
        raise PlanError(where(path, 1) + ": empty file (needs a header: %s)" % ",".join(REQUIRED))
    header = [h.strip() for h in header]
    for col in REQUIRED:
        if col not in header:
            raise PlanError(where(path, 1, col) + ": missing column (header: %s)" % ",".join(header))
    if ("DocumentId" in header) != ("DocumentTokens" in header):
        raise PlanError(where(path, 1, "DocumentTokens" if "DocumentId" in header else "DocumentId") +
                        ": DocumentId and DocumentTokens come together")
    col = {h: i for i, h in enumerate(header)}
    reqs, docs, t0 = [], {}, None
    for lineno, row in enumerate(rows, start=2):
        if not row or all(not c.strip() for c in row):
            continue
        if len(row) != len(header):
            raise PlanError(where(path, lineno) + ": %d fields, the header has %d" % (len(row), len(header)))

        def field(name):
            return row[col[name]].strip()

        def whole(name, lo):
            v = field(name)
            try:
                n = int(v)
            except ValueError:
                raise PlanError(where(path, lineno, name) + ": not a whole number (%r)" % v)
            if n < lo:
                raise PlanError(where(path, lineno, name) + ": must be >= %d (got %d)" % (lo, n))
            return n

        try:
            ts = _timestamp(field("TIMESTAMP"))
        except ValueError as e:
            raise PlanError(where(path, lineno, "TIMESTAMP") + ": %s (%r)" % (e, field("TIMESTAMP")))
        prompt = whole("ContextTokens", 1)
        output = whole("GeneratedTokens", 1)
        doc, doc_tokens = "", 0
        if "DocumentId" in col and field("DocumentId"):
            doc = field("DocumentId")
            doc_tokens = whole("DocumentTokens", 1)
            if doc_tokens >= prompt:
                raise PlanError(where(path, lineno, "DocumentTokens") +
                                ": %d must be below ContextTokens %d (the prompt goes on after it)" % (doc_tokens, prompt))
            if docs.setdefault(doc, doc_tokens) != doc_tokens:
                raise PlanError(where(path, lineno, "DocumentTokens") + ": document %r has %d tokens on an earlier line" %
                                (doc, docs[doc]))
        if t0 is None:
            t0 = ts
        if reqs and ts < t0 + reqs[-1].arrival:
            raise PlanError(where(path, lineno, "TIMESTAMP") + ": goes back in time (rows must be in arrival order)")
        reqs.append(Request(len(reqs), ts - t0, prompt, output, doc, doc_tokens))
    if not reqs:
        raise PlanError(where(path, 2) + ": no requests after the header")
    return reqs


def load_trace(path):
    try:
        with open(path, encoding="utf-8", newline="") as f:
            return parse_trace(f.read(), path)
    except OSError as e:
        raise PlanError(where(path) + ": cannot read (%s)" % e.strerror)


def write_trace(reqs, f):
    has_docs = any(r.doc for r in reqs)
    w = csv.writer(f, lineterminator="\n")
    w.writerow(list(REQUIRED) + (list(OPTIONAL) if has_docs else []))
    for r in reqs:
        row = ["%.6f" % r.arrival, r.prompt, r.output]
        if has_docs:
            row += [r.doc, r.doc_tokens if r.doc else ""]
        w.writerow(row)


def parse_range(text, name):
    """`128` or `64:256` (uniform, inclusive) → (lo, hi)."""
    try:
        parts = [int(x) for x in str(text).split(":")]
    except ValueError:
        raise PlanError("%s: not N or LO:HI (%r)" % (name, text))
    lo, hi = (parts[0], parts[0]) if len(parts) == 1 else tuple(parts) if len(parts) == 2 else (0, -1)
    if lo < 1 or hi < lo:
        raise PlanError("%s: needs 1 <= LO <= HI (%r)" % (name, text))
    return lo, hi


def synthetic(n, rate, prompt=(128, 128), output=(32, 32), arrivals="poisson", cv=1.0, seed=0,
              documents=0, document_tokens=0, document_share=0.0):
    """n requests at `rate` per second. arrivals: poisson (exponential gaps) or gamma (gaps of mean
    1/rate and coefficient of variation cv: cv > 1 is bursty). With documents > 0, a request uses
    one of them (uniformly) with probability document_share, its prompt being the document's
    document_tokens followed by its own prompt tokens."""
    if n < 1:
        raise PlanError("requests: must be >= 1")
    if not rate > 0:
        raise PlanError("rate: must be > 0")
    if arrivals not in ("poisson", "gamma"):
        raise PlanError("arrivals: poisson or gamma (got %r)" % arrivals)
    if not cv > 0:
        raise PlanError("cv: must be > 0")
    rng = random.Random(seed)
    reqs, t = [], 0.0
    for i in range(n):
        if i:
            if arrivals == "poisson":
                t += rng.expovariate(rate)
            else:
                k = 1.0 / (cv * cv)
                t += rng.gammavariate(k, 1.0 / (k * rate))
        p = rng.randint(*prompt)
        o = rng.randint(*output)
        doc, dt = "", 0
        if documents > 0 and rng.random() < document_share:
            doc = "doc%d" % rng.randrange(documents)
            dt = document_tokens
            p += dt
        reqs.append(Request(i, t, p, o, doc, dt))
    return reqs
