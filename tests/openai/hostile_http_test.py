"""The router's front door under hostile clients (issue 33; docs/design.md, OpenAI HTTP API): every
probe gets a clear answer in OpenAI's error shape and never a 5xx, and every process is alive and
answering at the end. Raw sockets, so the bytes sent are exactly the bytes written here:

  - a fuzzing loop over all 256 byte values in each standard and custom header's value;
  - the issue's own cases: a TAB or non-ASCII in `Authorization`, invalid UTF-8 (bytes, overlongs,
    surrogates) in every string field of the HTTP API and of the gRPC API (raw protobuf);
  - the smaller defects: a 7 MB prompt, seed 2^70, a UTF-8 BOM, HTTP/1.0 streaming, too many chat
    messages, NaN/Infinity, `Transfer-Encoding: gzip, chunked`, obs-folded header lines;
  - special tokens written in text (`<|endoftext|>`): parsed as the token by default (scoring
    equals the token-id path, as lm-evaluation-harness scores), plain text with
    split_special_tokens; GET /tokenizer_info;
  - a connection storm against a second router whose descriptor limit is 1024 (soft and hard),
    while a client on an established connection is answered within 1 s.

One local cluster on 127.0.0.1 (tests/openai/harness.py), stopped whatever happens.

    python3 tests/openai/hostile_http_test.py --source-dir . --bin-dir build
"""

import argparse
import json
import os
import resource
import socket
import subprocess
import sys
import threading
import time
import unittest

import harness

ARGS = None
C = None
STATUSES = []  # every status the router answered in this suite: none may be 5xx


def setUpModule():
    global C
    C = harness.Cluster(ARGS.source_dir, ARGS.bin_dir, second_router=False)


def tearDownModule():
    if C is not None:
        C.stop()


def host_port(url):
    host, port = url.split("://", 1)[1].rsplit(":", 1)
    return host, int(port)


def read_response(sock, deadline):
    """(status, headers dict lower-cased, body bytes) of one HTTP response, or None when the
    connection closed without one. Reads Content-Length, chunked, or close-delimited bodies."""
    buf = b""
    while b"\r\n\r\n" not in buf:
        sock.settimeout(max(0.05, deadline - time.monotonic()))
        try:
            got = sock.recv(65536)
        except (socket.timeout, ConnectionResetError):
            return None
        if not got:
            return None
        buf += got
    head, _, rest = buf.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {}
    for line in lines[1:]:
        k, _, v = line.partition(":")
        headers[k.strip().lower()] = v.strip()

    def more():
        sock.settimeout(max(0.05, deadline - time.monotonic()))
        try:
            return sock.recv(65536)
        except (socket.timeout, ConnectionResetError):
            return b""

    if "content-length" in headers:
        n = int(headers["content-length"])
        while len(rest) < n:
            got = more()
            if not got:
                break
            rest += got
        body = rest[:n]
    elif headers.get("transfer-encoding", "").lower() == "chunked":
        while not rest.endswith(b"0\r\n\r\n"):
            got = more()
            if not got:
                break
            rest += got
        body, data = b"", rest
        while data:
            size_line, _, data = data.partition(b"\r\n")
            size = int(size_line.split(b";")[0] or b"0", 16)
            if size == 0:
                break
            body += data[:size]
            data = data[size + 2:]
    else:  # close-delimited
        while True:
            got = more()
            if not got:
                break
            rest += got
        body = rest
    STATUSES.append(status)
    return status, headers, body


def raw(data, base=None, timeout=60):
    """Sends `data` on a fresh connection; the response as read_response gives it."""
    with socket.create_connection(host_port(base or C.http), timeout=timeout) as s:
        s.sendall(data)
        return read_response(s, time.monotonic() + timeout)


def request(method, path, body=b"", headers=(), version=b"HTTP/1.1", base=None, timeout=60):
    if isinstance(body, (dict, list)):
        body = json.dumps(body).encode()
    lines = [method.encode() + b" " + path.encode() + b" " + version, b"Host: 127.0.0.1", b"Connection: close"]
    has_len = any(h.lower().startswith((b"content-length:", b"transfer-encoding:")) for h in headers)
    if body and not has_len:
        lines.append(b"Content-Length: " + str(len(body)).encode())
    if body:
        lines.append(b"Content-Type: application/json")
    lines += list(headers)
    return raw(b"\r\n".join(lines) + b"\r\n\r\n" + body, base=base, timeout=timeout)


