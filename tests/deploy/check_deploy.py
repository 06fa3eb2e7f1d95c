#!/usr/bin/env python3
"""Checks deploy/ against the real binaries, with no cluster and no Docker engine.

  check_deploy.py --source-dir DIR --build-dir DIR --router BIN --prefill BIN --decode BIN

1. `kubectl kustomize` renders every overlay (deploy/k8s/overlays/*) and every component
   (deploy/k8s/components/*) on top of the cpu and gpu overlays.
2. The rendered objects, against the binaries: every flag in a container's args and every key of
   the JSON config it reads (--config, from a ConfigMap) is in that binary's --help; every port a
   probe, Service, NetworkPolicy, PodMonitor or scrape annotation names is one the container
   listens on (--listen, --metrics-listen, --ucx-listen, the router's --http-port; UCX's tcp lanes
   in UCX_TCP_PORT_RANGE);
   containerPorts are exactly the listening ports; the router's dns: targets are headless
   Services of the right pods and port; the NetworkPolicies allow the flows the cluster needs and
   deny others; grace periods cover the drain; HPAs scale on metrics their target exports;
   security context and resources are set everywhere. The SLA planner (components/planner): its
   flags are yoco_plan.py autoscale's, its profile (a ConfigMap) loads with the planner's own
   reader, its --metrics-url is the routers' metrics port, the Deployments it scales exist and no
   HPA scales them too, its Role grants get/patch on exactly their deployments/scale and nothing
   else, and the NetworkPolicies let it reach the routers' metrics and the API server.
3. Every rendered object against the Kubernetes API's JSON schema (kubernetes-validate, strict:
   unknown fields are errors), after a self-check that the validator rejects broken objects.
4. `promtool check config` on deploy/prometheus/prometheus.yml (and the rules it loads), and the
   PromQL of the dashboard and the rules through `promtool check rules`.
5. Every file the Dockerfiles copy exists (context files in the source tree and not excluded by
   the Dockerfile's .dockerignore; files from the build stage in the build tree), the runtime
   packages cover the binaries' shared libraries, and every metric the Grafana dashboard and the
   rules name is exported by the binary of the component they select.
Prints one line per check and `N passed, N failed`; exits 1 on any failure.
"""

import argparse
import copy
import fnmatch
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

import yaml

# Kubernetes versions the manifests must be valid for: the oldest supported (gRPC probes are GA
# since 1.27, NetworkPolicy endPort since 1.25) and the newest the validator knows.
K8S_VERSIONS = ["1.29.0", "latest"]
# Where the NetworkPolicies expect Prometheus (deploy/README.md says so too).
PROMETHEUS_PEER = ({"kubernetes.io/metadata.name": "monitoring"}, {"app.kubernetes.io/name": "prometheus"})
# docs/design.md §6 names the KV store exports once kv_store/ lands; until then the dashboard may name them.
PENDING_METRICS = {"yoco_kv_store_hits_total", "yoco_kv_store_misses_total", "yoco_kv_store_errors_total"}
YOCO_BINARIES = ("yoco-router", "yoco-prefill", "yoco-decode")
ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
PLANNER_SCRIPT = "yoco_plan.py"

results = []  # (ok, name, detail)


def check(name, errors):
    errors = [e for e in errors if e]
    results.append((not errors, name, errors))
    print(("PASS " if not errors else "FAIL ") + name)
    for e in errors[:40]:
        print("    " + e)
    if len(errors) > 40:
        print("    ... and %d more" % (len(errors) - 40))


# ---------------------------------------------------------------------------------------------
# Binaries


class Binary:
    def __init__(self, path, run=None):
        """run: the command that runs it, when not the file itself (tests/image: inside the image)."""
        self.path = path
        self.name = os.path.basename(path)
        out = subprocess.run((run or [path]) + ["--help"], capture_output=True, text=True, timeout=60)
        if out.returncode != 0:
            raise RuntimeError("%s --help exited %d: %s" % (path, out.returncode, out.stderr))
        self.flags, self.booleans = set(), set()
        for line in out.stdout.splitlines():
            m = re.match(r"^\s+--([a-z0-9-]+)( \(boolean\))?$", line)
            if m:
                self.flags.add(m.group(1))
                if m.group(2):
                    self.booleans.add(m.group(1))
        if "listen" not in self.flags:
            raise RuntimeError("%s --help lists no --listen: %r" % (path, out.stdout[:200]))
        with open(path, "rb") as f:
            self.metrics = {m.decode() for m in re.findall(rb"yoco_[a-z0-9_]+", f.read())}


class PlannerCli:
    """tools/planner/yoco_plan.py autoscale (standard-library Python): its flags from argparse's
    --help; a flag without a metavar is a boolean."""

    name = "yoco_plan.py autoscale"
    _cached = None

    def __init__(self):
        script = os.path.join(ROOT, "tools", "planner", PLANNER_SCRIPT)
        out = subprocess.run([sys.executable, script, "autoscale", "--help"], capture_output=True, text=True, timeout=60)
        if out.returncode != 0:
            raise RuntimeError("%s autoscale --help exited %d: %s" % (script, out.returncode, out.stderr))
        self.flags, self.booleans, self.metrics = set(), set(), set()
        for line in out.stdout.splitlines():
            m = re.match(r"^\s+--([a-z0-9-]+)( [A-Z0-9_=]+)?(\s|$)", line)
            if m and m.group(1) != "help":
                self.flags.add(m.group(1))
                if not m.group(2):
                    self.booleans.add(m.group(1))

    @classmethod
    def get(cls):
        if cls._cached is None:
            cls._cached = PlannerCli()
        return cls._cached


def parse_args(args, binary, where):
    """Flag values from a container's args (--name=value, --name value, --bool)."""
    values, errors, i = {}, [], 0
    while i < len(args):
        a = str(args[i])
        i += 1
        if not a.startswith("--"):
            errors.append("%s: positional argument %r" % (where, a))
            continue
        name, eq, value = a[2:].partition("=")
        if name not in binary.flags:
            errors.append("%s: --%s is not a flag of %s (its --help: %s)" % (where, name, binary.name,
                                                                         ", ".join(sorted(binary.flags))))
            continue
        if name in binary.booleans:
            value = value or "true"
        elif not eq:
            if i >= len(args):
                errors.append("%s: --%s has no value" % (where, name))
                continue
            value = str(args[i])
            i += 1
        values[name] = value
    return values, errors


def port_of(address):
    m = re.match(r"^(.*):(\d+)$", address or "")
    return int(m.group(2)) if m else None


# ---------------------------------------------------------------------------------------------
# Rendering


def kustomize(kubectl, path):
    out = subprocess.run([kubectl, "kustomize", path], capture_output=True, text=True, timeout=60)
    if out.returncode != 0:
        return None, out.stderr.strip()
    try:
        docs = [d for d in yaml.safe_load_all(out.stdout) if d]
    except yaml.YAMLError as e:
        return None, "rendered YAML does not parse: %s" % e
    return docs, None


def render_all(kubectl, k8s_dir):
    renders, errors = {}, []
    overlays = sorted(os.listdir(os.path.join(k8s_dir, "overlays")))
    for o in overlays:
        docs, err = kustomize(kubectl, os.path.join(k8s_dir, "overlays", o))
        if err:
            errors.append("overlays/%s: %s" % (o, err))
        else:
            renders["overlays/" + o] = docs
    comp_dir = os.path.join(k8s_dir, "components")
    components = sorted(os.listdir(comp_dir)) if os.path.isdir(comp_dir) else []
    for c in components:
        for base in ("cpu", "gpu"):
            tmp = tempfile.mkdtemp(prefix="yoco-kustomize-")
            try:
                rel = os.path.relpath(k8s_dir, tmp)
                with open(os.path.join(tmp, "kustomization.yaml"), "w") as f:
                    f.write("apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n"
                            "resources:\n  - %s/overlays/%s\ncomponents:\n  - %s/components/%s\n" % (rel, base, rel, c))
                docs, err = kustomize(kubectl, tmp)
            finally:
                shutil.rmtree(tmp)
            if err:
                errors.append("overlays/%s + components/%s: %s" % (base, c, err))
            else:
                renders["overlays/%s+components/%s" % (base, c)] = docs
    if not overlays:
        errors.append("no overlays under %s/overlays" % k8s_dir)
    return renders, errors


# ---------------------------------------------------------------------------------------------
# The rendered objects as pods, containers and their ports


def selector_matches(sel, labels):
    if sel is None:
        return False
    for k, v in (sel.get("matchLabels") or {}).items():
        if labels.get(k) != v:
            return False
    for e in sel.get("matchExpressions") or []:
        k, op, vals = e["key"], e["operator"], e.get("values") or []
        if op == "In" and labels.get(k) not in vals:
            return False
        if op == "NotIn" and k in labels and labels[k] in vals:
            return False
        if op == "Exists" and k not in labels:
            return False
        if op == "DoesNotExist" and k in labels:
            return False
    return True


