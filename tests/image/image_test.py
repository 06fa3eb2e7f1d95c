#!/usr/bin/env python3
"""The CPU image, built with podman and run (ctest label image; deploy/README.md, "What CI checks").

  image_test.py --source-dir DIR --build-dir DIR --cli BUILD/tools/yoco-cli [--work-dir DIR]

1. Base images without a registry: `debootstrap --variant=minbase bookworm` from the mirror apt
   uses, packed once into WORK/debian-bookworm-minbase.tar.gz (kept: re-runs skip this), imported
   with `podman import` under every debian:* name the Dockerfile's FROM lines use.
2. `podman build --isolation chroot --network host --format docker` of deploy/docker/cpu.Dockerfile
   from a clean export of the tree (git's tracked files: no build outputs), with its .dockerignore.
   Every podman call uses a private storage root under WORK (vfs, cgroupfs), never the host's.
3. The image: the binaries' shared libraries resolve inside it (ldd), it runs as uid 10001 and has
   a HEALTHCHECK, every container the kustomize manifests give the CPU image runs a command the
   image has with flags and config keys its --help lists, and the model they name is in the image,
   byte for byte the bundled one.
4. A router + prefill + decode cluster from the image (deploy/local/cluster.py through wrappers):
   `podman run` where it works on this machine, else in a chroot of `podman image mount` as uid
   10001 (tests/image/in_image.sh). A greedy generation equals the host build's, a structured output
   (--regex) matches its pattern (the image has xgrammar); SIGTERM during a
   stream drains: the stream completes and every process exits 0.
5. Clean-up, also on failure: no container, image, mount or private storage is left; the host's
   podman storage is as it was.
Prints one line per check, the path that ran, the image size and each step's time; exits 1 on a
failure, 77 (skipped) when not root (mounts and chroot need it).
"""

import argparse
import ctypes
import filecmp
import json
import os
import re
import select
import shlex
import shutil
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "deploy"))
import check_deploy  # noqa: E402  (tests/deploy: renders the manifests, parses --help and args)

IMAGE = "localhost/yoco:cpu-image-test"
LABEL = "io.yoco.image-test=1"
USER = "10001"
SKIP = 77
BINARIES = ("yoco-router", "yoco-prefill", "yoco-decode", "yoco-cli")
PROMPT = "In the beginning God created"
# Long enough that the stream is still running when SIGTERM arrives (it is checked).
STREAM_TOKENS = 1500
PR_SET_PDEATHSIG = 1
_libc = ctypes.CDLL(None, use_errno=True)  # loaded before any fork: the child only calls into it
HOST_CONTAINERS = "/var/lib/containers"  # where podman keeps a blob-info cache whatever --root says
HOST_CNI = "/etc/cni/net.d"


class Failure(Exception):
    pass


def log(msg):
    print(msg, flush=True)


class Steps:
    def __init__(self):
        self.times = []

    def run(self, name, fn, *args):
        log("== " + name)
        t0 = time.monotonic()
        try:
            return fn(*args)
        finally:
            self.times.append((name, time.monotonic() - t0))
            log("   (%s: %.1f s)" % (name, self.times[-1][1]))


def sh(cmd, check=True, timeout=600, **kw):
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=timeout, **kw)
    if check and r.returncode != 0:
        raise Failure("%s exited %d:\n%s" % (" ".join(shlex.quote(str(c)) for c in cmd), r.returncode, r.stdout[-4000:]))
    return r