def auth(key="admin"):
    return b"Authorization: Bearer " + C.keys[key].encode()


def error_of(resp):
    """The parsed OpenAI error of a response, checking its shape and that the body is valid JSON."""
    status, _, body = resp
    doc = json.loads(body.decode("utf-8"))  # strict: raw non-UTF-8 bytes fail here
    err = doc["error"]
    assert set(err) >= {"message", "type", "param", "code"}, doc
    return err


def router_alive():
    r = request("GET", "/v1/models", headers=[auth()], timeout=30)
    return r is not None and r[0] == 200


class HeaderFuzz(unittest.TestCase):
    def test_authorization_issue_cases(self):
        for value in (b"Bearer abc\tdef", b"Bearer \xff\xfe", "Bearer café".encode()):
            r = request("POST", "/v1/completions", {"prompt": "In the beginning", "max_tokens": 2},
                        headers=[b"Authorization: " + value])
            self.assertIsNotNone(r, value)
            self.assertEqual(r[0], 400, (value, r))
            self.assertIn("Authorization", error_of(r)["message"])
            self.assertTrue(router_alive(), value)

    def test_every_byte_in_every_header(self):
        names = [b"Authorization", b"Content-Type", b"Accept", b"User-Agent", b"Accept-Encoding", b"Connection",
                 b"Expect", b"Cookie", b"X-Request-Id", b"OpenAI-Organization", b"OpenAI-Project",
                 b"X-Stainless-Lang", b"X-Custom"]
        body = json.dumps({"prompt": "In the beginning"}).encode()
        bad = []
        for name in names:
            for b in range(256):
                value = (b"Bearer " + C.keys["admin"].encode() if name == b"Authorization" else b"abc") + bytes([b]) + \
                    b"def"
                hdrs = [name + b": " + value] + ([] if name == b"Authorization" else [auth()])
                r = request("POST", "/tokenize", body, headers=hdrs, timeout=30)
                if r is None or r[0] >= 500:
                    bad.append((name, b, r and r[0]))
                elif r[0] >= 400 and r[2]:
                    error_of(r)
        self.assertEqual(bad, [])
        self.assertTrue(router_alive())


# A string field with bytes that are not UTF-8, written into a JSON body as raw bytes.
BAD_UTF8 = [b"\xff\xfe", b"\xc0\xaf", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"ab\x80"]


def body_with(template, bad):
    """`template` is JSON text holding the marker "@@"; the marker becomes the bad bytes."""
    return template.encode().replace(b"@@", bad)