class Container:
    """A container, what it runs and the ports it listens on."""

    def __init__(self, spec, pod, objects, binaries, errors):
        self.spec, self.pod, self.name = spec, pod, spec["name"]
        where = "%s/%s container %s" % (pod.kind, pod.name, self.name)
        self.where = where
        command = spec.get("command") or []
        self.program = os.path.basename(command[0]) if command else None
        self.binary = binaries.get(self.program)
        self.planner = (self.program == "python3" and len(command) > 1 and os.path.basename(command[1]) == PLANNER_SCRIPT)
        self.values, self.listen, self.ranges = {}, {}, []
        self.env = {e["name"]: e for e in spec.get("env") or []}
        args = [str(a) for a in (spec.get("args") or [])] + [str(c) for c in command[1:]]
        for a in args:
            for var in re.findall(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", a):
                if var not in self.env:
                    errors.append("%s: args use $(%s), which is not in its env (Kubernetes leaves it as is)" % (where, var))
        if self.binary:
            self.values, errs = parse_args(args, self.binary, where)
            errors.extend(errs)
            if "config" in self.values:
                self._merge_config(self.values["config"], objects, errors)
            for flag in ("listen", "metrics-listen", "ucx-listen"):
                if flag in self.values:
                    p = port_of(self.values[flag])
                    if not p:
                        errors.append("%s: --%s %r: a fixed port is needed in a pod" % (where, flag, self.values[flag]))
                    else:
                        self.listen[flag] = p
            # The router's OpenAI-compatible HTTP API: a bare port number, 0 for any (not in a pod).
            if "http-port" in self.values:
                v = str(self.values["http-port"])
                if not v.isdigit() or int(v) == 0:
                    errors.append("%s: --http-port %r: a fixed port is needed in a pod" % (where, v))
                else:
                    self.listen["http-port"] = int(v)
            for flag in ("listen", "metrics-listen"):
                if flag not in self.listen:
                    errors.append("%s: no --%s (probes and scraping need a fixed port)" % (where, flag))
            if self.program == "yoco-decode" and "ucx-listen" not in self.listen:
                errors.append("%s: no --ucx-listen: prefill workers could not reach it" % where)
            rng = self.env.get("UCX_TCP_PORT_RANGE", {}).get("value")
            if rng:
                m = re.match(r"^(\d+)-(\d+)$", rng)
                if not m:
                    errors.append("%s: UCX_TCP_PORT_RANGE %r is not MIN-MAX" % (where, rng))
                else:
                    self.ranges.append((int(m.group(1)), int(m.group(2))))
        elif self.planner:
            if command[2:3] != ["autoscale"]:
                errors.append("%s: runs %s %s, not its autoscale command" % (where, PLANNER_SCRIPT, command[2:3]))
            self.values, errs = parse_args([str(a) for a in (spec.get("args") or [])] + [str(c) for c in command[3:]],
                                           PlannerCli.get(), where)
            errors.extend(errs)
        elif self.program == "redis-server":
            vals = {}
            for i, a in enumerate(args):
                if a.startswith("--") and i + 1 < len(args):
                    vals[a[2:]] = args[i + 1]
            self.listen["port"] = int(vals.get("port", 6379))
        else:
            errors.append("%s: runs %r, which this check does not know" % (where, self.program))
        self.ports = {}  # containerPort name -> number
        numbers = set()
        for p in spec.get("ports") or []:
            numbers.add(p["containerPort"])
            if "name" in p:
                self.ports[p["name"]] = p["containerPort"]
        listened = set(self.listen.values())
        for n in sorted(numbers - listened):
            errors.append("%s: containerPort %d is not a port it listens on (%s)" % (where, n, self.listen))
        for n in sorted(listened - numbers):
            errors.append("%s: listens on %d but declares no containerPort for it" % (where, n))

    def _merge_config(self, path, objects, errors):
        mount = None
        for vm in self.spec.get("volumeMounts") or []:
            mp = vm["mountPath"].rstrip("/")
            if path.startswith(mp + "/") and (mount is None or len(mp) > len(mount["mountPath"].rstrip("/"))):
                mount = vm
        if mount is None:
            errors.append("%s: --config %s is on no volume mount" % (self.where, path))
            return
        vol = next((v for v in self.pod.spec.get("volumes") or [] if v["name"] == mount["name"]), None)
        if vol is None or "configMap" not in vol:
            errors.append("%s: --config %s: volume %s is not a ConfigMap" % (self.where, path, mount["name"]))
            return
        cm_name = vol["configMap"]["name"]
        key = path[len(mount["mountPath"].rstrip("/")) + 1:]
        if mount.get("subPath"):
            key = mount["subPath"]
        for item in vol["configMap"].get("items") or []:
            if item["path"] == key:
                key = item["key"]
        cm = objects.get(("ConfigMap", self.pod.namespace, cm_name))
        if cm is None:
            errors.append("%s: ConfigMap %s (for --config) is not in the rendered objects" % (self.where, cm_name))
            return
        text = (cm.get("data") or {}).get(key)
        if text is None:
            errors.append("%s: ConfigMap %s has no key %s (for --config %s)" % (self.where, cm_name, key, path))
            return
        try:
            cfg = json.loads(text)
        except ValueError as e:
            errors.append("%s: ConfigMap %s key %s is not JSON: %s" % (self.where, cm_name, key, e))
            return
        if not isinstance(cfg, dict):
            errors.append("%s: ConfigMap %s key %s: not a JSON object" % (self.where, cm_name, key))
            return
        for k, v in cfg.items():
            w = "%s: ConfigMap %s key %s: %r" % (self.where, cm_name, key, k)
            if k == "config" or k not in self.binary.flags:
                errors.append("%s is not a flag of %s (the binary refuses unknown keys)" % (w, self.binary.name))
            elif k in self.binary.booleans and not isinstance(v, bool):
                errors.append("%s must be true or false" % w)
            elif k not in self.binary.booleans and (isinstance(v, bool) or not isinstance(v, (str, int, float))):
                errors.append("%s must be a string or a number" % w)
            elif k not in self.values:  # the command line wins
                self.values[k] = v if isinstance(v, str) else json.dumps(v)

    def listens_on(self, port):
        return port in self.listen.values() or any(lo <= port <= hi for lo, hi in self.ranges)

    def resolve(self, port):
        """A probe's or Service's port (number or containerPort name) as a number."""
        if isinstance(port, int):
            return port
        if isinstance(port, str) and port.isdigit():
            return int(port)
        return self.ports.get(port)


class Pod:
    def __init__(self, obj, objects, binaries, errors):
        self.kind, self.name = obj["kind"], obj["metadata"]["name"]
        self.namespace = obj["metadata"].get("namespace", "default")
        tmpl = obj["spec"]["template"]
        self.labels = (tmpl.get("metadata") or {}).get("labels") or {}
        self.annotations = (tmpl.get("metadata") or {}).get("annotations") or {}
        self.spec = tmpl["spec"]
        self.obj = obj
        self.containers = [Container(c, self, objects, binaries, errors)
                           for c in (self.spec.get("initContainers") or []) + self.spec["containers"]]
        sel = obj["spec"].get("selector")
        if not selector_matches(sel, self.labels):
            errors.append("%s/%s: selector %s does not match its own template labels" % (self.kind, self.name, sel))

    @property
    def component(self):
        return self.labels.get("app.kubernetes.io/component")


WORKLOADS = ("Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job")


def model(docs, binaries):
    errors = []
    objects = {}
    for d in docs:
        for field in ("apiVersion", "kind", "metadata"):
            if field not in d:
                errors.append("object without %s: %s" % (field, str(d)[:120]))
        key = (d.get("kind"), (d.get("metadata") or {}).get("namespace", "default"), (d.get("metadata") or {}).get("name"))
        if key in objects:
            errors.append("duplicate object %s" % (key,))
        objects[key] = d
    pods = [Pod(d, objects, binaries, errors) for d in docs if d.get("kind") in WORKLOADS]
    return objects, pods, errors


# ---------------------------------------------------------------------------------------------
# Checks on one render


def check_containers(pods):
    errors = []
    for pod in pods:
        psc = pod.spec.get("securityContext") or {}
        grace = pod.spec.get("terminationGracePeriodSeconds", 30)
        for c in pod.containers:
            sc = c.spec.get("securityContext") or {}
            w = c.where
            if not (sc.get("runAsNonRoot", psc.get("runAsNonRoot")) is True):
                errors.append("%s: runAsNonRoot is not set" % w)
            if sc.get("runAsUser", psc.get("runAsUser")) in (None, 0):
                errors.append("%s: no non-zero runAsUser" % w)
            if sc.get("readOnlyRootFilesystem") is not True:
                errors.append("%s: root filesystem is not read-only" % w)
            if sc.get("allowPrivilegeEscalation") is not False:
                errors.append("%s: allowPrivilegeEscalation is not false" % w)
            if "ALL" not in ((sc.get("capabilities") or {}).get("drop") or []):
                errors.append("%s: capabilities are not dropped (drop: [ALL])" % w)
            res = c.spec.get("resources") or {}
            for kind in ("requests", "limits"):
                for r in ("cpu", "memory"):
                    if r not in (res.get(kind) or {}):
                        errors.append("%s: no %s.%s" % (w, kind, r))
            if not c.binary:
                continue
            tls = "tls-cert" in c.values
            for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
                p = c.spec.get(probe)
                get = (p or {}).get("httpGet") or {}
                if not p:
                    errors.append("%s: no %s" % (w, probe))
                elif get.get("path") == "/health" and "http-port" in c.listen:
                    # The HTTP API's own /health (503 while draining), over TLS when the API has it.
                    scheme = "HTTPS" if tls else "HTTP"
                    if c.resolve(get.get("port")) != c.listen["http-port"] or get.get("scheme", "HTTP") != scheme:
                        errors.append("%s: %s /health must be %s on the --http-port port %s"
                                      % (w, probe, scheme, c.listen["http-port"]))
                elif tls:  # kubelet's gRPC probe is plaintext: /healthz on the metrics port instead
                    get = p.get("httpGet") or {}
                    if get.get("path") != "/healthz" or c.resolve(get.get("port")) != c.listen.get("metrics-listen"):
                        errors.append("%s: %s must be httpGet /healthz on the --metrics-listen port %s (TLS on --listen)"
                                      % (w, probe, c.listen.get("metrics-listen")))
                elif "grpc" not in p:
                    errors.append("%s: %s is not a grpc.health.v1 probe" % (w, probe))
                elif p["grpc"].get("port") != c.listen.get("listen"):
                    errors.append("%s: %s probes port %s, but grpc.health.v1 is served on --listen port %s"
                                  % (w, probe, p["grpc"].get("port"), c.listen.get("listen")))
            errors.extend(check_tls(c, w))
            drain = int(float(c.values.get("drain-seconds", 30)))
            if grace <= drain:
                errors.append("%s: terminationGracePeriodSeconds %d does not cover --drain-seconds %d" % (w, grace, drain))
            threads = c.values.get("threads")
            cpu = str(((res.get("limits") or {}).get("cpu")) or "")
            if threads is None and "threads" in c.binary.flags:  # the router computes nothing: no --threads
                errors.append("%s: no threads setting: the binary would use every core of the node" % w)
            elif threads is not None and cpu:
                limit = float(cpu[:-1]) / 1000 if cpu.endswith("m") else float(cpu)
                if int(threads) > max(1, int(limit + 0.999)):
                    errors.append("%s: threads %s exceeds its CPU limit %s" % (w, threads, cpu))
            if c.program == "yoco-decode":
                adv = c.values.get("ucx-advertise", "")
                env = c.env.get(adv[2:-1]) if adv.startswith("$(") else None
                if not env or ((env.get("valueFrom") or {}).get("fieldRef") or {}).get("fieldPath") != "status.podIP":
                    errors.append("%s: --ucx-advertise must be the pod IP ($(POD_IP) from status.podIP), is %r" % (w, adv))
            ann = pod.annotations
            if ann.get("prometheus.io/scrape") == "true":
                if str(ann.get("prometheus.io/port")) != str(c.listen.get("metrics-listen")):
                    errors.append("%s: prometheus.io/port %s is not its --metrics-listen port %s"
                                  % (w, ann.get("prometheus.io/port"), c.listen.get("metrics-listen")))
                if ann.get("prometheus.io/path", "/metrics") != "/metrics":
                    errors.append("%s: prometheus.io/path must be /metrics" % w)
            elif pod.component in ("router", "prefill", "decode"):
                errors.append("%s: pod is not annotated for scraping" % w)
        for c in pod.containers:
            for p in ("startupProbe", "readinessProbe", "livenessProbe"):
                probe = c.spec.get(p) or {}
                for kind in ("tcpSocket", "httpGet"):
                    if kind in probe:
                        n = c.resolve(probe[kind]["port"])
                        if n is None or not c.listens_on(n):
                            errors.append("%s: %s %s port %s is not a port it listens on" % (c.where, p, kind, probe[kind]["port"]))
    return errors


# TLS everywhere, mTLS inside, API keys on the router (docs/design.md §9b): the flags each binary
# needs, every file on a Secret volume mounted without subPath (a subPath mount never sees a
# rotated Secret).
TLS_FLAGS = {
    "yoco-router": ("tls-cert", "tls-key", "worker-tls-ca", "worker-tls-cert", "worker-tls-key", "api-keys"),
    "yoco-prefill": ("tls-cert", "tls-key", "tls-client-ca"),
    "yoco-decode": ("tls-cert", "tls-key", "tls-client-ca"),
}


def check_tls(c, w):
    errors = []
    for flag in TLS_FLAGS.get(c.program, ()):
        path = c.values.get(flag)
        if not path:
            errors.append("%s: no --%s (TLS on every listener, mTLS to the workers, API keys)" % (w, flag))
            continue
        mount = None
        for vm in c.spec.get("volumeMounts") or []:
            mp = vm["mountPath"].rstrip("/")
            if path.startswith(mp + "/") and (mount is None or len(mp) > len(mount["mountPath"].rstrip("/"))):
                mount = vm
        vol = mount and next((v for v in c.pod.spec.get("volumes") or [] if v["name"] == mount["name"]), None)
        if not vol or "secret" not in vol:
            errors.append("%s: --%s %s is not on a Secret volume" % (w, flag, path))
        elif mount.get("subPath"):
            errors.append("%s: --%s %s: a subPath mount never sees the rotated Secret" % (w, flag, path))
    return errors


def pods_of(pods, namespace, selector):
    return [p for p in pods if p.namespace == namespace and selector_matches(selector, p.labels)]


def check_services(objects, pods):
    errors = []
    for (kind, ns, name), svc in objects.items():
        if kind != "Service":
            continue
        spec = svc["spec"]
        if spec.get("type") == "ExternalName":
            continue
        targets = pods_of(pods, ns, {"matchLabels": spec.get("selector") or {}}) if spec.get("selector") else []
        if not targets:
            errors.append("Service %s: its selector %s matches no pod template" % (name, spec.get("selector")))
            continue
        for sp in spec.get("ports") or []:
            tp = sp.get("targetPort", sp["port"])
            for pod in targets:
                hits = [c for c in pod.containers if c.resolve(tp) is not None and c.listens_on(c.resolve(tp))]
                if not hits:
                    errors.append("Service %s port %s: targetPort %r is not a port %s/%s listens on"
                                  % (name, sp.get("name", sp["port"]), tp, pod.kind, pod.name))
                if spec.get("clusterIP") == "None" and any(c.resolve(tp) != sp["port"] for c in hits):
                    errors.append("Service %s is headless: port %s must equal the target port %r (clients dial pod IP:port)"
                                  % (name, sp["port"], tp))
        if spec.get("type") in ("LoadBalancer", "NodePort") and any(p.component != "router" for p in targets):
            errors.append("Service %s exposes %s outside the cluster: only the router may be" % (name, [p.name for p in targets]))
    # The router's HTTP API, when it has one, is reachable through a Service that is not headless.
    for pod in pods:
        for c in pod.containers:
            if c.program != "yoco-router" or "http-port" not in c.listen:
                continue
            exposed = False
            for (kind, ns, name), svc in objects.items():
                spec = svc.get("spec") or {}
                if kind != "Service" or ns != pod.namespace or spec.get("clusterIP") == "None" or not spec.get("selector"):
                    continue
                if not selector_matches({"matchLabels": spec["selector"]}, pod.labels):
                    continue
                exposed |= any(c.resolve(sp.get("targetPort", sp["port"])) == c.listen["http-port"]
                               for sp in spec.get("ports") or [])
            if not exposed:
                errors.append("%s: no Service exposes its --http-port %d" % (c.where, c.listen["http-port"]))
    # The router's worker targets: dns:NAME:PORT must be a headless Service of the right pods.
    for pod in pods:
        for c in pod.containers:
            if c.program != "yoco-router":
                continue
            for flag, binary in (("prefill", "yoco-prefill"), ("decode", "yoco-decode")):
                for item in str(c.values.get(flag, "")).split(","):
                    m = re.match(r"^dns:(?:/+)?([^:]+):(\d+)$", item.strip())
                    if not m:
                        errors.append("%s: --%s %r: in Kubernetes use dns:SERVICE:PORT" % (c.where, flag, item))
                        continue
                    host, port = m.group(1), int(m.group(2))
                    svc_name, _, svc_ns = host.partition(".")
                    svc_ns = svc_ns.split(".")[0] if svc_ns else pod.namespace
                    svc = objects.get(("Service", svc_ns, svc_name))
                    if svc is None:
                        errors.append("%s: --%s names Service %s, which is not rendered" % (c.where, flag, host))
                        continue
                    if svc["spec"].get("clusterIP") != "None":
                        errors.append("%s: --%s Service %s is not headless: DNS would give one virtual IP, not the pods"
                                      % (c.where, flag, host))
                    workers = pods_of(pods, svc_ns, {"matchLabels": svc["spec"].get("selector") or {}})
                    for w in workers:
                        wc = [x for x in w.containers if x.program == binary]
                        if not wc:
                            errors.append("%s: --%s Service %s selects %s/%s, which runs no %s" % (c.where, flag, host, w.kind, w.name, binary))
                        elif wc[0].listen.get("listen") != port:
                            errors.append("%s: --%s dials port %d, but %s listens for gRPC on %s"
                                          % (c.where, flag, port, w.name, wc[0].listen.get("listen")))
    return errors


def np_peer_matches(peer, policy_ns, src):
    """Whether a NetworkPolicy peer selects `src`: a pod (namespace, namespace labels, pod labels)
    or, with "external", an address outside the cluster (only an ipBlock for everything does)."""
    if "ipBlock" in peer:
        return bool(src.get("external")) and peer["ipBlock"]["cidr"] in ("0.0.0.0/0", "::/0")
    if src.get("external"):
        return False
    ns_sel, pod_sel = peer.get("namespaceSelector"), peer.get("podSelector")
    if ns_sel is None:
        if src["namespace"] != policy_ns:
            return False
    elif not selector_matches(ns_sel, src["ns_labels"]):
        return False
    return pod_sel is None or selector_matches(pod_sel, src["labels"])


def np_port_matches(rule_ports, port, protocol, dst_container=None):
    if not rule_ports:
        return True
    for rp in rule_ports:
        if rp.get("protocol", "TCP") != protocol:
            continue
        p = rp.get("port")
        if p is None:
            return True
        if isinstance(p, str) and not p.isdigit():
            if dst_container is not None and dst_container.resolve(p) == port:
                return True
            continue
        lo, hi = int(p), int(rp.get("endPort", p))
        if lo <= port <= hi:
            return True
    return False


def np_allows(policies, direction, subject, peer, port, protocol="TCP", container=None):
    """Kubernetes semantics: if no policy of this direction selects the subject pod, all is allowed."""
    selecting = [p for p in policies if subject["namespace"] == p["metadata"].get("namespace", "default")
                 and selector_matches(p["spec"].get("podSelector") or {}, subject["labels"])
                 and direction in (p["spec"].get("policyTypes") or ["Ingress"])]
    if not selecting:
        return True
    key = "ingress" if direction == "Ingress" else "egress"
    side = "from" if direction == "Ingress" else "to"
    for p in selecting:
        for rule in p["spec"].get(key) or []:
            peers = rule.get(side)
            if (not peers or any(np_peer_matches(x, p["metadata"].get("namespace", "default"), peer) for x in peers)) \
                    and np_port_matches(rule.get("ports"), port, protocol, container):
                return True
    return False


def who(pod):
    return {"namespace": pod.namespace, "ns_labels": {"kubernetes.io/metadata.name": pod.namespace}, "labels": pod.labels}


def check_network_policies(objects, pods):
    errors = []
    policies = [o for (k, _, _), o in objects.items() if k == "NetworkPolicy"]
    if not any(p["spec"].get("podSelector") == {} and set(p["spec"].get("policyTypes") or []) == {"Ingress", "Egress"}
               and not p["spec"].get("ingress") and not p["spec"].get("egress") for p in policies):
        errors.append("no default-deny NetworkPolicy (podSelector: {}, policyTypes: [Ingress, Egress], no rules)")
    for pol in policies:
        ns, name, spec = pol["metadata"].get("namespace", "default"), pol["metadata"]["name"], pol["spec"]
        selected = pods_of(pods, ns, spec.get("podSelector") or {})
        if spec.get("podSelector") and not selected:
            errors.append("NetworkPolicy %s selects no pod" % name)
        for rule in spec.get("ingress") or []:
            for rp in rule.get("ports") or []:
                if "port" not in rp:
                    continue
                lo = rp["port"]
                for pod in selected:
                    for n in ([lo] if isinstance(lo, str) else range(int(lo), int(rp.get("endPort", lo)) + 1)):
                        if not any((c.resolve(n) is not None and c.listens_on(c.resolve(n))) for c in pod.containers):
                            errors.append("NetworkPolicy %s: ingress port %s: %s/%s does not listen on it" % (name, n, pod.kind, pod.name))
                            break
        for rule in spec.get("egress") or []:
            for peer in rule.get("to") or []:
                if "podSelector" not in peer or "namespaceSelector" in peer:
                    continue
                targets = pods_of(pods, ns, peer["podSelector"])
                if not targets:
                    errors.append("NetworkPolicy %s: egress peer %s selects no pod" % (name, peer["podSelector"]))
                for rp in rule.get("ports") or []:
                    lo = rp["port"]
                    for n in ([lo] if isinstance(lo, str) else range(int(lo), int(rp.get("endPort", lo)) + 1)):
                        if targets and not any(c.resolve(n) is not None and c.listens_on(c.resolve(n))
                                               for t in targets for c in t.containers):
                            errors.append("NetworkPolicy %s: egress port %s: no pod it names listens on it" % (name, n))
                            break

    # The flows the cluster needs, each allowed at both ends, and some it must not have.
    by_comp = {}
    for pod in pods:
        by_comp.setdefault(pod.component, []).append(pod)

    def primary(pod):
        return next((c for c in pod.containers if c.binary or c.program == "redis-server"), pod.containers[0])

    def flow(src, dst, port, what):
        """None if src may open a TCP connection to pod dst's port, else why not."""
        c = primary(dst)
        if not np_allows(policies, "Egress", src, who(dst), port, "TCP", c):
            return "%s: egress of %s to port %s is not allowed" % (what, src["labels"].get("app.kubernetes.io/component"), port)
        if not np_allows(policies, "Ingress", who(dst), src, port, "TCP", c):
            return "%s: ingress of %s from %s on port %s is not allowed" % (what, dst.name, src["labels"], port)
        return None

    external = {"external": True, "namespace": "", "ns_labels": {}, "labels": {}}
    prometheus = {"namespace": "monitoring", "ns_labels": PROMETHEUS_PEER[0], "labels": PROMETHEUS_PEER[1]}
    dns = {"namespace": "kube-system", "ns_labels": {"kubernetes.io/metadata.name": "kube-system"}, "labels": {"k8s-app": "kube-dns"}}
    for r in by_comp.get("router", []):
        rc = primary(r)
        if not np_allows(policies, "Ingress", who(r), external, rc.listen["listen"], "TCP", rc):
            errors.append("clients cannot reach the router's gRPC port %s" % rc.listen["listen"])
        if "http-port" in rc.listen and not np_allows(policies, "Ingress", who(r), external, rc.listen["http-port"],
                                                      "TCP", rc):
            errors.append("clients cannot reach the router's HTTP port %s" % rc.listen["http-port"])
        for role in ("prefill", "decode"):
            for w in by_comp.get(role, []):
                errors.append(flow(who(r), w, primary(w).listen["listen"], "router -> %s gRPC" % role))
    for p in by_comp.get("prefill", []):
        for d in by_comp.get("decode", []):
            dc = primary(d)
            errors.append(flow(who(p), d, dc.listen["ucx-listen"], "prefill -> decode UCX listener"))
            for lo, hi in dc.ranges:
                for n in (lo, hi):
                    errors.append(flow(who(p), d, n, "prefill -> decode UCX tcp lanes (UCX_TCP_PORT_RANGE)"))
            if not dc.ranges:
                errors.append("decode %s has no UCX_TCP_PORT_RANGE: UCX's tcp lanes would use random ports the "
                              "NetworkPolicy cannot allow" % d.name)
    for role in ("router", "prefill", "decode"):
        for pod in by_comp.get(role, []):
            c = primary(pod)
            if not np_allows(policies, "Ingress", who(pod), prometheus, c.listen["metrics-listen"], "TCP", c):
                errors.append("Prometheus (%s) cannot scrape %s on %s" % (PROMETHEUS_PEER, pod.name, c.listen["metrics-listen"]))
            for proto in ("UDP", "TCP"):
                if not np_allows(policies, "Egress", who(pod), dns, 53, proto):
                    errors.append("%s cannot reach cluster DNS (53/%s)" % (pod.name, proto))
    for r in by_comp.get("redis", []):
        port = primary(r).listen["port"]
        for role in ("prefill", "decode"):
            for w in by_comp.get(role, []):
                errors.append(flow(who(w), r, port, "%s -> redis" % role))
        for w in by_comp.get("router", []):
            if flow(who(w), r, port, "") is None:
                errors.append("the router may reach Redis; only the workers should")
    if "redis" not in by_comp and any(o["spec"].get("type") == "ExternalName" for (k, _, n), o in objects.items()
                                      if k == "Service" and n == "yoco-redis"):
        for role in ("prefill", "decode"):
            for w in by_comp.get(role, []):
                ok = False
                for pol in policies:
                    if selector_matches(pol["spec"].get("podSelector") or {}, w.labels):
                        for rule in pol["spec"].get("egress") or []:
                            if any("ipBlock" in x for x in rule.get("to") or []) and np_port_matches(rule.get("ports"), 6379, "TCP"):
                                ok = True
                if not ok:
                    errors.append("%s: no egress to the external Redis (ipBlock, port 6379)" % w.name)
    for d in by_comp.get("decode", []):
        for p in by_comp.get("prefill", []):
            if flow(who(d), p, primary(p).listen["listen"], "") is None:
                errors.append("decode may open connections to prefill's gRPC port; nothing needs that")
    return errors


def check_planner(objects, pods):
    """The SLA planner's Deployment (deploy/k8s/components/planner), where a render has one."""
    errors = []
    planners = [(p, c) for p in pods for c in p.containers if c.planner]
    if not planners:
        return errors
    sys.path.insert(0, os.path.join(ROOT, "tools", "planner"))
    from errors import PlanError
    from profiles import Profile
    policies = [o for (k, _, _), o in objects.items() if k == "NetworkPolicy"]
    for pod, c in planners:
        w, ns, v = c.where, pod.namespace, c.values
        if pod.obj["spec"].get("replicas", 1) != 1:
            errors.append("%s: %d replicas: a second planner would scale the workers twice" % (w, pod.obj["spec"]["replicas"]))
        # The profile: a ConfigMap key the planner's own reader accepts.
        path = v.get("profile", "")
        mount = next((vm for vm in c.spec.get("volumeMounts") or [] if path.startswith(vm["mountPath"].rstrip("/") + "/")), None)
        vol = mount and next((x for x in pod.spec.get("volumes") or [] if x["name"] == mount["name"]), None)
        if not vol or "configMap" not in vol:
            errors.append("%s: --profile %r is not on a ConfigMap volume" % (w, path))
        else:
            cm = objects.get(("ConfigMap", ns, vol["configMap"]["name"])) or {}
            text = (cm.get("data") or {}).get(path[len(mount["mountPath"].rstrip("/")) + 1:])
            if text is None:
                errors.append("%s: --profile %s is not a key of ConfigMap %s" % (w, path, vol["configMap"]["name"]))
            else:
                try:
                    Profile(json.loads(text), path)
                except (ValueError, PlanError) as e:
                    errors.append("%s: --profile %s: %s" % (w, path, e))
        # The metrics: a Service of the router pods, on their --metrics-listen port.
        m = re.match(r"^http://([a-z0-9-]+)(?:\.[a-z0-9.-]+)?:(\d+)/metrics$", v.get("metrics-url", ""))
        routers = [p for p in pods if p.component == "router" and p.namespace == ns]
        if not m:
            errors.append("%s: --metrics-url %r is not http://SERVICE:PORT/metrics" % (w, v.get("metrics-url")))
        else:
            svc = objects.get(("Service", ns, m.group(1)))
            port = int(m.group(2))
            sp = next((x for x in ((svc or {}).get("spec") or {}).get("ports") or [] if x["port"] == port), None)
            sel = ((svc or {}).get("spec") or {}).get("selector")
            targets = pods_of(pods, ns, {"matchLabels": sel}) if sel else []
            if not svc or not targets or any(t.component != "router" for t in targets):
                errors.append("%s: --metrics-url names %s, which is not a Service of the router pods" % (w, m.group(1)))
            elif sp is None or any(next(x for x in t.containers if x.binary).resolve(sp.get("targetPort", port))
                                   != next(x for x in t.containers if x.binary).listen.get("metrics-listen") for t in targets):
                errors.append("%s: --metrics-url port %d is not the routers' --metrics-listen port" % (w, port))
            if svc and (svc["spec"].get("clusterIP") != "None"):
                errors.append("%s: --metrics-url %s: a ClusterIP Service reaches one router; the planner sums every "
                              "router's metrics through a headless one" % (w, m.group(1)))
            for r in routers:
                rc = next(x for x in r.containers if x.binary)
                if not np_allows(policies, "Egress", who(pod), who(r), rc.listen["metrics-listen"], "TCP", rc):
                    errors.append("%s: egress to %s's metrics port is not allowed" % (w, r.name))
                if not np_allows(policies, "Ingress", who(r), who(pod), rc.listen["metrics-listen"], "TCP", rc):
                    errors.append("%s: %s does not admit the planner on its metrics port" % (w, r.name))
        external = {"external": True, "namespace": "", "ns_labels": {}, "labels": {}}
        if not any(np_allows(policies, "Egress", who(pod), external, port) for port in (443, 6443)):
            errors.append("%s: no egress to the Kubernetes API server (443 or 6443)" % w)
        # What it scales: the worker Deployments, which nothing else scales.
        scaled = {}
        for flag, role in (("prefill-deployment", "prefill"), ("decode-deployment", "decode")):
            name = v.get(flag, "yoco-" + role)
            d = next((p for p in pods if p.kind == "Deployment" and p.name == name and p.namespace == ns), None)
            if d is None or d.component != role:
                errors.append("%s: --%s %s is not the rendered %s Deployment" % (w, flag, name, role))
            scaled[name] = d
        for (kind, hns, hname), o in objects.items():
            if kind == "HorizontalPodAutoscaler" and hns == ns and o["spec"]["scaleTargetRef"]["name"] in scaled:
                errors.append("HPA %s also scales %s, which the planner scales" % (hname, o["spec"]["scaleTargetRef"]["name"]))
        # Least privilege: get and patch on those two deployments/scale, nothing else, nowhere else.
        sa = pod.spec.get("serviceAccountName")
        if not sa or ("ServiceAccount", ns, sa) not in objects:
            errors.append("%s: serviceAccountName %r is not a rendered ServiceAccount" % (w, sa))
        bound = []
        for (kind, bns, bname), o in objects.items():
            if kind in ("RoleBinding", "ClusterRoleBinding") and any(
                    s.get("kind") == "ServiceAccount" and s.get("name") == sa and s.get("namespace", bns) == ns
                    for s in o.get("subjects") or []):
                if kind == "ClusterRoleBinding" or o["roleRef"]["kind"] != "Role":
                    errors.append("%s %s binds the planner to a ClusterRole: the Role in its namespace is all it needs"
                                  % (kind, bname))
                    continue
                role = objects.get(("Role", bns, o["roleRef"]["name"]))
                if role is None:
                    errors.append("RoleBinding %s: Role %s is not rendered" % (bname, o["roleRef"]["name"]))
                    continue
                bound.append(role)
        if not bound:
            errors.append("%s: no RoleBinding gives %s the scale subresource" % (w, sa))
        verbs = set()
        for role in bound:
            for rule in role.get("rules") or []:
                where = "Role %s" % role["metadata"]["name"]
                if rule.get("apiGroups") != ["apps"] or rule.get("resources") != ["deployments/scale"]:
                    errors.append("%s: grants %s %s; the planner needs apps deployments/scale only"
                                  % (where, rule.get("apiGroups"), rule.get("resources")))
                if not set(rule.get("verbs") or []) <= {"get", "patch"}:
                    errors.append("%s: verbs %s beyond get and patch" % (where, rule.get("verbs")))
                if set(rule.get("resourceNames") or []) != set(scaled):
                    errors.append("%s: resourceNames %s, not exactly %s" % (where, rule.get("resourceNames"), sorted(scaled)))
                verbs |= set(rule.get("verbs") or [])
        if bound and verbs != {"get", "patch"}:
            errors.append("%s: the Role grants %s; reading and setting the scale needs get and patch" % (w, sorted(verbs)))
    return errors


def check_other_objects(objects, pods, source_dir):
    errors = []
    adapter = os.path.join(source_dir, "deploy/prometheus/adapter-rules.yaml")
    with open(adapter) as f:
        adapter_rules = yaml.safe_load(f)
    served = []
    for rule in (adapter_rules.get("externalRules") or []) + (adapter_rules.get("rules") or []):
        m = re.search(r'__name__=~"([^"]+)"', rule["seriesQuery"])
        served.append(re.compile("^(?:%s)$" % m.group(1)) if m else re.compile("^" + re.escape(rule["seriesQuery"].split("{")[0]) + "$"))
    for (kind, ns, name), o in objects.items():
        spec = o.get("spec") or {}
        if kind == "PodDisruptionBudget":
            if not pods_of(pods, ns, spec.get("selector")):
                errors.append("PodDisruptionBudget %s selects no pod" % name)
        if kind == "HorizontalPodAutoscaler":
            ref = spec["scaleTargetRef"]
            target = next((p for p in pods if p.kind == ref["kind"] and p.name == ref["name"] and p.namespace == ns), None)
            if target is None:
                errors.append("HPA %s: scale target %s/%s is not rendered" % (name, ref["kind"], ref["name"]))
                continue
            if spec.get("minReplicas", 1) > spec["maxReplicas"]:
                errors.append("HPA %s: minReplicas > maxReplicas" % name)
            if "replicas" in target.obj["spec"]:
                errors.append("HPA %s: %s sets replicas, which every `kubectl apply` would reset" % (name, ref["name"]))
            bins = [c.binary for c in target.containers if c.binary]
            for m in spec.get("metrics") or []:
                if m["type"] in ("Pods", "External", "Object"):
                    body = m[m["type"].lower()]
                    metric = body["metric"]["name"]
                    if not any(metric in b.metrics for b in bins):
                        errors.append("HPA %s: metric %s is not exported by %s" % (name, metric, [b.name for b in bins]))
                    if not any(r.match(metric) for r in served):
                        errors.append("HPA %s: metric %s is served by no rule in deploy/prometheus/adapter-rules.yaml" % (name, metric))
                    sel = ((body["metric"].get("selector") or {}).get("matchLabels") or {})
                    if m["type"] == "External" and sel.get("component") != target.component:
                        errors.append("HPA %s: external metric selector component=%s, but it scales %s pods"
                                      % (name, sel.get("component"), target.component))
        if kind == "PodMonitor":
            targets = pods_of(pods, ns, spec.get("selector"))
            if not targets:
                errors.append("PodMonitor %s selects no pod" % name)
            for ep in spec.get("podMetricsEndpoints") or []:
                for pod in targets:
                    c = next((c for c in pod.containers if ep.get("port") in c.ports), None)
                    if c is None or c.ports[ep["port"]] != c.listen.get("metrics-listen"):
                        errors.append("PodMonitor %s: port %r of %s is not its --metrics-listen port" % (name, ep.get("port"), pod.name))
    for pod in pods:
        for v in pod.spec.get("volumes") or []:
            if "configMap" in v and ("ConfigMap", pod.namespace, v["configMap"]["name"]) not in objects:
                errors.append("%s/%s: volume %s: ConfigMap %s is not rendered" % (pod.kind, pod.name, v["name"], v["configMap"]["name"]))
            if "persistentVolumeClaim" in v and ("PersistentVolumeClaim", pod.namespace, v["persistentVolumeClaim"]["claimName"]) not in objects:
                errors.append("%s/%s: volume %s: PVC %s is not rendered" % (pod.kind, pod.name, v["name"], v["persistentVolumeClaim"]["claimName"]))
        for c in pod.containers:
            model_dir = c.values.get("model")
            if c.binary and not model_dir:
                errors.append("%s: no --model" % c.where)
            elif c.binary:
                mounts = [vm["mountPath"] for vm in c.spec.get("volumeMounts") or []]
                if not any(model_dir == m or model_dir.startswith(m.rstrip("/") + "/") for m in mounts) \
                        and not model_dir.startswith("/opt/yoco/models/"):
                    errors.append("%s: --model %s is neither on a volume nor in the image (/opt/yoco/models)" % (c.where, model_dir))
                if model_dir.startswith("/opt/yoco/models/") and not str(c.spec.get("image", "")).endswith(":cpu"):
                    errors.append("%s: --model %s is baked into the CPU image only, but the image is %s"
                                  % (c.where, model_dir, c.spec.get("image")))
    return errors


# ---------------------------------------------------------------------------------------------
# Schema validation


def schema_validator():
    try:
        import functools
        import kubernetes_validate
        import kubernetes_validate.utils as kv_utils
    except ImportError as e:
        return None, "kubernetes_validate is not importable by %s (%s): run scripts/setup.sh" % (sys.executable, e)
    # The package re-reads the 2 MB definitions file for every object: read each file once.
    kv_utils.schema_contents = functools.lru_cache(maxsize=None)(kv_utils.schema_contents)
    latest = kv_utils.latest_version()

    def validate(obj, version):
        v = latest if version == "latest" else version
        try:
            kubernetes_validate.validate(obj, v, strict=True)
            return None
        except kubernetes_validate.ValidationError as e:
            path = ".".join(str(p) for p in e.path)
            return "%s: %s" % (path, e.message)
        except kubernetes_validate.SchemaNotFoundError as e:
            return "no schema: " + e.message
    return (validate, latest), None


def self_check_validator(validate):
    """The validator must reject broken objects, or the check proves nothing."""
    good = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "x"},
            "spec": {"selector": {"matchLabels": {"a": "b"}},
                     "template": {"metadata": {"labels": {"a": "b"}},
                                  "spec": {"containers": [{"name": "c", "image": "i", "imagePullPolicy": "IfNotPresent",
                                                           "readinessProbe": {"grpc": {"port": 7000}}}]}}}}
    bad = []
    b = copy.deepcopy(good)
    b["spec"]["template"]["spec"]["containers"][0]["imagePullPolicyy"] = "IfNotPresent"
    bad.append(("misspelled container field imagePullPolicyy", b))
    b = copy.deepcopy(good)
    b["spec"]["replicas"] = "two"
    bad.append(("replicas as a string", b))
    b = copy.deepcopy(good)
    del b["spec"]["template"]["spec"]["containers"][0]["name"]
    bad.append(("container without its required name", b))
    b = copy.deepcopy(good)
    b["spec"]["template"]["spec"]["containers"][0]["readinessProbe"]["grpc"]["port"] = "grpc"
    bad.append(("grpc probe port as a name (the API wants a number)", b))
    bad.append(("misspelled NetworkPolicy field", {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
                                                   "metadata": {"name": "x"}, "spec": {"podSelector": {}, "policyType": ["Ingress"]}}))
    errors = []
    for version in K8S_VERSIONS:
        err = validate(good, version)
        if err:
            errors.append("validator (%s) rejects a valid Deployment: %s" % (version, err))
        for what, obj in bad:
            if validate(obj, version) is None:
                errors.append("validator (%s) accepts a broken object: %s" % (version, what))
    return errors


