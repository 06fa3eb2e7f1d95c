#!/usr/bin/env python3
"""The local cluster (docs/design.md §7): router + prefill + decode workers on loopback, in the foreground.

    python3 deploy/local/cluster.py --bin-dir build --model models/kjv-yoco [--prefill 1] [--decode 1] [--secure]
    python3 deploy/local/cluster.py stop --state-dir DIR

Workers start first (decode, then prefill), each on 127.0.0.1:0 ports that it reports in its port
file; the router starts last, pointed at them. When all are ready, STATE_DIR/cluster.json holds
every address and pid and one line `cluster ready: router 127.0.0.1:P` goes to stdout (the router's
OpenAI-compatible HTTP API, --http-port, is cluster.json's router "http", and one more line). A worker
that dies later is reported, never restarted (tests kill workers on purpose). SIGINT/SIGTERM
stops everything gracefully. Python 3 standard library only (--secure also needs the openssl CLI).

--secure: TLS on every listener, mTLS between the router and the workers, API keys on the router
(deploy/local/secure.py makes throwaway CAs, certificates and keys in STATE_DIR/tls); cluster.json
then also holds "tls" (the CA and a client certificate) and "api_keys" (the keys themselves).
"""

import argparse
import ctypes
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import secure as secure_mode  # noqa: E402  (beside this file)

PR_SET_PDEATHSIG = 1
STOP_GRACE_SECONDS = 30.0

# A SIGKILLed launcher cannot clean up, so each child asks the kernel to kill it when its
# parent dies. Loaded before any fork: the child only calls into it.
_libc = ctypes.CDLL(None, use_errno=True)


def log(msg):
    print("cluster.py: " + msg, file=sys.stderr, flush=True)


def write_json_atomic(path, obj):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=2)
        f.write("\n")
    os.replace(tmp, path)


def tail(path, lines=20):
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 16384))
            return b"\n".join(f.read().splitlines()[-lines:]).decode("utf-8", "replace")
    except OSError as e:
        return "(cannot read %s: %s)" % (path, e)


def loopback(listen):
    """The address clients dial for a listen address: wildcards become 127.0.0.1."""
    host = listen.rsplit(":", 1)[0]
    return "127.0.0.1" if host in ("", "0.0.0.0", "[::]", "::") else host


class Child:
    def __init__(self, role, index, binary, args, state_dir, env, listen_host):
        self.role, self.index = role, index
        self.name = role if index is None else "%s-%d" % (role, index)
        self.binary = binary
        self.port_file = os.path.join(state_dir, self.name + ".port.json")
        self.log_path = os.path.join(state_dir, self.name + ".log")
        self.args = args + ["--port-file", self.port_file]
        self.env = env
        self.listen_host = listen_host
        self.proc = None
        self.ports = None  # the parsed port file once ready
        self.reported_exit = False

    def start(self):
        try:
            os.unlink(self.port_file)  # a stale one from an earlier run would read as ready
        except FileNotFoundError:
            pass
        parent = os.getpid()

        def preexec():
            os.setpgid(0, 0)  # a terminal's Ctrl-C reaches the launcher only; it stops the children in order
            _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
            if os.getppid() != parent:  # the launcher died before prctl took effect
                os._exit(1)

        with open(self.log_path, "wb") as logf:
            self.proc = subprocess.Popen([self.binary] + self.args, stdin=subprocess.DEVNULL, stdout=logf,
                                         stderr=subprocess.STDOUT, env=self.env, preexec_fn=preexec,
                                         close_fds=True)

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def poll_ready(self):
        """True once the port file is there and whole (the servers write it atomically)."""
        if self.ports is not None:
            return True
        try:
            with open(self.port_file) as f:
                ports = json.load(f)
        except (OSError, ValueError):
            return False
        if "grpc_port" not in ports or "metrics_port" not in ports:
            return False
        self.ports = ports
        return True

    def describe(self):
        d = {
            "grpc": "%s:%d" % (self.listen_host, self.ports["grpc_port"]),
            "metrics": "127.0.0.1:%d" % self.ports["metrics_port"],
            "pid": self.proc.pid,
            "log": self.log_path,
        }
        if self.role == "decode":
            d["ucx"] = self.ports.get("ucx_address")
        if "http_port" in self.ports:
            d["http"] = "%s:%d" % (self.listen_host, self.ports["http_port"])
        return d

    def exit_text(self):
        rc = self.proc.returncode
        return "killed by signal %d" % -rc if rc < 0 else "exited with code %d" % rc