class InvalidUtf8(unittest.TestCase):
    CASES = [  # (path, body template, param named)
        ("/v1/completions", '{"prompt": "In the @@ beginning", "max_tokens": 2}', "prompt"),
        ("/v1/completions", '{"prompt": ["ok", "@@"], "max_tokens": 2}', "prompt"),
        ("/v1/completions", '{"prompt": "x", "stop": ["@@"], "max_tokens": 2}', "stop"),
        ("/v1/completions", '{"prompt": "x", "model": "@@"}', "model"),
        ("/v1/completions", '{"prompt": "x", "user": "@@"}', "user"),
        ("/v1/completions", '{"prompt": "x", "request_id": "@@"}', "request_id"),
        ("/v1/completions", '{"prompt": "x", "document_ids": ["@@"]}', "document_ids"),
        ("/v1/completions", '{"prompt": "x", "suffix": "@@"}', "suffix"),
        ("/v1/chat/completions", '{"messages": [{"role": "user", "content": "@@"}]}', "messages"),
        ("/v1/chat/completions", '{"messages": [{"role": "@@", "content": "x"}]}', "messages"),
        ("/v1/chat/completions", '{"messages": [{"role": "user", "content": [{"type": "text", "text": "@@"}]}]}',
         "messages"),
        ("/v1/chat/completions", '{"messages": [{"role": "user", "content": "x", "name": "@@"}]}', "messages"),
        ("/v1/chat/completions", '{"messages": [{"role": "user", "content": "x"}], "stop": "@@"}', "stop"),
        ("/v1/chat/completions", '{"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "@@"}]}',
         "tools"),
        ("/v1/chat/completions",
         '{"messages": [{"role": "user", "content": "x"}], "chat_template_kwargs": {"k": "@@"}}',
         "chat_template_kwargs"),
        ("/tokenize", '{"prompt": "@@"}', "prompt"),
        ("/tokenize", '{"messages": [{"role": "user", "content": "@@"}]}', "messages"),
    ]

    def test_every_string_field_of_the_http_api(self):
        for path, template, param in self.CASES:
            for bad in BAD_UTF8:
                r = request("POST", path, body_with(template, bad), headers=[auth()])
                self.assertIsNotNone(r, (path, template, bad))
                self.assertEqual(r[0], 400, (path, template, bad, r))
                err = error_of(r)
                self.assertEqual(err["param"], param, (template, bad, err))
                self.assertIn("UTF-8", err["message"])
        self.assertTrue(router_alive())

    def test_every_string_field_of_the_grpc_api(self):
        """Raw protobuf with a non-UTF-8 string field, sent as bytes: INVALID_ARGUMENT, never a crash."""
        import grpc  # Debian's python3-grpcio

        def field(num, payload):  # a length-delimited field
            return bytes([(num << 3) | 2, len(payload)]) + payload

        ids = field(3, field(1, bytes([5, 6])))  # tokens: TokenIds { ids: [5, 6] } (packed)
        cases = [  # (method, request bytes)
            ("Generate", field(2, b"In the \xff\xfe beginning")),
            ("Generate", field(1, b"\xc0\xaf") + field(2, b"x")),
            ("Generate", field(2, b"x") + field(4, b"\xed\xa0\x80")),
            ("Generate", field(2, b"x") + field(7, b"ab\x80")),
            ("Score", field(2, b"\xff\xfe\xfd")),
            ("Score", field(1, b"\xff") + ids),
            ("Tokenize", field(1, b"\xf4\x90\x80\x80")),
            ("CacheDocument", field(1, b"\xff\xfe")),
            ("GetDocument", field(1, b"\xff\xfe")),
            ("DeleteDocument", field(1, b"\xff\xfe")),
        ]
        md = (("authorization", "Bearer " + C.keys["admin"]),)
        with grpc.insecure_channel(C.grpc) as ch:
            for method, payload in cases:
                path = "/yoco.v1.Yoco/" + method
                if method == "Generate":
                    call = ch.unary_stream(path, request_serializer=None, response_deserializer=None)
                    try:
                        list(call(payload, metadata=md, timeout=60))
                        code = grpc.StatusCode.OK
                    except grpc.RpcError as e:
                        code = e.code()
                else:
                    call = ch.unary_unary(path, request_serializer=None, response_deserializer=None)
                    try:
                        call(payload, metadata=md, timeout=60)
                        code = grpc.StatusCode.OK
                    except grpc.RpcError as e:
                        code = e.code()
                self.assertEqual(code, grpc.StatusCode.INVALID_ARGUMENT, (method, payload))
        self.assertTrue(router_alive())