def check_schemas(renders, validate):
    errors, seen = [], set()
    for render, docs in renders.items():
        for d in docs:
            key = json.dumps(d, sort_keys=True)
            if key in seen:
                continue
            seen.add(key)
            if d.get("apiVersion", "").startswith(("monitoring.coreos.com/", "cert-manager.io/")):
                continue  # a CRD: no API schema; check_other_objects checks it against the pods
            for version in K8S_VERSIONS:
                err = validate(d, version)
                if err:
                    errors.append("%s: %s/%s (Kubernetes %s): %s" % (render, d.get("kind"), d["metadata"].get("name"), version, err))
    return errors, len(seen)


# ---------------------------------------------------------------------------------------------
# Prometheus, Grafana


def promql_names(expr):
    """(metric, component or None) for each yoco_ metric an expression names."""
    out = []
    for m in re.finditer(r"\b(yoco_[a-z0-9_]+)(\{[^}]*\})?", expr):
        name = re.sub(r"_(bucket|sum|count)$", "", m.group(1))
        comp = re.search(r'component\s*=\s*"([a-z]+)"', m.group(2) or "")
        out.append((name, comp.group(1) if comp else None))
    return out


def check_metric_names(exprs, binaries, where):
    errors = []
    by_comp = {"router": binaries["yoco-router"], "prefill": binaries["yoco-prefill"], "decode": binaries["yoco-decode"]}
    everything = set().union(*(b.metrics for b in binaries.values()))
    for label, expr in exprs:
        names = promql_names(expr)
        if not names:
            errors.append("%s %s: names no yoco_ metric: %s" % (where, label, expr))
        for name, comp in names:
            if name in PENDING_METRICS and name not in everything:
                continue
            if comp and name not in by_comp[comp].metrics:
                errors.append("%s %s: %s{component=%r} is not exported by %s" % (where, label, name, comp, by_comp[comp].name))
            elif name not in everything:
                errors.append("%s %s: %s is exported by no binary" % (where, label, name))
    return errors


