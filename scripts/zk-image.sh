#!/usr/bin/env bash
# The Docker engine and the local ZooKeeper image the tests start with testcontainers.
# Idempotent: reuses a running engine and an existing image. No registry is reachable here,
# so the image is built with debootstrap + docker import (no image can be pulled on a machine without registry access).
# Each failure names its step on the last line of stderr (the test fixtures show that line).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
IMAGE=${GROUPSHIFT_ZK_IMAGE:-groupshift-zk:bookworm-1}
CACHE_DIR=${GROUPSHIFT_CACHE:-$HOME/.cache/groupshift}
STATE_DIR=$ROOT/.groupshift
mkdir -p "$STATE_DIR" "$CACHE_DIR"
step() { printf '[zk-image] %s\n' "$*" >&2; }
fail() { printf '[zk-image] FAILED: %s\n' "$*" >&2; exit 1; }

# 1) Docker engine: reuse a running one, else start dockerd and wait for its socket.
command -v docker >/dev/null 2>&1 || fail "the docker client is missing: apt-get install docker.io (or run scripts/setup.sh)"
if ! docker info >/dev/null 2>&1; then
  command -v dockerd >/dev/null 2>&1 || fail "start the Docker engine: dockerd is not installed (apt-get install docker.io, or run scripts/setup.sh)"
  step "starting the Docker engine"
  nohup dockerd >"$STATE_DIR/dockerd.log" 2>&1 &
  for _ in $(seq 1 120); do docker info >/dev/null 2>&1 && break; sleep 0.5; done
  docker info >/dev/null 2>&1 || { tail -20 "$STATE_DIR/dockerd.log" >&2; fail "start the Docker engine (log: $STATE_DIR/dockerd.log)"; }
fi

# 2) The local ZooKeeper image (nothing can be pulled here): reuse, load from cache, or build.
if ! docker image inspect "$IMAGE" >/dev/null 2>&1; then
  tarball="$CACHE_DIR/${IMAGE//[:\/]/_}.tar.gz"
  if [ -f "$tarball" ] && docker load -i "$tarball" >/dev/null 2>&1; then
    step "loaded $IMAGE from $tarball"
  else
    command -v debootstrap >/dev/null 2>&1 || fail "build the ZooKeeper image: debootstrap is missing (apt-get install debootstrap, or run scripts/setup.sh)"
    step "building $IMAGE with debootstrap (about 1-2 minutes)"
    rootfs=$(mktemp -d /var/tmp/groupshift-rootfs.XXXXXX)
    trap 'rm -rf "$rootfs"' EXIT
    debootstrap --variant=minbase --include=openjdk-17-jre-headless,zookeeper,iptables,iproute2 \
      bookworm "$rootfs" http://deb.debian.org/debian >"$STATE_DIR/debootstrap.log" 2>&1 \
      || { tail -20 "$STATE_DIR/debootstrap.log" >&2; fail "debootstrap of the ZooKeeper image (log: $STATE_DIR/debootstrap.log)"; }
    tar -C "$rootfs" --exclude='./var/cache/apt/archives/*.deb' --exclude='./var/lib/apt/lists/*' \
        --exclude=./usr/share/doc --exclude=./usr/share/man --exclude=./usr/share/locale -c . |
      docker import -c 'ENV JAVA_HOME=/usr/lib/jvm/java-17-openjdk-amd64' - "$IMAGE" >/dev/null \
      || fail "docker import of the ZooKeeper image"
    rm -rf "$rootfs"; trap - EXIT
    docker save "$IMAGE" | gzip -1 >"$tarball.tmp" && mv "$tarball.tmp" "$tarball" || rm -f "$tarball.tmp"
  fi
fi