class Podman:
    """podman with a private storage root under WORK: the host's images and containers are untouched."""

    def __init__(self, work):
        self.dirs = [os.path.join(work, d) for d in ("storage", "run", "tmp")]
        storage, run, tmp = self.dirs
        # --network-config-dir: else every call leaves a cni.lock in /etc/cni/net.d.
        self.argv = ["podman", "--root", storage, "--runroot", run, "--tmpdir", os.path.join(run, "libpod"),
                     "--network-config-dir", os.path.join(run, "networks"), "--storage-driver", "vfs",
                     "--cgroup-manager", "cgroupfs", "--events-backend", "file"]
        self.env = dict(os.environ, TMPDIR=tmp)  # buildah's temporary copies

    def __call__(self, *args, check=True, timeout=600, stdout=None):
        # SIGTERM to podman when this script dies (a build keeps running otherwise).
        if stdout is not None:
            r = subprocess.run(self.argv + list(args), stdout=stdout, stderr=subprocess.STDOUT, env=self.env,
                               timeout=timeout, preexec_fn=term_with_parent)
            if check and r.returncode != 0:
                raise Failure("podman %s exited %d (log: %s)" % (args[0], r.returncode, stdout.name))
            return r
        return sh(self.argv + list(args), check=check, timeout=timeout, env=self.env, preexec_fn=term_with_parent)

    def leftovers(self):
        """Containers (podman's and buildah's) and images in the private storage."""
        if not os.path.isdir(self.dirs[0]):
            return []
        out = []
        r = self("ps", "-a", "--external", "--format", "{{.ID}} {{.Names}}", check=False)
        out += ["container " + line for line in r.stdout.split("\n") if line.strip()] if r.returncode == 0 else [r.stdout]
        r = self("images", "-a", "--format", "{{.ID}} {{.Repository}}:{{.Tag}}", check=False)
        out += ["image " + line for line in r.stdout.split("\n") if line.strip()] if r.returncode == 0 else [r.stdout]
        return out


def mounts_under(path):
    """Mount points at or below path in this mount namespace (/proc/self/mountinfo, octal escapes decoded)."""
    found = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            mp = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), line.split()[4])
            if mp == path or mp.startswith(path.rstrip("/") + "/"):
                found.append(mp)
    return found


# ---------------------------------------------------------------------------------------------
# 1. Base images


def apt_mirror():
    """The Debian mirror this machine's apt uses (deb822 or one-line sources), for debootstrap."""
    texts = []
    for p in ["/etc/apt/sources.list"] + sorted(
            os.path.join("/etc/apt/sources.list.d", f) for f in os.listdir("/etc/apt/sources.list.d")
            if f.endswith((".list", ".sources"))):
        try:
            with open(p) as f:
                texts.append(f.read())
        except OSError:
            pass
    for text in texts:
        for stanza in re.split(r"\n\s*\n", text):
            uris = re.search(r"^URIs:\s*(\S+)", stanza, re.M)
            suites = re.search(r"^Suites:\s*(.*)$", stanza, re.M)
            if uris and suites and "bookworm" in suites.group(1).split():
                return uris.group(1)
        m = re.search(r"^deb\s+(?:\[[^\]]*\]\s+)?(\S+)\s+bookworm\s", text, re.M)
        if m:
            return m.group(1)
    return "http://deb.debian.org/debian"


def base_tarball(work):
    tarball = os.path.join(work, "debian-bookworm-minbase.tar.gz")
    if os.path.isfile(tarball):
        log("   cached: %s" % tarball)
        return tarball
    rootfs = os.path.join(work, "rootfs.tmp")
    if os.path.isdir(rootfs):
        if mounts_under(rootfs):
            raise Failure("%s has mounts: %s" % (rootfs, mounts_under(rootfs)))
        shutil.rmtree(rootfs)
    mirror = apt_mirror()
    log("   debootstrap --variant=minbase bookworm from %s" % mirror)
    try:
        sh(["debootstrap", "--variant=minbase", "bookworm", rootfs, mirror], timeout=900)
        # What a registry's debian image leaves out too: downloaded packages, apt lists, device nodes.
        for d in ("var/cache/apt/archives", "var/lib/apt/lists", "dev"):
            for e in os.listdir(os.path.join(rootfs, d)):
                p = os.path.join(rootfs, d, e)
                if os.path.isdir(p) and not os.path.islink(p):
                    if e != "partial":
                        shutil.rmtree(p)
                else:
                    os.unlink(p)
        sh(["bash", "-c", 'tar -C "$1" -c --numeric-owner . | gzip -1 > "$2.tmp" && mv "$2.tmp" "$2"', "-",
            rootfs, tarball])
    finally:
        if os.path.isdir(rootfs) and not mounts_under(rootfs):
            shutil.rmtree(rootfs)
    return tarball