def promtool_rules(promtool, exprs):
    """PromQL syntax of dashboard expressions: as recording rules through `promtool check rules`."""
    rules = {"groups": [{"name": "dashboard", "rules": [
        {"record": "dashboard:expr_%d" % i,
         "expr": e.replace("$__rate_interval", "5m").replace("$namespace", "yoco")} for i, (_, e) in enumerate(exprs)]}]}
    with tempfile.NamedTemporaryFile("w", suffix=".yml", delete=False) as f:
        yaml.safe_dump(rules, f)
    try:
        out = subprocess.run([promtool, "check", "rules", f.name], capture_output=True, text=True, timeout=60)
    finally:
        os.unlink(f.name)
    return None if out.returncode == 0 else (out.stdout + out.stderr).strip()


def check_prometheus(promtool, source_dir, objects_all):
    errors = []
    cfg = os.path.join(source_dir, "deploy/prometheus/prometheus.yml")
    out = subprocess.run([promtool, "check", "config", cfg], capture_output=True, text=True, timeout=60)
    if out.returncode != 0:
        errors.append("promtool check config %s:\n%s" % (cfg, (out.stdout + out.stderr).strip()))
    with open(cfg) as f:
        conf = yaml.safe_load(f)
    # The DNS names it scrapes are headless Services with the metrics port, and the relabelling
    # gives each the component label the dashboard filters on.
    for job in conf.get("scrape_configs") or []:
        relabels = job.get("relabel_configs") or []
        for sd in job.get("dns_sd_configs") or []:
            for dns_name in sd["names"]:
                labels = {"__meta_dns_name": dns_name}
                for r in relabels:
                    src = ";".join(labels.get(s, "") for s in r.get("source_labels") or [])
                    m = re.fullmatch(r.get("regex", "(.*)"), src)
                    if m and r.get("action", "replace") == "replace":
                        labels[r["target_label"]] = re.sub(r"\$(\d+)", lambda g: m.group(int(g.group(1))) or "", r.get("replacement", "$1"))
                svc_name, ns = dns_name.split(".")[0], dns_name.split(".")[1]
                svc = objects_all.get(("Service", ns, svc_name))
                if svc is None:
                    errors.append("prometheus.yml scrapes %s: no Service %s in namespace %s" % (dns_name, svc_name, ns))
                    continue
                if svc["spec"].get("clusterIP") != "None":
                    errors.append("prometheus.yml scrapes %s: not headless, would scrape one pod at random" % dns_name)
                if not any(p["port"] == sd["port"] for p in svc["spec"].get("ports") or []):
                    errors.append("prometheus.yml scrapes %s on %s: the Service has no such port" % (dns_name, sd["port"]))
                comp = (svc["spec"].get("selector") or {}).get("app.kubernetes.io/component")
                if labels.get("component") != comp or labels.get("namespace") != ns:
                    errors.append("prometheus.yml: %s gets component=%r namespace=%r, expected %r %r"
                                  % (dns_name, labels.get("component"), labels.get("namespace"), comp, ns))
    return errors


