#!/usr/bin/env python3
"""Checks the include graph and the router's link line against the layering rules of
docs/architecture.md ("Dependency rules"). Standard library only; any python3.

  scripts/check_layers.py [--root DIR] [--build-dir DIR]   exit 0: every rule holds
  scripts/check_layers.py --self-test                      plants one violation per rule in a copy
                                                            and exits 0 only if each is caught

Every project include is written from the repository root ("folder/file.h"), so the folder of
the including file and the folder of the included one are the two ends of an edge.
"""
import argparse
import os
import re
import shutil
import sys
import tempfile

SOURCE_SUFFIXES = (".h", ".cc", ".cu", ".cuh")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)

# Folder -> the project folders its files may include (its own folder is always allowed).
# Folders not listed here (tests/, bench/, tools/) are leaves: they may include anything.
ALLOWED = {
    "common": set(),
    "kernels": set(),
    "handoff": {"common"},
    "model": {"common", "kernels", "handoff"},
    "tokenizer": {"common"},
    "structured": {"common", "tokenizer"},
    "transfer": {"common", "handoff"},
    "kv_store": {"common", "handoff"},
    "proto": {"common", "yoco"},
    "server": {"common", "proto", "yoco"},
    "router": {"common", "proto", "yoco", "server", "tokenizer", "handoff", "structured"},
    "decode_service": {"common", "model", "handoff", "transfer", "proto", "yoco", "server", "structured", "tokenizer"},
    "prefill_service": {"common", "model", "handoff", "transfer", "kv_store", "proto", "yoco", "server"},
}
# Headers that are not allowed even where their folder is: CLI parsing stays out of the engine.
FORBIDDEN_FILES = {
    "model": {"common/flags.h"},
    "kernels": {"common/flags.h"},
}
# Static libraries the router's executable must never link (it learns the model from the decode
# workers' Describe RPC, never from an engine of its own).
ROUTER_FORBIDDEN_LIBS = ("libyoco_model.a", "libyoco_engine.a", "libyoco_kernels_cpu.a", "libyoco_kernels_cuda.a",
                         "libyoco_engine_cuda.a")


def source_files(root):
    for folder in sorted(ALLOWED):
        base = os.path.join(root, folder)
        for dirpath, dirnames, filenames in os.walk(base):
            dirnames[:] = [d for d in dirnames if not d.startswith(".")]
            for name in sorted(filenames):
                if name.endswith(SOURCE_SUFFIXES):
                    yield folder, os.path.join(dirpath, name)


def include_violations(root):
    found = []
    for folder, path in source_files(root):
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read()
        for m in INCLUDE.finditer(text):
            inc = m.group(1)
            if "/" not in inc:
                continue  # a sibling include ("ops.h") stays inside the folder
            target = inc.split("/", 1)[0]
            rel = os.path.relpath(path, root)
            line = text.count("\n", 0, m.start()) + 1
            if inc in FORBIDDEN_FILES.get(folder, ()):
                found.append(f"{rel}:{line}: {folder}/ must not include {inc}")
            elif target != folder and target not in ALLOWED[folder] and os.path.isdir(os.path.join(root, target)):
                found.append(f"{rel}:{line}: {folder}/ must not include {inc} "
                             f"(allowed: {', '.join(sorted(ALLOWED[folder] | {folder}))})")
            elif target != folder and target == "yoco" and "yoco" not in ALLOWED[folder]:
                found.append(f"{rel}:{line}: {folder}/ must not include generated proto header {inc}")
    return found


def router_link_violations(build_dir):
    """Reads the router's link line from build.ninja (Ninja generator)."""
    ninja = os.path.join(build_dir, "build.ninja")
    if not os.path.exists(ninja):
        return []
    with open(ninja, encoding="utf-8", errors="replace") as f:
        text = f.read()
    m = re.search(r"^build router/yoco-router: .*?(?=^build |\Z)", text, re.M | re.S)
    if not m:
        return []
    block = m.group(0)
    return [f"router/yoco-router links {lib}" for lib in ROUTER_FORBIDDEN_LIBS if lib in block]


def check(root, build_dir):
    return include_violations(root) + (router_link_violations(build_dir) if build_dir else [])


# One planted violation per rule: (file to append to, line). Each must be reported.
PLANTS = [
    ("kernels/cpu/ops.h", '#include "common/status.h"'),
    ("model/config.h", '#include "transfer/transport.h"'),
    ("model/config.h", '#include "common/flags.h"'),
    ("transfer/transport.h", '#include "model/state.h"'),
    ("kv_store/store.h", '#include "model/config.h"'),
    ("router/policy.h", '#include "model/config.h"'),
    ("prefill_service/scheduler.h", '#include "decode_service/batcher.h"'),
    ("decode_service/batcher.h", '#include "prefill_service/scheduler.h"'),
    ("decode_service/worker_service.cc", '#include "kernels/cpu/ops.h"'),
    ("router/core.cc", '#include "kernels/cpu/ops.h"'),
    ("common/log.h", '#include "model/config.h"'),
]


def self_test(root):
    failures = 0
    base = check(root, None)
    if base:
        print("self-test: the tree itself has violations; fix those first:\n  " + "\n  ".join(base))
        return 1
    for rel, line in PLANTS:
        if not os.path.exists(os.path.join(root, rel)):
            print(f"self-test: {rel} does not exist; update PLANTS")
            failures += 1
            continue
        with tempfile.TemporaryDirectory() as tmp:
            for folder in ALLOWED:
                src = os.path.join(root, folder)
                if os.path.isdir(src):
                    shutil.copytree(src, os.path.join(tmp, folder), ignore=shutil.ignore_patterns(".*"))
            with open(os.path.join(tmp, rel), "a", encoding="utf-8") as f:
                f.write("\n" + line + "\n")
            got = check(tmp, None)
            if any(rel in v and line.split('"')[1] in v for v in got):
                print(f"self-test: planted `{line}` in {rel}: caught")
            else:
                print(f"self-test: planted `{line}` in {rel}: NOT caught")
                failures += 1
    print(f"self-test: {len(PLANTS) - failures} of {len(PLANTS)} planted violations caught")
    return 1 if failures else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--root", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    ap.add_argument("--build-dir", help="a Ninja build dir: also check the router's link line")
    ap.add_argument("--self-test", action="store_true")
    a = ap.parse_args()
    root = os.path.abspath(a.root)
    if a.self_test:
        return self_test(root)
    violations = check(root, a.build_dir)
    for v in violations:
        print(v)
    print(f"check_layers: {len(violations)} violation(s)")
    return 1 if violations else 0


if __name__ == "__main__":
    sys.exit(main())
