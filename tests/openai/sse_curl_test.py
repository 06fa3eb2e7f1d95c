"""Server-sent events on the router's HTTP API as `curl -N` sees them (docs/design.md, HTTP API): the
Content-Type, one `data: ` line per event, events separated by a blank line, the usage chunk last
with stream_options.include_usage, the closing `data: [DONE]`, events arriving while the
generation still runs, and a killed curl freeing its request's KV blocks. Plus /health and the JSON errors curl users get. One local cluster on
127.0.0.1 (tests/openai/harness.py), stopped whatever happens.

    python3 tests/openai/sse_curl_test.py --source-dir . --bin-dir build
"""

import argparse
import json
import subprocess
import sys
import time
import unittest
import urllib.request

import harness

ARGS = None
C = None


def setUpModule():
    global C
    C = harness.Cluster(ARGS.source_dir, ARGS.bin_dir, second_router=False)


def curl(path, body=None, key="admin", extra=()):
    """curl -N: (headers text, body bytes, exit code)."""
    cmd = ["curl", "-N", "-sS", "--max-time", "120", "-D", "-", C.http + path] + list(extra)
    if key:
        cmd += ["-H", "Authorization: Bearer " + C.keys[key]]
    if body is not None:
        cmd += ["-H", "Content-Type: application/json", "-d", json.dumps(body)]
    out = subprocess.run(cmd, capture_output=True, timeout=150)
    head, _, rest = out.stdout.partition(b"\r\n\r\n")
    return head.decode("latin-1").lower(), rest, out.returncode


def free_blocks():
    """yoco_kv_cache_blocks_free on the decode worker's /metrics."""
    text = urllib.request.urlopen("http://%s/metrics" % C.info["decode"][0]["metrics"], timeout=30).read().decode()
    return next(int(float(line.split()[1])) for line in text.splitlines()
                if line.startswith("yoco_kv_cache_blocks_free"))


def model():
    _, body, rc = curl("/v1/models")
    assert rc == 0
    return json.loads(body)["data"][0]["id"]