def check_grafana_and_rules(promtool, source_dir, binaries):
    errors, exprs = [], []
    path = os.path.join(source_dir, "deploy/grafana/yoco-dashboard.json")
    try:
        with open(path) as f:
            dash = json.load(f)
    except (OSError, ValueError) as e:
        return ["%s: %s" % (path, e)]

    def walk(panels):
        for p in panels:
            yield p
            yield from walk(p.get("panels") or [])
    titles = []
    for p in walk(dash.get("panels") or []):
        if p.get("type") == "row":
            continue
        titles.append(p.get("title", ""))
        if not p.get("targets"):
            errors.append("dashboard panel %r has no query" % p.get("title"))
        for t in p.get("targets") or []:
            exprs.append(("panel %r" % p.get("title"), t["expr"]))
    want = {"time to first token", "inter-token", "tokens per second", "waiting", "kv cache usage",
            "kv transfer bandwidth", "hit rate"}
    for w in want:
        if not any(w in t.lower() for t in titles):
            errors.append("dashboard has no panel about %r" % w)
    errors += check_metric_names(exprs, binaries, "dashboard")
    err = promtool_rules(promtool, exprs)
    if err:
        errors.append("dashboard PromQL does not parse:\n" + err)
    with open(os.path.join(source_dir, "deploy/prometheus/yoco-rules.yml")) as f:
        rules = yaml.safe_load(f)
    rule_exprs = [("rule %s" % (r.get("record") or r.get("alert")), r["expr"]) for g in rules["groups"] for r in g["rules"]]
    errors += check_metric_names(rule_exprs, binaries, "yoco-rules.yml")
    return errors


