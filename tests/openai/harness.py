"""The local cluster for the HTTP API tests (tests/openai/): deploy/local/cluster.py with the router's
HTTP listener on 127.0.0.1 (a port chosen at run time), API keys, and a ChatML chat template; plus a
second router on the same workers with neither keys nor a template. Everything is stopped by
Cluster.stop(), which the tests call from tearDownModule and which also runs at interpreter exit.

Python standard library only: the tests' virtualenv (build/.venv) adds the openai SDK.
"""

import atexit
import ctypes
import hashlib
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
CHATML = os.path.join(HERE, "..", "data", "chat_templates", "chatml.jinja")
READY_SECONDS = 180
PR_SET_PDEATHSIG = 1
_libc = ctypes.CDLL(None, use_errno=True)


def _die_with_parent():
    _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)  # a test killed by ctest leaves nothing behind


def key_entry(name, key, admin=False, scopes=None, max_context=0):
    """One entry of the router's --api-keys file: a salted SHA-256 of the key (docs/design.md §9b)."""
    salt = secrets.token_hex(16)
    e = {"name": name, "salt": salt, "sha256": hashlib.sha256(bytes.fromhex(salt) + key.encode()).hexdigest(),
         "max_concurrent": 0, "tokens_per_minute": 0, "max_context": max_context, "admin": admin}
    if scopes:
        e["scopes"] = scopes
    return e


def new_key():
    return "yoco-" + secrets.token_hex(24)


def read_json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def tail(path, n=25):
    try:
        with open(path, "rb") as f:
            return b"\n".join(f.read().splitlines()[-n:]).decode("utf-8", "replace")
    except OSError:
        return "(no %s)" % path