class Launcher:
    def __init__(self, opts):
        self.opts = opts
        self.children = []
        self.stop_requested = False
        self.signals = 0
        self.secure = None  # secure_mode.Secure with --secure
        self.api_keys = False  # the router was given --api-keys

    def on_signal(self, signum, frame):
        self.signals += 1
        self.stop_requested = True
        if self.signals > 1:  # a second Ctrl-C: no more waiting
            log("second signal: killing every child now")
            for c in self.children:
                if c.alive():
                    c.proc.kill()

    # ---- start-up ----

    def binaries(self):
        o = self.opts
        need = []
        if o.decode:
            need.append(("decode", os.path.join(o.bin_dir, "decode_service", "yoco-decode")))
        if o.prefill:
            need.append(("prefill", os.path.join(o.bin_dir, "prefill_service", "yoco-prefill")))
        if not o.no_router:
            need.append(("router", os.path.join(o.bin_dir, "router", "yoco-router")))
        missing = [p for _, p in need if not (os.path.isfile(p) and os.access(p, os.X_OK))]
        if missing:
            for p in missing:
                log("missing binary %s (build it: cmake --build %s --target %s)" % (p, o.bin_dir, os.path.basename(p)))
            return None
        return dict(need)

    def common_args(self, listen, threads=True):
        """Flags every process takes; the router computes nothing, so it gets no --threads."""
        o = self.opts
        args = ["--listen", listen, "--metrics-listen", "127.0.0.1:0", "--model", o.model]
        return args + ["--threads", str(o.threads)] if threads else args

    def env(self):
        env = dict(os.environ)
        env["UCX_TLS"] = self.opts.ucx_tls
        env["OMP_WAIT_POLICY"] = "passive"
        return env

    @staticmethod
    def help_text(binary):
        r = subprocess.run([binary, "--help"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        return r.stdout.decode("utf-8", "replace")

    def wait_ready(self, group, deadline):
        """Waits for every child of `group`; on failure reports the culprit and returns False."""
        while True:
            if self.stop_requested:
                return False
            for c in group:
                if not c.alive():
                    log("%s (pid %d) %s before it was ready; last lines of %s:\n%s"
                        % (c.name, c.proc.pid, c.exit_text(), c.log_path, tail(c.log_path)))
                    c.reported_exit = True
                    return False
            if all(c.poll_ready() for c in group):
                return True
            if time.monotonic() > deadline:
                for c in group:
                    if not c.poll_ready():
                        log("%s (pid %d) not ready after %g s; last lines of %s:\n%s"
                            % (c.name, c.proc.pid, self.opts.ready_timeout, c.log_path, tail(c.log_path)))
                return False
            time.sleep(0.1)

    def launch(self, group, deadline):
        self.children.extend(group)
        for c in group:
            c.start()
        return self.wait_ready(group, deadline)

    def start(self):
        o = self.opts
        bins = self.binaries()
        if bins is None:
            return False
        deadline = time.monotonic() + o.ready_timeout
        env = self.env()
        if o.secure:
            self.secure = secure_mode.Secure(o.state_dir, o.tls_reload_seconds)
        tls = lambda name, internal: self.secure.server_args(name, internal) if self.secure else []  # noqa: E731
        decode = [Child("decode", i, bins["decode"],
                        self.common_args("127.0.0.1:0") + ["--ucx-listen", "127.0.0.1:0", "--kv-blocks", str(o.kv_blocks)]
                        + tls("decode-%d" % i, True) + o.decode_arg, o.state_dir, env, "127.0.0.1")
                  for i in range(o.decode)]
        if not self.launch(decode, deadline):
            return False
        # The embedded default KV store (docs/design.md §7): a directory every prefill worker shares.
        store = []
        if o.kv_store == "dir":
            store = ["--kv-store=dir://" + os.path.join(os.path.abspath(o.state_dir), "kv-store") + "?max_bytes=1GiB"]
        elif o.kv_store != "none":
            store = ["--kv-store=" + o.kv_store]
        prefill = [Child("prefill", i, bins["prefill"],
                         self.common_args("127.0.0.1:0") + store + tls("prefill-%d" % i, True) + o.prefill_arg,
                         o.state_dir, env, "127.0.0.1") for i in range(o.prefill)]
        if not self.launch(prefill, deadline):
            return False
        if not o.no_router:
            args = self.common_args(o.router_listen, threads=False)
            if prefill:
                args += ["--prefill", ",".join(c.describe()["grpc"] for c in prefill)]
            if decode:
                args += ["--decode", ",".join(c.describe()["grpc"] for c in decode)]
            if self.secure:
                args += tls("router", False) + self.secure.router_worker_args()
                # API keys where this router has them (the flag arrived with key support).
                self.api_keys = "--api-keys" in self.help_text(bins["router"])
                if self.api_keys:
                    args += ["--api-keys", self.secure.keys_file]
            # The OpenAI-compatible HTTP API where this router has it (the flag arrived with it).
            if o.http_port >= 0 and "--http-port" in self.help_text(bins["router"]):
                args += ["--http-port", str(o.http_port)]
            router = Child("router", None, bins["router"], args + o.router_arg, o.state_dir, env,
                           loopback(o.router_listen))
            if not self.launch([router], deadline):
                return False
        return True

    def write_state(self):
        by_role = {"router": None, "prefill": [], "decode": []}
        for c in self.children:
            if c.role == "router":
                by_role["router"] = c.describe()
            else:
                by_role[c.role].append(c.describe())
        if self.secure:
            by_role.update(self.secure.describe(with_keys=self.api_keys))
        write_json_atomic(os.path.join(self.opts.state_dir, "cluster.json"), by_role)
        return by_role

    # ---- running and stopping ----

    def supervise(self):
        while not self.stop_requested:
            for c in self.children:
                if not c.alive() and not c.reported_exit:
                    c.reported_exit = True
                    log("%s (pid %d) %s; not restarting it (log: %s)" % (c.name, c.proc.pid, c.exit_text(), c.log_path))
            if all(c.reported_exit for c in self.children):
                log("every process has exited; nothing left to supervise")
                return 1
            time.sleep(0.2)
        return 0

    def stop_all(self, grace):
        # The router first, so that it stops admitting while the workers finish their work.
        for c in sorted(self.children, key=lambda c: c.role != "router"):
            if c.alive():
                c.proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + grace
        while any(c.alive() for c in self.children) and time.monotonic() < deadline:
            time.sleep(0.1)
        for c in self.children:
            if c.alive():
                log("%s (pid %d) still running after %g s: SIGKILL" % (c.name, c.proc.pid, grace))
                c.proc.kill()
        for c in self.children:
            if c.proc is not None:
                c.proc.wait()
                if not c.reported_exit:  # how each one ended: a drain exits 0 (tests read this line)
                    c.reported_exit = True
                    log("%s (pid %d) %s" % (c.name, c.proc.pid, c.exit_text()))

    def run(self):
        o = self.opts
        signal.signal(signal.SIGTERM, self.on_signal)
        signal.signal(signal.SIGINT, self.on_signal)
        pid_file = os.path.join(o.state_dir, "launcher.pid")
        with open(pid_file + ".tmp", "w") as f:
            f.write("%d\n" % os.getpid())
        os.replace(pid_file + ".tmp", pid_file)
        try:
            try:
                os.unlink(os.path.join(o.state_dir, "cluster.json"))
            except FileNotFoundError:
                pass
            if not self.start():
                stopping = self.stop_requested
                self.stop_all(STOP_GRACE_SECONDS if stopping else 5.0)
                return 0 if stopping else 1
            state = self.write_state()
            if state["router"]:
                print("cluster ready: router %s" % state["router"]["grpc"], flush=True)
                if "http" in state["router"]:
                    print("openai http api: %s://%s/v1" % ("https" if self.secure else "http", state["router"]["http"]),
                          flush=True)
            else:
                print("cluster ready: no router; decode %s; prefill %s"
                      % (",".join(d["grpc"] for d in state["decode"]) or "-",
                         ",".join(p["grpc"] for p in state["prefill"]) or "-"), flush=True)
            rc = self.supervise()
            self.stop_all(STOP_GRACE_SECONDS)
            return rc
        finally:
            try:
                os.unlink(pid_file)
            except FileNotFoundError:
                pass


def launcher_cmdline(pid):
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as f:
            return f.read().replace(b"\0", b" ").decode("utf-8", "replace")
    except OSError:
        return None


def stop(argv):
    p = argparse.ArgumentParser(prog="cluster.py stop", description="Stop the launcher recorded in STATE_DIR.")
    p.add_argument("--state-dir", required=True)
    p.add_argument("--timeout", type=float, default=STOP_GRACE_SECONDS + 10,
                   help="seconds to wait for the launcher to exit (default %(default)s)")
    o = p.parse_args(argv)
    pid_file = os.path.join(o.state_dir, "launcher.pid")
    try:
        with open(pid_file) as f:
            pid = int(f.read().strip())
    except (OSError, ValueError):
        log("no launcher running (no readable %s)" % pid_file)
        return 1
    cmdline = launcher_cmdline(pid)
    if cmdline is None or "cluster.py" not in cmdline:  # gone, or the pid now belongs to someone else
        log("no launcher running (pid %d from %s is gone)" % (pid, pid_file))
        return 1
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + o.timeout
    while launcher_cmdline(pid) is not None and time.monotonic() < deadline:
        time.sleep(0.1)
    if launcher_cmdline(pid) is not None:
        log("launcher pid %d still running after %g s" % (pid, o.timeout))
        return 1
    return 0


def parse_start(argv):
    p = argparse.ArgumentParser(
        prog="cluster.py",
        description="Start router + prefill + decode workers on loopback and supervise them in the foreground. "
                    "`cluster.py stop --state-dir DIR` stops a running one.")
    p.add_argument("--bin-dir", default="build", help="the CMake build directory (default %(default)s)")
    p.add_argument("--model", required=True, help="model directory, given to every process")
    p.add_argument("--prefill", type=int, default=1, help="prefill workers (default %(default)s)")
    p.add_argument("--decode", type=int, default=1, help="decode workers (default %(default)s)")
    p.add_argument("--state-dir", help="logs, port files, cluster.json, launcher.pid (default: a new temp dir)")
    p.add_argument("--router-listen", default="127.0.0.1:0", help="the router's gRPC address (default %(default)s)")
    p.add_argument("--http-port", type=int, default=0,
                   help="the router's OpenAI-compatible HTTP port (default 0: any free port; -1: none)")
    p.add_argument("--threads", type=int, default=1, help="compute threads per process (default %(default)s)")
    p.add_argument("--ucx-tls", default="tcp", help="UCX_TLS for the workers (default %(default)s)")
    p.add_argument("--kv-blocks", type=int, default=1024, help="KV pool blocks per decode worker (default %(default)s)")
    p.add_argument("--kv-store", default="dir",
                   help="the prefill workers' KV store: dir (STATE_DIR/kv-store, the default), none, or a spec "
                        "such as redis://127.0.0.1:6379/0 or memory:256MiB,dir:///var/cache/yoco")
    p.add_argument("--prefill-arg", action="append", default=[], metavar="ARG",
                   help="extra argument for every prefill worker, e.g. --prefill-arg=--chunk-tokens=64 (repeatable)")
    p.add_argument("--decode-arg", action="append", default=[], metavar="ARG", help="likewise for decode workers")
    p.add_argument("--router-arg", action="append", default=[], metavar="ARG", help="likewise for the router")
    p.add_argument("--no-router", action="store_true", help="start the workers only")
    p.add_argument("--secure", action="store_true",
                   help="TLS everywhere, mTLS to the workers, API keys (throwaway CAs and keys in STATE_DIR)")
    p.add_argument("--tls-reload-seconds", type=int, default=1,
                   help="with --secure: how often every process re-reads its certificate files (default %(default)s)")
    p.add_argument("--ready-timeout", type=float, default=120, help="seconds for everything to be ready (default %(default)s)")
    o = p.parse_args(argv)
    if o.prefill < 0 or o.decode < 0:
        p.error("--prefill and --decode must be >= 0")
    if not o.no_router and o.decode == 0:
        p.error("the router needs at least one decode worker (--decode >= 1)")
    if o.threads < 0 or o.kv_blocks < 1 or o.ready_timeout <= 0:
        p.error("--threads must be >= 0, --kv-blocks >= 1, --ready-timeout > 0")
    if not os.path.isdir(o.model):
        p.error("--model %s: not a directory" % o.model)
    if o.state_dir is None:
        o.state_dir = tempfile.mkdtemp(prefix="yoco-cluster-")
        log("state dir: " + o.state_dir)
    os.makedirs(o.state_dir, exist_ok=True)
    # Children run with the state dir's paths, whatever their working directory.
    o.state_dir, o.bin_dir, o.model = (os.path.abspath(x) for x in (o.state_dir, o.bin_dir, o.model))
    return o


def main(argv):
    if argv and argv[0] == "stop":
        return stop(argv[1:])
    if argv and argv[0] == "start":
        argv = argv[1:]
    return Launcher(parse_start(argv)).run()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