# ---------------------------------------------------------------------------------------------
# Dockerfiles


def dockerfile_instructions(path):
    lines, cur = [], ""
    with open(path) as f:
        for raw in f:
            s = raw.rstrip("\n")
            if not cur and (not s.strip() or s.lstrip().startswith("#")):
                continue
            if cur and s.lstrip().startswith("#"):
                continue
            if s.endswith("\\"):
                cur += s[:-1] + " "
                continue
            cur += s
            lines.append(cur.strip())
            cur = ""
    out = []
    for line in lines:
        word, _, rest = line.partition(" ")
        out.append((word.upper(), rest.strip()))
    return out


def dockerignore(path):
    pats = []
    if os.path.exists(path):
        with open(path) as f:
            for line in f:
                line = line.strip()
                if line and not line.startswith("#"):
                    pats.append(line.rstrip("/"))
    return pats


def ignored(rel, pats):
    """.dockerignore semantics, enough for these files: a pattern excludes a path and what is under it."""
    result = False
    for pat in pats:
        neg = pat.startswith("!")
        p = pat[1:] if neg else pat
        parts = rel.split("/")
        for i in range(1, len(parts) + 1):
            prefix = "/".join(parts[:i])
            if fnmatch.fnmatchcase(prefix, p) or (p.startswith("**/") and fnmatch.fnmatchcase(parts[i - 1], p[3:])):
                result = not neg
                break
    return result