def base_images(podman, tarball, dockerfile):
    with open(dockerfile) as f:
        names = sorted(set(re.findall(r"^FROM\s+(debian:\S+)", f.read(), re.M | re.I)))
    if not names:
        raise Failure("%s: no FROM debian:* line" % dockerfile)
    podman("import", tarball, names[0])
    for n in names[1:]:
        podman("tag", names[0], n)
    log("   imported %s as %s" % (os.path.basename(tarball), ", ".join(names)))
    return names


# ---------------------------------------------------------------------------------------------
# 2. The build


def clean_export(src, dest):
    """The tracked files as they are in the working tree: what a fresh clone would hold."""
    if os.path.isdir(dest):
        shutil.rmtree(dest)
    os.makedirs(dest)
    files = sh(["git", "-C", src, "ls-files", "-z"]).stdout.split("\0")
    files = [f for f in files if f and os.path.lexists(os.path.join(src, f))]
    subprocess.run(["tar", "-C", src, "--null", "-T", "-", "-c", "-f", os.path.join(dest, "..", "context.tar")],
                   input="\0".join(files), text=True, check=True)
    sh(["tar", "-C", dest, "-x", "-f", os.path.join(dest, "..", "context.tar")])
    os.unlink(os.path.join(dest, "..", "context.tar"))
    log("   %d tracked files exported to %s" % (len(files), dest))


def build(podman, ctx, work):
    build_log = os.path.join(work, "build.log")
    # The build stage downloads xgrammar over HTTPS: it trusts what this machine trusts (a proxy's CA
    # included), mounted read-only for the RUN steps.
    ca = os.environ.get("SSL_CERT_FILE") or "/etc/ssl/certs/ca-certificates.crt"
    ca_args = ["-v", "%s:/run/yoco-build-ca.crt:ro" % ca, "--build-arg", "YOCO_CA_BUNDLE=/run/yoco-build-ca.crt"] \
        if os.path.isfile(ca) else []
    with open(build_log, "w") as f:
        r = podman("build", "--isolation", "chroot", "--network", "host", "--format", "docker", "--pull=never",
                   *ca_args,
                   "--layers=false", "--force-rm", "-f", os.path.join(ctx, "deploy/docker/cpu.Dockerfile"),
                   "--ignorefile", os.path.join(ctx, "deploy/docker/cpu.Dockerfile.dockerignore"), "-t", IMAGE, ctx,
                   stdout=f, check=False, timeout=1800)
    if r.returncode != 0:
        with open(build_log) as f:
            raise Failure("podman build exited %d; last lines of %s:\n%s"
                          % (r.returncode, build_log, "".join(f.readlines()[-40:])))


# ---------------------------------------------------------------------------------------------
# 3. Checks on the image


class Runner:
    """Runs a command in the image: `podman run`, or in_image.sh's chroot of the mounted image."""

    def __init__(self, podman, mode, root, state, env):
        self.podman, self.mode, self.root, self.state, self.env = podman, mode, root, state, env

    def argv(self, cmd):
        if self.mode == "podman run":
            return (self.podman.argv + ["run", "--rm", "--network", "host", "--label", LABEL,
                                        "-v", self.state + ":/tmp", "-e", "UCX_TLS", "-e", "OMP_WAIT_POLICY", IMAGE]
                    + list(cmd))
        return [os.path.join(HERE, "in_image.sh"), self.root, self.state] + self.env + ["--"] + list(cmd)

    def run(self, cmd, timeout=120):
        return subprocess.run(self.argv(cmd), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              timeout=timeout, env=self.podman.env)

    def wrapper(self, path, cmd):
        """A script cluster.py starts as a binary: host paths in its arguments become the image's
        (STATE is /tmp inside, files under the mounted ROOT are at their image paths)."""
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write("#!/usr/bin/env bash\n# Generated by tests/image/image_test.py: %s from the image (%s).\n"
                    % (cmd, self.mode))
            f.write("S=%s R=%s T=/tmp\nargs=()\nfor a in \"$@\"; do a=${a//\"$S\"/$T}; a=${a//\"$R\"/}; "
                    "args+=(\"$a\"); done\n" % (shlex.quote(self.state), shlex.quote(self.root)))
            f.write("exec %s \"${args[@]}\"\n" % " ".join(shlex.quote(a) for a in self.argv([cmd])))
        os.chmod(path, 0o755)


