#!/usr/bin/env bash
# Runs a command inside a container image's filesystem without a container runtime: for machines
# where `podman run` cannot start a container (e.g. crun: setrlimit RLIMIT_NPROC not permitted).
#
#   in_image.sh ROOT STATE [NAME=VALUE...] -- COMMAND [ARG...]
#
# ROOT is the image's root filesystem (`podman image mount IMAGE`), STATE a host directory that
# appears as /tmp inside it. In a private mount namespace of its own (unshare), so that every mount
# goes away with the process, whatever way it ends: binds /proc, /sys, /dev (UCX enumerates devices
# there) and STATE into ROOT, then execs COMMAND in a chroot as uid/gid 10001 (the image's USER),
# with only the NAME=VALUE environment (the image's ENV) plus the caller's UCX_* and OMP_* variables,
# as `podman run -e` would pass them. The process keeps its pid through every exec, so a signal sent
# to this script reaches COMMAND. Needs root (mount, chroot).
set -euo pipefail
if [[ "${YOCO_IN_IMAGE_NS:-}" != "$$" ]]; then
  # unshare execs (no fork): the same pid, now in a new mount namespace with private propagation.
  export YOCO_IN_IMAGE_NS=$$
  exec unshare --mount --propagation private "$0" "$@"
fi
root=$1
state=$2
shift 2
env_args=()
while (($# > 0)) && [[ "$1" != "--" ]]; do
  env_args+=("$1")
  shift
done
(($# > 1)) || { echo "usage: in_image.sh ROOT STATE [NAME=VALUE...] -- COMMAND [ARG...]" >&2; exit 2; }
shift
for v in $(compgen -e); do
  [[ "$v" == UCX_* || "$v" == OMP_* ]] && env_args+=("$v=${!v}")
done
for d in proc sys dev; do
  mount --rbind "/$d" "$root/$d"
done
mount --bind "$state" "$root/tmp"
exec chroot --userspec=10001:10001 "$root" /usr/bin/env -i "${env_args[@]}" "$@"