class SmallDefects(unittest.TestCase):
    def test_seven_megabyte_prompt_is_not_a_rate_limit(self):
        words = ("In the beginning God created the heaven and the earth. " * 131072)[:7 * 1000 * 1000]
        r = request("POST", "/v1/completions", {"prompt": words, "max_tokens": 1}, headers=[auth()], timeout=300)
        self.assertIsNotNone(r)
        self.assertIn(r[0], (400, 413), r[:2])
        err = error_of(r)
        self.assertNotEqual(err["type"], "rate_limit_error")
        self.assertTrue(router_alive())

    def test_seed_past_int64(self):
        r = request("POST", "/v1/completions", b'{"prompt": "x", "max_tokens": 1, "seed": 1180591620717411303424}',
                    headers=[auth()])
        self.assertEqual(r[0], 400)
        self.assertEqual(error_of(r)["param"], "seed")

    def test_bom_gives_a_valid_json_error(self):
        r = request("POST", "/v1/completions", b'\xef\xbb\xbf{"prompt": "x", "max_tokens": 1}', headers=[auth()])
        self.assertEqual(r[0], 400)
        self.assertIn("byte order mark", error_of(r)["message"])

    def test_nan_and_infinity_name_the_field(self):
        for text, param in ((b'{"prompt": "x", "temperature": NaN}', "temperature"),
                            (b'{"prompt": "x", "top_p": Infinity}', "top_p"),
                            (b'{"prompt": "x", "presence_penalty": -Infinity}', "presence_penalty")):
            r = request("POST", "/v1/completions", text, headers=[auth()])
            self.assertEqual(r[0], 400)
            self.assertEqual(error_of(r)["param"], param, text)

    def test_too_many_chat_messages_blame_messages(self):
        msgs = [{"role": "user", "content": "In the beginning God created the heaven and the earth."}] * 2000
        r = request("POST", "/v1/chat/completions", {"messages": msgs, "max_tokens": 4}, headers=[auth()])
        self.assertEqual(r[0], 400, r)
        err = error_of(r)
        self.assertEqual(err["param"], "messages", err)
        self.assertTrue(err["message"].startswith("messages"), err)

    def test_http10_stream_is_not_chunked(self):
        r = request("POST", "/v1/completions", {"prompt": "In the beginning", "max_tokens": 4, "stream": True},
                    headers=[auth()], version=b"HTTP/1.0")
        self.assertIsNotNone(r)
        status, headers, body = r
        self.assertEqual(status, 200, r)
        self.assertNotIn("chunked", headers.get("transfer-encoding", ""))
        self.assertIn(b"data: [DONE]", body)
        self.assertTrue(body.startswith(b"data: "), body[:80])

    def test_gzip_chunked_is_refused(self):
        body = b'{"prompt": "x", "max_tokens": 1}'
        chunked = hex(len(body))[2:].encode() + b"\r\n" + body + b"\r\n0\r\n\r\n"
        r = raw(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\n" + auth() +
                b"\r\nContent-Type: application/json\r\nTransfer-Encoding: gzip, chunked\r\n\r\n" + chunked)
        self.assertIsNotNone(r)
        self.assertEqual(r[0], 400, r[:2])

    def test_obs_fold_is_refused(self):
        body = b'{"prompt": "x", "max_tokens": 1}'
        r = raw(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\n" + auth() +
                b"\r\nX-Folded: one\r\n  two\r\nContent-Type: application/json\r\nContent-Length: " +
                str(len(body)).encode() + b"\r\n\r\n" + body)
        self.assertIsNotNone(r)
        self.assertEqual(r[0], 400, r[:2])


class SpecialTokens(unittest.TestCase):
    def echo_logprobs(self, prompt, **extra):
        body = dict({"prompt": prompt, "max_tokens": 0, "echo": True, "logprobs": 0}, **extra)
        r = request("POST", "/v1/completions", body, headers=[auth()], timeout=120)
        self.assertEqual(r[0], 200, r)
        return json.loads(r[2])["choices"][0]["logprobs"]["token_logprobs"]

    def tokenize(self, prompt, **extra):
        r = request("POST", "/tokenize", dict({"prompt": prompt, "add_special_tokens": False}, **extra),
                    headers=[auth()])
        self.assertEqual(r[0], 200, r)
        return json.loads(r[2])["tokens"]

    def test_endoftext_in_text_is_the_special_token(self):
        passage = "In the beginning God created the heaven and the earth."
        ids = self.tokenize("<|endoftext|>" + passage)
        self.assertEqual(ids[0], 0, ids)  # <|endoftext|> is id 0 of the bundled models
        self.assertEqual(ids[1:], self.tokenize(passage))
        split = self.tokenize("<|endoftext|>" + passage, split_special_tokens=True)
        self.assertGreater(len(split), len(ids))  # written out as characters
        # lm-evaluation-harness's perplexity request: text scoring equals token-id scoring.
        by_text = self.echo_logprobs("<|endoftext|>" + passage)
        by_ids = self.echo_logprobs(ids)
        self.assertEqual(len(by_text), len(by_ids))
        for a, b in zip(by_text[1:], by_ids[1:]):
            self.assertAlmostEqual(a, b, places=5)
        self.assertNotEqual(len(self.echo_logprobs("<|endoftext|>" + passage, split_special_tokens=True)),
                            len(by_ids))

    def test_tokenizer_info(self):
        r = request("GET", "/tokenizer_info", headers=[auth()])
        self.assertEqual(r[0], 200, r)
        info = json.loads(r[2])
        self.assertIsInstance(info["tokenizer_class"], str)
        with open(os.path.join(C.model, "tokenizer_config.json")) as f:
            config = json.load(f)
        for k, v in config.items():
            self.assertEqual(info[k], v, k)