class Sse(unittest.TestCase):
    def events(self, raw):
        """The stream split as a client must split it; checks the framing on the way."""
        text = raw.decode("utf-8")
        self.assertTrue(text.endswith("\n\n"), repr(text[-40:]))
        events = text[:-2].split("\n\n")
        for e in events:
            self.assertNotIn("\n", e, "one data line per event: %r" % e)
            self.assertTrue(e.startswith("data: "), repr(e))
        self.assertEqual(events[-1], "data: [DONE]")
        self.assertEqual(sum(e == "data: [DONE]" for e in events), 1)
        return [json.loads(e[len("data: "):]) for e in events[:-1]]

    def stream(self, path, body):
        head, raw, rc = curl(path, body)
        self.assertEqual(rc, 0)
        self.assertTrue(head.startswith("http/1.1 200"), head)
        self.assertIn("content-type: text/event-stream", head)
        return self.events(raw)

    def test_completions_stream_framing_and_usage_last(self):
        chunks = self.stream("/v1/completions", {"model": model(), "prompt": "In the beginning", "max_tokens": 12,
                                                 "temperature": 0, "stream": True,
                                                 "stream_options": {"include_usage": True}})
        self.assertGreater(len(chunks), 2)
        for c in chunks[:-1]:
            self.assertEqual(c["object"], "text_completion")
            self.assertEqual(len(c["choices"]), 1)
            self.assertIsNone(c.get("usage"))
        last = chunks[-1]
        self.assertEqual(last["choices"], [])
        self.assertEqual(last["usage"]["completion_tokens"], 12)
        self.assertEqual(last["usage"]["total_tokens"], last["usage"]["prompt_tokens"] + 12)
        self.assertEqual(chunks[-2]["choices"][0]["finish_reason"], "length")

    def test_no_usage_chunk_without_include_usage(self):
        chunks = self.stream("/v1/completions", {"model": model(), "prompt": "And God said", "max_tokens": 5,
                                                 "temperature": 0, "stream": True})
        self.assertTrue(all(c["choices"] for c in chunks))
        self.assertTrue(all(c.get("usage") is None for c in chunks))

    def test_chat_stream_framing(self):
        chunks = self.stream("/v1/chat/completions",
                             {"model": model(), "messages": [{"role": "user", "content": "Say amen."}],
                              "max_tokens": 6, "temperature": 0, "stream": True,
                              "stream_options": {"include_usage": True}})
        self.assertEqual(chunks[0]["object"], "chat.completion.chunk")
        self.assertEqual(chunks[0]["choices"][0]["delta"].get("role"), "assistant")
        self.assertEqual(chunks[-1]["choices"], [])
        self.assertEqual(chunks[-1]["usage"]["completion_tokens"], 6)
        self.assertEqual([c["choices"][0]["finish_reason"] for c in chunks[:-1] if c["choices"][0].get("finish_reason")],
                         ["length"])

    def test_events_arrive_while_generating(self):
        """curl -N prints each event as it comes: the first arrives long before the last."""
        body = {"model": model(), "prompt": "In the beginning", "max_tokens": 300, "temperature": 0, "stream": True,
                "ignore_eos": True}
        p = subprocess.Popen(["curl", "-N", "-sS", "--max-time", "120", C.http + "/v1/completions", "-H",
                              "Authorization: Bearer " + C.keys["admin"], "-H", "Content-Type: application/json",
                              "-d", json.dumps(body)], stdout=subprocess.PIPE)
        try:
            first = p.stdout.readline()
            running = p.poll() is None
            rest = p.stdout.read()
        finally:
            p.stdout.close()
            p.wait(timeout=150)
        self.assertTrue(first.startswith(b"data: {"), first)
        self.assertTrue(running, "curl had already finished when the first event arrived: not streamed")
        self.assertTrue(rest.endswith(b"data: [DONE]\n\n"))

    def test_killing_curl_cancels_the_request_and_frees_its_blocks(self):
        """The decode worker's free KV blocks drop while curl streams and come back once curl is killed."""
        before = free_blocks()
        body = {"model": model(), "prompt": "In the beginning " * 100, "max_tokens": 3500, "ignore_eos": True,
                "stream": True}
        p = subprocess.Popen(["curl", "-N", "-sS", "--max-time", "120", C.http + "/v1/completions", "-H",
                              "Authorization: Bearer " + C.keys["admin"], "-H", "Content-Type: application/json",
                              "-d", json.dumps(body)], stdout=subprocess.PIPE)
        try:
            self.assertTrue(p.stdout.readline().startswith(b"data: {"))
            t0 = time.monotonic()
            for _ in range(40):  # one event per token: the pace of this stream
                p.stdout.readline()
            per_token = (time.monotonic() - t0) / 40
            self.assertLess(free_blocks(), before)
        finally:
            p.kill()
            p.stdout.close()
            p.wait()
        # Freed in half the time the rest of the generation would take: cancelled, not finished.
        rest = per_token * (3500 - 41)
        wait = max(2.0, min(30.0, rest / 2))
        deadline = time.monotonic() + wait
        while free_blocks() != before and time.monotonic() < deadline:
            time.sleep(0.05)
        self.assertEqual(free_blocks(), before, "not freed within %.1f s; the rest of the stream: %.1f s"
                         % (wait, rest))

    def test_health_and_errors(self):
        head, body, rc = curl("/health", key=None)
        self.assertEqual(rc, 0)
        self.assertTrue(head.startswith("http/1.1 200"), head)
        head, body, rc = curl("/v1/completions", {"model": model(), "prompt": "x", "max_tokens": 2}, key=None)
        self.assertTrue(head.startswith("http/1.1 401"), head)
        self.assertIn("content-type: application/json", head)
        self.assertIn("message", json.loads(body)["error"])
        # A streaming request refused before it starts is a plain JSON error, not an event stream.
        head, body, rc = curl("/v1/completions", {"model": model(), "prompt": "x", "max_tokens": 2, "stream": True,
                                                  "temperature": -1})
        self.assertTrue(head.startswith("http/1.1 400"), head)
        self.assertEqual(json.loads(body)["error"]["param"], "temperature")


def main():
    global ARGS
    p = argparse.ArgumentParser()
    p.add_argument("--source-dir", required=True)
    p.add_argument("--bin-dir", required=True)
    ARGS, rest = p.parse_known_args()
    prog = unittest.main(argv=[sys.argv[0]] + rest, exit=False, verbosity=2)
    if C is not None:
        C.stop(failed=not prog.result.wasSuccessful())
    sys.exit(0 if prog.result.wasSuccessful() else 1)


if __name__ == "__main__":
    main()