def apt_closure(packages):
    """Installed packages reachable from `packages` through Depends/Pre-Depends (dpkg's view)."""
    out = subprocess.run(["dpkg-query", "-W", "-f=${Package}\t${Depends}, ${Pre-Depends}\n"],
                         capture_output=True, text=True)
    deps = {}
    for line in out.stdout.splitlines():
        pkg, _, rest = line.partition("\t")
        deps[pkg] = [d.strip().split(" ")[0].split(":")[0] for alt in rest.split(",") for d in alt.split("|") if d.strip()]
    seen, todo = set(), list(packages)
    while todo:
        p = todo.pop()
        if p not in seen:
            seen.add(p)
            todo.extend(deps.get(p, []))
    return seen


def package_owners(paths):
    """{path: Debian package} for the paths dpkg knows (usrmerge: /lib and /usr/lib are the same)."""
    cands = {}
    for p in paths:
        real = os.path.realpath(p)
        for c in (p, real, real.replace("/usr/lib/", "/lib/", 1), real.replace("/lib/", "/usr/lib/", 1)):
            cands.setdefault(c, p)
    out = subprocess.run(["dpkg-query", "-S"] + sorted(cands), capture_output=True, text=True)
    owners = {}
    for line in out.stdout.splitlines():
        pkg, _, path = line.partition(": ")
        if path in cands:
            owners.setdefault(cands[path], pkg.split(":")[0].split(",")[0].strip())
    return owners