def check_config(podman, errors_out):
    info = json.loads(podman("image", "inspect", IMAGE).stdout)[0]
    cfg = info.get("Config") or {}
    errors = []
    user = cfg.get("User", "")
    if user.split(":")[0] != USER:
        errors.append("USER is %r, not %s" % (user, USER))
    # podman keeps a docker-format image's HEALTHCHECK beside Config (an OCI image has none).
    health = (info.get("Healthcheck") or cfg.get("Healthcheck") or {}).get("Test") or []
    if not health:
        errors.append("no HEALTHCHECK in the image (built with --format docker?)")
    check_deploy.check("image config: USER %s, HEALTHCHECK %s" % (user, " ".join(health)[:60]), errors)
    errors_out.extend(errors)
    env = cfg.get("Env") or []
    if not any(e.startswith("PATH=") for e in env):  # what a runtime sets when the image has none
        env.append("PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
    return env, int(info.get("Size") or 0)


def check_libraries(runner, root):
    errors = []
    have = sorted(os.listdir(os.path.join(root, "usr/local/bin")))
    if sorted(BINARIES) != have:
        errors.append("/usr/local/bin holds %s, not %s" % (have, sorted(BINARIES)))
    for b in BINARIES:
        r = runner.run(["ldd", "/usr/local/bin/" + b])
        missing = [line.strip() for line in r.stdout.splitlines() if "not found" in line]
        if r.returncode != 0 or missing:
            errors.append("ldd %s (rc %d): %s" % (b, r.returncode, missing or r.stdout + r.stderr))
    check_deploy.check("every binary's shared libraries resolve in the image (ldd as uid %s: %s)"
                       % (USER, ", ".join(BINARIES)), errors)
    return errors


def image_binaries(runner, root):
    binaries, errors = {}, []
    for b in BINARIES[:3]:
        try:
            binaries[b] = check_deploy.Binary(os.path.join(root, "usr/local/bin", b), run=runner.argv(["/usr/local/bin/" + b]))
        except (OSError, RuntimeError, subprocess.SubprocessError) as e:
            errors.append(str(e))
    check_deploy.check("the image's binaries answer --help", errors)
    return binaries, errors


def check_manifests(src, root, binaries, kubectl):
    """Renders the manifests that run the CPU image and checks every yoco container against it."""
    renders, errors = check_deploy.render_all(kubectl, os.path.join(src, "deploy/k8s"))
    model_dirs, containers, checked = set(), 0, []
    for name, docs in sorted(renders.items()):
        images = {c.get("image") for d in docs if d.get("kind") in check_deploy.WORKLOADS
                  for c in d["spec"]["template"]["spec"]["containers"]}
        if "yoco:cpu" not in images:
            continue  # the GPU overlay runs the CUDA image
        checked.append(name)
        _, pods, errs = check_deploy.model(docs, binaries)
        errors += ["%s: %s" % (name, e) for e in errs]
        for pod in pods:
            for c in pod.containers:
                if c.spec.get("image") != "yoco:cpu":
                    continue  # redis runs its own image
                containers += 1
                command = c.spec.get("command") or []
                if not command:
                    errors.append("%s: %s: no command (the image's CMD is yoco-cli --help)" % (name, c.where))
                    continue
                if c.planner:  # the SLA planner: Debian's python3 and the script the Dockerfile copies
                    for path, mode in (("usr/bin/python3", os.X_OK), (command[1].lstrip("/"), os.R_OK)):
                        if not os.access(os.path.join(root, path), mode):
                            errors.append("%s: %s needs /%s, which is not in the image" % (name, c.where, path))
                    continue
                exe = command[0] if command[0].startswith("/") else "/usr/local/bin/" + command[0]
                if not os.access(os.path.join(root, exe.lstrip("/")), os.X_OK):
                    errors.append("%s: %s runs %s, which is not in the image" % (name, c.where, command[0]))
                if "model" in c.values:
                    model_dirs.add(c.values["model"])
                else:
                    errors.append("%s: %s: no model path (--model or the config's \"model\")" % (name, c.where))
    check_deploy.check("manifests for the CPU image (%s): %d containers' commands, flags and config keys in the "
                       "image's --help" % (", ".join(checked), containers), errors)
    return model_dirs, errors


def check_model(src, root, model_dirs):
    errors = []
    bundled = os.path.join(src, "models/kjv-yoco")
    if not model_dirs:
        errors.append("the manifests name no model")
    for m in sorted(model_dirs):
        inside = os.path.join(root, m.lstrip("/"))
        if not os.path.isdir(inside):
            errors.append("the manifests' model %s is not in the image" % m)
            continue
        cmp = filecmp.dircmp(bundled, inside)
        if cmp.left_only or cmp.right_only or cmp.diff_files:
            errors.append("%s in the image differs from models/kjv-yoco: missing %s, extra %s, differing %s"
                          % (m, cmp.left_only, cmp.right_only, cmp.diff_files))
        for f in cmp.common_files:  # dircmp compares size and mtime only
            if not filecmp.cmp(os.path.join(bundled, f), os.path.join(inside, f), shallow=False):
                errors.append("%s/%s differs from models/kjv-yoco/%s" % (m, f, f))
    check_deploy.check("the model the manifests name (%s) is in the image, the same as models/kjv-yoco"
                       % ", ".join(sorted(model_dirs)), errors)
    return errors


# ---------------------------------------------------------------------------------------------
# 4. A cluster from the image


def host_reference(cli, src, tokens):
    # stdout alone: the engine's start-up line (its ISA path) goes to stderr.
    cmd = [cli, "generate", "--model", os.path.join(src, "models/kjv-yoco"), "--prompt", PROMPT, "--max-tokens",
           str(tokens), "--temperature", "0", "--ignore-eos", "--json", "--threads", "1"]
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=300)
    if r.returncode != 0:
        raise Failure("%s exited %d:\n%s" % (" ".join(shlex.quote(str(c)) for c in cmd), r.returncode, r.stderr[-4000:]))
    d = json.loads(r.stdout)
    return d["tokens"], d["text"]