class ConnectionStorm(unittest.TestCase):
    def test_storm_at_1024_descriptors(self):
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))  # this client holds thousands
        port_file = os.path.join(C.state, "storm-router.port.json")
        log_path = os.path.join(C.state, "storm-router.log")
        args = [os.path.join(C.bin_dir, "router", "yoco-router"), "--model", C.model, "--listen", "127.0.0.1:0",
                "--metrics-listen", "127.0.0.1:0", "--http-port", "0", "--port-file", port_file,
                "--prefill", ",".join(p["grpc"] for p in C.info["prefill"]),
                "--decode", ",".join(d["grpc"] for d in C.info["decode"])]

        def limit():  # soft and hard: the router cannot raise itself past 1024
            resource.setrlimit(resource.RLIMIT_NOFILE, (1024, 1024))
            harness._die_with_parent()

        with open(log_path, "wb") as log:
            proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    preexec_fn=limit)
        held = []
        try:
            deadline = time.monotonic() + 60
            while harness.read_json(port_file) is None:
                self.assertIsNone(proc.poll(), harness.tail(log_path))
                self.assertLess(time.monotonic(), deadline)
                time.sleep(0.1)
            base = "http://127.0.0.1:%d" % harness.read_json(port_file)["http_port"]
            # A client connected before the storm keeps being answered through it.
            keep = socket.create_connection(host_port(base), timeout=30)
            slow = []
            stop = threading.Event()

            def steady():
                req = b"GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n"
                while not stop.is_set():
                    t0 = time.monotonic()
                    keep.sendall(req)
                    r = read_response(keep, t0 + 10)
                    took = time.monotonic() - t0
                    if r is None or r[0] != 200 or took > 1.0:
                        slow.append((r and r[0], round(took, 3)))
                    time.sleep(0.05)

            t = threading.Thread(target=steady)
            t.start()
            refused = 0
            for _ in range(1500):  # idle connections, far past what 1024 descriptors hold
                try:
                    held.append(socket.create_connection(host_port(base), timeout=5))
                except OSError:
                    refused += 1
            time.sleep(2)
            # Connections over the cap were answered 503 and closed, quickly.
            answered = {}
            for s in held[-50:]:
                s.settimeout(5)
                try:
                    first = s.recv(64)
                except OSError:
                    first = b""
                key = first.split(b"\r\n")[0][:12].decode("latin-1") if first else "closed"
                answered[key] = answered.get(key, 0) + 1
            for _ in range(3):  # a storm of short connections on top
                for _ in range(300):
                    try:
                        socket.create_connection(host_port(base), timeout=5).close()
                    except OSError:
                        pass
            stop.set()
            t.join()
            self.assertIsNone(proc.poll(), "the router died: " + harness.tail(log_path))
            self.assertEqual(slow, [], "requests on the established connection were slow or failed")
            self.assertTrue(all(k in ("HTTP/1.1 503", "closed") for k in answered), answered)
            self.assertIn("HTTP/1.1 503", answered)
            for s in held:
                s.close()
            held = []
            keep.close()
            time.sleep(1)
            r = request("GET", "/v1/models", base=base)
            self.assertEqual(r[0], 200)
            with open("/proc/%d/status" % proc.pid) as f:
                threads = int(next(line.split()[1] for line in f if line.startswith("Threads:")))
            self.assertLess(threads, 200, "threads after the storm")
        finally:
            for s in held:
                s.close()
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


class ZzLast(unittest.TestCase):  # unittest runs classes by name: this one after the others
    def test_no_5xx_and_everything_alive(self):
        self.assertEqual([s for s in STATUSES if s >= 500], [])
        self.assertTrue(router_alive())
        self.assertIsNone(C.launcher.poll(), "the cluster launcher exited")
        for role in ("prefill", "decode"):
            for w in C.info[role]:
                with socket.create_connection(host_port("http://" + w["metrics"]), timeout=10) as s:
                    s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                    r = read_response(s, time.monotonic() + 10)
                    self.assertEqual(r[0], 200, (role, w))


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--source-dir", required=True)
    p.add_argument("--bin-dir", required=True)
    ARGS, rest = p.parse_known_args()
    unittest.main(argv=[sys.argv[0]] + rest, verbosity=2)