def check_dockerfiles(source_dir, build_dir, binaries):
    errors, copied = [], 0
    ddir = os.path.join(source_dir, "deploy/docker")
    files = sorted(f for f in os.listdir(ddir) if f.endswith("Dockerfile"))
    if not {"cpu.Dockerfile", "cuda.Dockerfile"} <= set(files):
        errors.append("deploy/docker needs cpu.Dockerfile and cuda.Dockerfile, has %s" % files)
    with open(os.path.join(source_dir, "CMakeLists.txt")) as f:
        subdirs = re.findall(r"add_subdirectory\(\s*([^\s)]+)", f.read())
    for name in files:
        path = os.path.join(ddir, name)
        pats = dockerignore(path + ".dockerignore")
        instrs = dockerfile_instructions(path)
        stages, cur, final_stage = {}, None, None
        build_targets = set()
        for word, rest in instrs:
            if word == "FROM":
                m = re.match(r"^(\S+)(?:\s+AS\s+(\S+))?", rest, re.I)
                cur = {"image": m.group(1), "name": m.group(2), "instrs": []}
                stages[m.group(2) or "#%d" % len(stages)] = cur
                final_stage = cur
            elif cur is not None:
                cur["instrs"].append((word, rest))
            if word == "RUN" and "--target" in rest:
                build_targets |= set(re.findall(r"\byoco-[a-z]+\b", rest.split("--target", 1)[1]))
        if len(stages) < 2:
            errors.append("%s: not multi-stage" % name)
        uses_cmake_build = any("cmake" in r for s in stages.values() for w, r in s["instrs"] if w == "RUN")
        # scripts/build_xgrammar.sh's install directory in the build stage (YOCO_DEPS_DIR), and on this host.
        deps_dir = next((m.group(1).rstrip("/") for s in stages.values() for w, r in s["instrs"] if w == "RUN"
                         for m in [re.search(r"YOCO_DEPS_DIR=(\S+)\s+scripts/build_xgrammar\.sh", r)] if m), None)
        host_deps = os.environ.get("YOCO_DEPS_DIR") or os.path.join(
            os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "yoco")
        # The build stage copies the context: every directory the top CMakeLists adds must be in it,
        # except the test and benchmark trees the image build turns off.
        if uses_cmake_build:
            for sd in subdirs:
                if ignored(sd, pats) and sd not in ("tests", "tests/fuzz", "bench"):
                    errors.append("%s: CMakeLists.txt adds %s, but %s.dockerignore excludes it" % (name, sd, name))
        for stage in stages.values():
            for word, rest in stage["instrs"]:
                if word not in ("COPY", "ADD"):
                    continue
                toks = rest.split()
                flags = [t for t in toks if t.startswith("--")]
                paths = [t for t in toks if not t.startswith("--")]
                if rest.lstrip().startswith("["):
                    paths = json.loads(rest[rest.index("["):])
                srcs = paths[:-1]
                frm = next((f.split("=", 1)[1] for f in flags if f.startswith("--from=")), None)
                for src in srcs:
                    copied += 1
                    if frm:
                        if frm not in stages:
                            errors.append("%s: COPY --from=%s: no such stage" % (name, frm))
                            continue
                        # /src is the build stage's copy of the context, /src/build its build tree.
                        if src.startswith("/src/build/"):
                            local = os.path.join(build_dir, src[len("/src/build/"):])
                            if os.path.basename(src).startswith("yoco-") and os.path.basename(src) not in build_targets:
                                errors.append("%s: copies %s, which its build does not build (--target)" % (name, src))
                        elif src.startswith("/src/"):
                            local = os.path.join(source_dir, src[len("/src/"):])
                        elif deps_dir and src.startswith(deps_dir + "/"):
                            # What scripts/build_xgrammar.sh installed there: the same as on this host.
                            local = os.path.join(host_deps, src[len(deps_dir) + 1:])
                        else:
                            errors.append("%s: COPY --from=%s %s: not under the build stage's /src" % (name, frm, src))
                            continue
                        if not os.path.exists(local):
                            errors.append("%s: COPY --from=%s %s: %s does not exist (after a build)" % (name, frm, src, local))
                    elif src == ".":
                        continue
                    else:
                        hits = glob.glob(os.path.join(source_dir, src))
                        if not hits:
                            errors.append("%s: COPY %s: not in the build context (%s)" % (name, src, source_dir))
                        elif ignored(src.rstrip("/"), pats):
                            errors.append("%s: COPY %s, but its .dockerignore excludes it" % (name, src))
        # Exec form that is not valid JSON silently becomes shell form: parse every one.
        for word, rest in instrs:
            body = re.sub(r"^(--\S+\s+)*(CMD\s+)?", "", rest) if word == "HEALTHCHECK" else rest
            if word in ("CMD", "ENTRYPOINT", "HEALTHCHECK") and body.startswith("["):
                try:
                    json.loads(body)
                except ValueError as e:
                    errors.append("%s: %s %s: not a JSON array (%s)" % (name, word, body[:60], e))
        fw = [w for w, _ in final_stage["instrs"]]
        for need in ("USER", "HEALTHCHECK", "LABEL"):
            if need not in fw:
                errors.append("%s: the final stage has no %s" % (name, need))
        user = next((r for w, r in final_stage["instrs"] if w == "USER"), "")
        if not re.match(r"^[1-9]\d*(:\d+)?$", user):
            errors.append("%s: USER %r: a numeric non-root uid lets runAsNonRoot verify it" % (name, user))
        for w, r in final_stage["instrs"]:
            # The SLA planner is standard-library Python: its sources are what runs (tools/planner).
            if w == "COPY" and "--from" not in r and not r.startswith(("models/", "tools/planner ")):
                errors.append("%s: the final stage copies %r from the context: only binaries, the model and the "
                              "planner's sources belong there" % (name, r))
        # The runtime packages must provide every shared library the binaries load (Debian image:
        # checked against this machine's dpkg database, which is the same Debian 12).
        if final_stage["image"].startswith("debian:12") and shutil.which("dpkg-query") and shutil.which("ldd"):
            runs = " ".join(r for w, r in final_stage["instrs"] if w == "RUN")
            m = re.search(r"apt-get install ([^&]*)", runs)
            pkgs = [t for t in (m.group(1).split() if m else []) if not t.startswith("-")]
            have = apt_closure(pkgs + ["libc6", "libgcc-s1", "libstdc++6"])
            # An image built without CUDA does not link the toolkit's libraries that the binaries
            # built here (with YOCO_CUDA) do.
            no_cuda = any("-DYOCO_CUDA=OFF" in r for st in stages.values() for w, r in st["instrs"] if w == "RUN")
            needs = {}
            for b in binaries.values():
                out = subprocess.run(["ldd", b.path], capture_output=True, text=True)
                for lib in re.findall(r"=> (/\S+)", out.stdout):
                    if no_cuda and re.match(r"/usr/local/cuda[^/]*/", lib):
                        continue
                    needs.setdefault(lib, b.name)
            owners = package_owners(needs)
            for lib, bname in sorted(needs.items()):
                owner = owners.get(lib)
                if owner is None:
                    errors.append("%s: %s needs %s, which no Debian package provides" % (name, bname, lib))
                elif owner not in have:
                    errors.append("%s: %s needs %s (package %s), not among the runtime packages %s or their dependencies"
                                  % (name, bname, lib, owner, pkgs))
    return errors, copied


# ---------------------------------------------------------------------------------------------


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--source-dir", required=True)
    ap.add_argument("--build-dir", required=True)
    ap.add_argument("--router", required=True)
    ap.add_argument("--prefill", required=True)
    ap.add_argument("--decode", required=True)
    ap.add_argument("--kubectl", default=shutil.which("kubectl") or "kubectl")
    ap.add_argument("--promtool", default=shutil.which("promtool") or "promtool")
    a = ap.parse_args()
    src = os.path.abspath(a.source_dir)
    k8s = os.path.join(src, "deploy/k8s")

    binaries = {}
    errs = []
    for path in (a.router, a.prefill, a.decode):
        try:
            b = Binary(path)
            binaries[b.name] = b
        except (OSError, RuntimeError, subprocess.SubprocessError) as e:
            errs.append(str(e))
    check("binaries answer --help (%s)" % ", ".join(sorted(binaries)), errs)
    if set(binaries) != set(YOCO_BINARIES):
        return summary()

    for tool in (a.kubectl, a.promtool):
        if not shutil.which(tool):
            check("%s is installed" % tool, ["%s not found (kubectl: in the machine image; promtool: the prometheus package, scripts/setup.sh)" % tool])
            return summary()

    renders, errs = render_all(a.kubectl, k8s)
    check("kubectl kustomize renders %d combinations (%s)" % (len(renders), ", ".join(renders)), errs)

    objects_all = {}
    for name, docs in renders.items():
        objects, pods, errs = model(docs, binaries)
        objects_all.update(objects)
        errs += check_containers(pods)
        check("%s: flags, config keys, ports, probes, security (%d objects, %d containers)"
              % (name, len(docs), sum(len(p.containers) for p in pods)), errs)
        check("%s: Services and the router's dns: targets" % name, check_services(objects, pods))
        check("%s: NetworkPolicies (default deny, needed flows allowed, others denied)" % name,
              check_network_policies(objects, pods))
        check("%s: PDBs, HPAs, PodMonitor, volumes, model paths" % name,
              check_other_objects(objects, pods, src))
        if any(c.planner for p in pods for c in p.containers):
            check("%s: the SLA planner (flags, profile, metrics URL, scale targets, least-privilege Role, network)"
                  % name, check_planner(objects, pods))

    validator, err = schema_validator()
    if err:
        check("schema validation (kubernetes-validate)", [err])
    else:
        validate, latest = validator
        check("schema validator rejects broken objects (Kubernetes %s)" % ", ".join(
            v if v != "latest" else latest for v in K8S_VERSIONS), self_check_validator(validate))
        errs, n = check_schemas(renders, validate)
        check("%d distinct rendered objects valid against the Kubernetes API schema (strict)" % n, errs)

    check("promtool check config deploy/prometheus/prometheus.yml; its DNS names are the headless Services",
          check_prometheus(a.promtool, src, objects_all))
    check("Grafana dashboard and alert rules: PromQL parses, metrics exported by the components they select",
          check_grafana_and_rules(a.promtool, src, binaries))
    errs, copied = check_dockerfiles(src, os.path.abspath(a.build_dir), binaries)
    check("Dockerfiles: %d copied paths exist, runtime packages cover the binaries' libraries" % copied, errs)
    return summary()


def summary():
    passed = sum(1 for ok, _, _ in results if ok)
    failed = len(results) - passed
    print("%d passed, %d failed" % (passed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