class Cluster:
    def __init__(self, src, runner, state, root):
        self.src, self.runner, self.state, self.root = src, runner, state, root
        self.proc = None
        self.err_path = os.path.join(state, "launcher.err")

    def start(self):
        bin_dir = os.path.join(os.path.dirname(self.state), "bin")
        for sub, b in (("router", "yoco-router"), ("prefill_service", "yoco-prefill"), ("decode_service", "yoco-decode")):
            self.runner.wrapper(os.path.join(bin_dir, sub, b), "/usr/local/bin/" + b)
        cmd = [sys.executable, os.path.join(self.src, "deploy/local/cluster.py"), "--bin-dir", bin_dir, "--model",
               os.path.join(self.root, "opt/yoco/models/kjv-yoco"), "--prefill", "1", "--decode", "1", "--threads", "1",
               "--state-dir", self.state, "--ready-timeout", "180"]
        log("   " + " ".join(shlex.quote(c) for c in cmd))
        with open(os.path.join(self.state, "launcher.out"), "w") as out, open(self.err_path, "w") as err:
            self.proc = subprocess.Popen(cmd, stdout=out, stderr=err, env=self.runner.podman.env,
                                         preexec_fn=launcher_preexec)
        state_file = os.path.join(self.state, "cluster.json")
        deadline = time.monotonic() + 200
        while not os.path.exists(state_file):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise Failure("the cluster did not start (launcher %s):\n%s" % (self.proc.poll(), self.logs()))
            time.sleep(0.2)
        with open(state_file) as f:
            return json.load(f)["router"]["grpc"]

    def logs(self):
        out = []
        for f in sorted(os.listdir(self.state)):
            if f.endswith((".log", ".err")):
                out.append("== %s\n%s" % (f, tail_of(os.path.join(self.state, f))))
        return "\n".join(out)

    def stop(self):
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()


def term_with_parent():
    """In a child before exec: SIGTERM when this script dies, killed by ctest's timeout included."""
    _libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)


def launcher_preexec():
    # Its own process group (a terminal's Ctrl-C goes to this script, which stops it in order); it
    # drains when this script dies.
    os.setpgid(0, 0)
    term_with_parent()