class Cluster:
    """Router (HTTP + gRPC) + 1 prefill + 1 decode worker on loopback, and a bare second router."""

    def __init__(self, source_dir, bin_dir, keys=True, chat_template=True, second_router=True, threads=1,
                 secure=False):
        self.source_dir, self.bin_dir = os.path.abspath(source_dir), os.path.abspath(bin_dir)
        self.model = os.path.join(self.source_dir, "models", "kjv-yoco")
        self.cli = os.path.join(self.bin_dir, "tools", "yoco-cli")
        self.state = tempfile.mkdtemp(prefix="yoco-openai-test.")
        self.launcher = None
        self.bare = None  # the second router's process
        self.routers = []  # further routers (start_router)
        self.keys = {}
        self.ca = None  # with secure: the CA file that signed the router's certificate
        atexit.register(self.stop)
        try:
            self._start(keys and not secure, chat_template, second_router and not secure, threads, secure)
        except BaseException:
            self.stop(failed=True)
            raise

    # ---- start ----

    def _start(self, keys, chat_template, second_router, threads, secure):
        router_args = ["--http-port", "0"]
        if chat_template:
            router_args.append("--router-arg=--chat-template=" + CHATML)
        if keys:
            self.keys = {"admin": new_key(), "tenant": new_key(), "scorer": new_key(), "small": new_key()}
            entries = [key_entry("admin", self.keys["admin"], admin=True),
                       key_entry("tenant", self.keys["tenant"]),
                       # May score but not generate: /v1/completions answers 403.
                       key_entry("scorer", self.keys["scorer"], scopes=["score"]),
                       # A 40-token context: a longer request answers 429.
                       key_entry("small", self.keys["small"], max_context=40)]
            keys_file = os.path.join(self.state, "api-keys.json")
            with open(keys_file, "w") as f:
                json.dump({"keys": entries}, f)
            router_args.append("--router-arg=--api-keys=" + keys_file)
        cmd = [sys.executable, os.path.join(self.source_dir, "deploy", "local", "cluster.py"), "--bin-dir", self.bin_dir,
               "--model", self.model, "--prefill", "1", "--decode", "1", "--threads", str(threads),
               "--state-dir", self.state] + router_args + (["--secure"] if secure else [])
        with open(os.path.join(self.state, "launcher.out"), "wb") as out, \
                open(os.path.join(self.state, "launcher.err"), "wb") as err:
            self.launcher = subprocess.Popen(cmd, stdout=out, stderr=err, stdin=subprocess.DEVNULL,
                                             preexec_fn=_die_with_parent)
        deadline = time.monotonic() + READY_SECONDS
        cluster_json = os.path.join(self.state, "cluster.json")
        while not os.path.exists(cluster_json):
            if self.launcher.poll() is not None:
                raise RuntimeError("the cluster did not start:\n" + tail(os.path.join(self.state, "launcher.err")))
            if time.monotonic() > deadline:
                raise RuntimeError("the cluster was not ready after %d s" % READY_SECONDS)
            time.sleep(0.1)
        self.info = read_json(cluster_json)
        self.grpc = self.info["router"]["grpc"]
        if "http" not in self.info["router"]:
            raise RuntimeError("cluster.json has no router HTTP address: %r" % self.info["router"])
        self.http = ("https://" if secure else "http://") + self.info["router"]["http"]
        if secure:  # cluster.py's throwaway CA and API keys (deploy/local/secure.py)
            self.ca = self.info["tls"]["ca"]
            self.keys = dict(self.info["api_keys"])
        if second_router:
            self._start_bare(deadline)

    @staticmethod
    def _http_port(port_file):
        ports = read_json(port_file) or {}
        if "http_port" not in ports:
            raise RuntimeError("%s has no http_port: %r" % (port_file, ports))
        return int(ports["http_port"])

    def _start_bare(self, deadline):
        """A router with no API keys and no chat template on the same workers, admitting one request at a time."""
        port_file = os.path.join(self.state, "bare-router.port.json")
        args = [os.path.join(self.bin_dir, "router", "yoco-router"), "--model", self.model, "--listen", "127.0.0.1:0",
                "--metrics-listen", "127.0.0.1:0", "--http-port", "0", "--port-file", port_file, "--max-in-flight", "1",
                "--prefill", ",".join(p["grpc"] for p in self.info["prefill"]),
                "--decode", ",".join(d["grpc"] for d in self.info["decode"])]
        with open(os.path.join(self.state, "bare-router.log"), "wb") as log:
            self.bare = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         preexec_fn=_die_with_parent)
        while read_json(port_file) is None:
            if self.bare.poll() is not None:
                raise RuntimeError("the second router exited:\n" + tail(os.path.join(self.state, "bare-router.log")))
            if time.monotonic() > deadline:
                raise RuntimeError("the second router was not ready")
            time.sleep(0.1)
        self.bare_http = "http://127.0.0.1:%d" % self._http_port(port_file)
        self.bare_grpc = "127.0.0.1:%d" % read_json(port_file)["grpc_port"]

    def start_router(self, name, *args):
        """A further router with no API keys on the same workers, with `args` (stopped by stop()); its
        HTTP base URL."""
        port_file = os.path.join(self.state, name + "-router.port.json")
        cmd = [os.path.join(self.bin_dir, "router", "yoco-router"), "--model", self.model, "--listen", "127.0.0.1:0",
               "--metrics-listen", "127.0.0.1:0", "--http-port", "0", "--port-file", port_file,
               "--prefill", ",".join(p["grpc"] for p in self.info["prefill"]),
               "--decode", ",".join(d["grpc"] for d in self.info["decode"])] + list(args)
        log_path = os.path.join(self.state, name + "-router.log")
        with open(log_path, "wb") as log:
            p = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                 preexec_fn=_die_with_parent)
        self.routers.append(p)
        deadline = time.monotonic() + READY_SECONDS
        while read_json(port_file) is None:
            if p.poll() is not None:
                raise RuntimeError("router %s exited:\n%s" % (name, tail(log_path)))
            if time.monotonic() > deadline:
                raise RuntimeError("router %s was not ready" % name)
            time.sleep(0.1)
        return "http://127.0.0.1:%d" % self._http_port(port_file)

    # ---- use ----

    def cli_json(self, *args, key=None):
        """yoco-cli against the router's gRPC API; its --json output."""
        env = dict(os.environ)
        env.pop("YOCO_API_KEY", None)
        if key is not None or self.keys:
            env["YOCO_API_KEY"] = key if key is not None else self.keys["admin"]
        out = subprocess.run([self.cli, args[0], "--router", self.grpc] + list(args[1:]), env=env,
                             capture_output=True, text=True, timeout=120)
        if out.returncode != 0:
            raise RuntimeError("yoco-cli %s: exit %d: %s" % (" ".join(args), out.returncode, out.stderr))
        return json.loads(out.stdout.strip().splitlines()[-1])

    def post(self, path, body, key=None, base=None):
        """A raw JSON POST; (status, parsed body, headers)."""
        req = urllib.request.Request((base or self.http) + path, data=json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json"})
        if key is None and self.keys:
            key = self.keys["admin"]
        if key:  # "": no Authorization header
            req.add_header("Authorization", "Bearer " + key)
        try:
            with urllib.request.urlopen(req, timeout=120) as r:
                return r.status, json.loads(r.read() or b"null"), dict(r.headers)
        except urllib.error.HTTPError as e:
            raw = e.read()
            try:
                return e.code, json.loads(raw), dict(e.headers)
            except ValueError:
                return e.code, raw.decode("utf-8", "replace"), dict(e.headers)

    # ---- stop ----

    def logs(self):
        out = []
        for name in sorted(os.listdir(self.state)) if os.path.isdir(self.state) else []:
            if name.endswith(".log") or name == "launcher.err":
                out.append("== %s\n%s" % (name, tail(os.path.join(self.state, name))))
        return "\n".join(out)

    def stop(self, failed=False):
        for p in self.routers + [self.bare, self.launcher]:  # the routers first: they use the launcher's workers
            if p is not None and p.poll() is None:
                p.send_signal(signal.SIGTERM)
                try:
                    p.wait(timeout=45)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
        self.bare = self.launcher = None
        self.routers = []
        if failed:
            sys.stderr.write(self.logs() + "\n")
        if os.path.isdir(self.state):
            shutil.rmtree(self.state, ignore_errors=True)