def tail_of(path, lines=15):
    try:
        with open(path, errors="replace") as f:
            return "".join(f.readlines()[-lines:])
    except OSError as e:
        return str(e)


def generate_and_drain(cluster, runner, cli, src):
    router = cluster.start()
    log("   cluster ready: router %s (%s)" % (router, runner.mode))
    errors = []
    ref_ids, ref_text = host_reference(cli, src, 24)
    r = runner.run(["/usr/local/bin/yoco-cli", "generate", "--router", router, "--prompt", PROMPT, "--max-tokens", "24",
                    "--temperature", "0", "--ignore-eos", "--json"])
    if r.returncode != 0:
        errors.append("yoco-cli generate --json exited %d: %s" % (r.returncode, r.stderr))
    else:
        d = json.loads(r.stdout)
        if d.get("token_ids") != ref_ids or d.get("text") != ref_text:
            errors.append("greedy tokens %s (%r) != the host build's %s (%r)"
                          % (d.get("token_ids"), d.get("text"), ref_ids, ref_text))
    check_deploy.check("greedy generation through the image's router = the host build's yoco-cli (24 tokens: %r)"
                       % ref_text, errors)

    # Structured outputs: the image's decode worker has xgrammar (deploy/docker, scripts/build_xgrammar.sh).
    structured_errors = []
    pattern = "[0-9]{3}-[0-9]{4}"
    r = runner.run(["/usr/local/bin/yoco-cli", "generate", "--router", router, "--prompt", PROMPT, "--max-tokens", "16",
                    "--temperature", "0", "--regex", pattern, "--json"])
    if r.returncode != 0:
        structured_errors.append("yoco-cli generate --regex exited %d: %s" % (r.returncode, r.stderr))
    elif not re.fullmatch(pattern, json.loads(r.stdout).get("text", "")):
        structured_errors.append("the constrained text %r does not match %s" % (json.loads(r.stdout).get("text"), pattern))
    check_deploy.check("a structured output (--regex %s) through the image's cluster matches it" % pattern,
                       structured_errors)
    errors += structured_errors

    # A stream in flight when the cluster gets SIGTERM: it completes, and every process exits 0.
    _, long_text = host_reference(cli, src, STREAM_TOKENS)
    stream = subprocess.Popen(runner.argv(["/usr/local/bin/yoco-cli", "generate", "--router", router, "--prompt", PROMPT,
                                           "--max-tokens", str(STREAM_TOKENS), "--temperature", "0", "--ignore-eos"]),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=runner.podman.env)
    drain_errors, got = [], b""
    try:
        ready, _, _ = select.select([stream.stdout], [], [], 60)
        if ready:
            got = os.read(stream.stdout.fileno(), 65536)
        before = len(got)
        cluster.proc.send_signal(signal.SIGTERM)
        log("   SIGTERM to the launcher after %d bytes of the stream" % before)
        rest, err = stream.communicate(timeout=120)
        got += rest
        text = got.decode("utf-8", "replace")
        if stream.returncode != 0:
            drain_errors.append("the stream exited %d: %s" % (stream.returncode, err.decode(errors="replace")))
        if text.rstrip("\n") != long_text.rstrip("\n"):
            drain_errors.append("the streamed text (%d chars) != the host build's (%d chars)" % (len(text), len(long_text)))
        if not before or len(got) <= before:
            drain_errors.append("the stream was not in flight at SIGTERM (%d bytes before, %d after)" % (before, len(got)))
    finally:
        if stream.poll() is None:
            stream.kill()
            stream.wait()
    try:
        rc = cluster.proc.wait(timeout=90)
    except subprocess.TimeoutExpired:
        rc = None
        drain_errors.append("the launcher did not exit within 90 s of SIGTERM")
    if rc not in (0, None):
        drain_errors.append("the launcher exited %s" % rc)
    with open(cluster.err_path, errors="replace") as f:
        err_text = f.read()
    for name in ("router", "prefill-0", "decode-0"):
        if not re.search(r"^cluster\.py: %s \(pid \d+\) exited with code 0$" % name, err_text, re.M):
            drain_errors.append("%s did not exit 0 after SIGTERM:\n%s" % (name, err_text[-1500:]))
    if drain_errors:
        drain_errors.append(cluster.logs())
    check_deploy.check("SIGTERM during a %d-token stream: the stream completes equal to the host build's, router, "
                       "prefill and decode exit 0" % STREAM_TOKENS, drain_errors)
    return errors + drain_errors


# ---------------------------------------------------------------------------------------------
# 5. Clean-up


class HostStorage:
    """The host's /var/lib/containers: podman writes a blob-info cache there whatever --root says.
    Removed if this run created it, restored if it was there. And the host's network configuration,
    which --network-config-dir keeps podman out of: checked."""

    def __init__(self, work):
        self.cni = set(os.listdir(HOST_CNI)) if os.path.isdir(HOST_CNI) else set()
        # A run killed before its clean-up leaves its marker or backup: what the host had before it.
        self.marker = os.path.join(work, "created-var-lib-containers")
        self.existed = os.path.lexists(HOST_CONTAINERS) and not os.path.exists(self.marker)
        if not self.existed:
            open(self.marker, "w").close()
        self.cache = os.path.join(HOST_CONTAINERS, "cache/blob-info-cache-v1.boltdb")
        self.backup = os.path.join(work, "blob-info-cache.backup")
        if self.existed and os.path.isfile(self.cache) and not os.path.exists(self.backup):
            shutil.copy2(self.cache, self.backup)
        self.had_cache = os.path.exists(self.backup)

    def restore(self):
        errors = []
        if not self.existed and os.path.isdir(HOST_CONTAINERS):
            extra = [os.path.join(d, f) for d, _, fs in os.walk(HOST_CONTAINERS) for f in fs]
            if all(f == self.cache for f in extra):
                shutil.rmtree(HOST_CONTAINERS)
            else:
                errors.append("%s was created during this run and holds %s" % (HOST_CONTAINERS, extra))
        if not self.existed and not os.path.exists(HOST_CONTAINERS) and os.path.exists(self.marker):
            os.unlink(self.marker)
        if self.existed and self.had_cache:
            shutil.copy2(self.backup, self.cache)
            os.unlink(self.backup)
        elif self.existed and os.path.isfile(self.cache):
            os.unlink(self.cache)
        new = sorted((set(os.listdir(HOST_CNI)) if os.path.isdir(HOST_CNI) else set()) - self.cni)
        if new:
            errors.append("new in %s: %s" % (HOST_CNI, new))
        return errors


def cleanup(podman, work, mounted, host_storage):
    """Everything this run made, whatever state it stopped in; returns what could not be removed."""
    left = []
    if mounted:
        podman("image", "unmount", IMAGE, check=False)
    podman("rm", "-a", "-f", check=False)
    r = podman("ps", "-a", "-q", "--external", check=False)
    for cid in r.stdout.split():
        podman("rm", "-f", cid, check=False)  # buildah's working containers from an interrupted build
    podman("rmi", "-a", "-f", check=False)
    left += ["left in the private storage: " + x for x in podman.leftovers()]
    left += ["mounted: " + m for m in mounts_under(work)]
    r = subprocess.run(["mount"], stdout=subprocess.PIPE, text=True)
    left += ["mount: " + line for line in r.stdout.splitlines() if work in line]
    if not left:
        for d in podman.dirs + [os.path.join(work, d) for d in ("state", "bin", "context")]:
            if os.path.isdir(d):
                subprocess.run(["rm", "-rf", "--one-file-system", d], check=False)
            if os.path.exists(d):
                left.append("could not remove " + d)
    left += host_storage.restore()
    return left


# ---------------------------------------------------------------------------------------------


def run_mode(podman, forced):
    if forced:
        return forced
    r = podman("run", "--rm", "--network", "host", "--label", LABEL, IMAGE, "true", check=False, timeout=120)
    if r.returncode == 0:
        return "podman run"
    log("   podman run does not work here (rc %d: %s); running the image's filesystem in a chroot"
        % (r.returncode, r.stdout.strip().splitlines()[-1] if r.stdout.strip() else ""))
    return "chroot"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--source-dir", required=True)
    ap.add_argument("--build-dir", required=True)
    ap.add_argument("--cli", required=True, help="the host build's yoco-cli (the reference generation)")
    ap.add_argument("--work-dir", help="default BUILD_DIR/image")
    ap.add_argument("--kubectl", default=shutil.which("kubectl") or "kubectl")
    ap.add_argument("--run", choices=("podman run", "chroot"), default=os.environ.get("YOCO_IMAGE_RUN") or None,
                    help="how to start the image (default: podman run where it works, else chroot)")
    a = ap.parse_args()
    if os.geteuid() != 0:
        log("SKIP: the image suite needs root (podman build, mounts, chroot); CI runs it as root")
        return SKIP
    missing = [t for t in ("podman", "debootstrap", "unshare", "chroot", a.kubectl) if not shutil.which(t)]
    if missing:
        log("FAIL: %s not installed (scripts/setup.sh installs them)" % ", ".join(missing))
        return 1
    src = os.path.abspath(a.source_dir)
    work = os.path.abspath(a.work_dir or os.path.join(a.build_dir, "image"))
    os.makedirs(work, exist_ok=True)
    podman = Podman(work)
    for d in podman.dirs:
        os.makedirs(d, exist_ok=True)
    steps = Steps()
    t0 = time.monotonic()

    def interrupted(signum, frame):  # clean up on Ctrl-C or kill too (ctest's timeout kills: see clean-up)
        raise Failure("interrupted by signal %d" % signum)
    signal.signal(signal.SIGTERM, interrupted)
    signal.signal(signal.SIGINT, interrupted)
    host_storage = HostStorage(work)
    mounted, mode, size = False, None, 0
    errors = []
    try:
        # A run killed before its clean-up (ctest's timeout) left its storage: start from nothing.
        stale = cleanup(podman, work, True, host_storage)
        if stale:
            raise Failure("could not clear an earlier run's leftovers: %s" % stale)
        host_storage = HostStorage(work)
        for d in podman.dirs:
            os.makedirs(d, exist_ok=True)
        dockerfile = os.path.join(src, "deploy/docker/cpu.Dockerfile")
        tarball = steps.run("base rootfs (debootstrap, cached)", base_tarball, work)
        steps.run("podman import", base_images, podman, tarball, dockerfile)
        ctx = os.path.join(work, "context")
        steps.run("clean export of the tree", clean_export, src, ctx)
        steps.run("podman build of deploy/docker/cpu.Dockerfile", build, podman, ctx, work)
        env, size = check_config(podman, errors)
        log("   image %s: %.1f MB" % (IMAGE, size / 1e6))
        mode = steps.run("does podman run work?", run_mode, podman, a.run)
        log("   running the image by: %s" % mode)
        root = podman("image", "mount", IMAGE).stdout.strip().splitlines()[-1]
        mounted = True
        state = os.path.join(work, "state")
        if os.path.isdir(state):
            shutil.rmtree(state)
        os.makedirs(state)
        os.chown(state, int(USER), int(USER))
        runner = Runner(podman, mode, root, state, env)
        errors += steps.run("libraries", check_libraries, runner, root)
        binaries, errs = steps.run("--help", image_binaries, runner, root)
        errors += errs
        if binaries:
            model_dirs, errs = steps.run("manifests", check_manifests, src, root, binaries, a.kubectl)
            errors += errs + check_model(src, root, model_dirs)
        cluster = Cluster(src, runner, state, root)
        try:
            errors += steps.run("cluster from the image: generate, drain", generate_and_drain, cluster, runner,
                                os.path.abspath(a.cli), src)
        finally:
            cluster.stop()
    except (Failure, subprocess.SubprocessError, OSError) as e:
        check_deploy.check("image suite", [str(e)])
        errors.append(str(e))
    finally:
        left = steps.run("clean-up", cleanup, podman, work, mounted, host_storage)
        check_deploy.check("nothing left behind (containers, images, mounts, private storage, host storage)", left)
    log("ran the image by: %s" % (mode or "(not reached)"))
    if size:
        log("image size: %.1f MB (%s)" % (size / 1e6, IMAGE))
    log("times: " + ", ".join("%s %.0f s" % t for t in steps.times) + "; total %.0f s" % (time.monotonic() - t0))
    return check_deploy.summary()


if __name__ == "__main__":
    sys.exit(main())
