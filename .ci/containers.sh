#!/usr/bin/env bash
# Containers on a CI machine like this one, and the image build (`make image`,
# `make compose-test` call it). Everything specific to this kind of machine is here, not
# in the Containerfiles:
#   - podman, runc and mmdebstrap from Debian; containers run with runc, cgroupfs and no
#     default ulimits (/etc/containers/containers.conf);
#   - no image registry: the Debian bookworm base image (python3, its venv module) is made
#     with mmdebstrap and `podman import`ed, its tarball cached in $CACHE_DIR;
#   - pip inside a build cannot verify the package index's certificate: the runtime
#     wheels are built here (the host's pip, pinned to the versions in .venv, which the
#     tests ran with) into build/wheels, and the image installs them with --no-index.
# Each step is skipped when its result is there already (re-runnable; a warm machine
# only rebuilds what changed).
#
#   bash .ci/containers.sh prepare   podman + containers.conf + the local base image
#   bash .ci/containers.sh wheels    build/wheels for pyproject.toml's runtime dependencies
#   bash .ci/containers.sh image     both, then the service's image ($IMAGE)
#   bash .ci/containers.sh services  the compose stack's PostgreSQL, Redis and proxy images
#
# With a registry: BASE_IMAGE=docker.io/library/python:3.11-slim-bookworm make image
# (no local base is made then).
set -euo pipefail
cd "$(dirname "$0")/.."

LOCAL_BASE=localhost/lifecycle-base:bookworm
BASE_IMAGE=${BASE_IMAGE:-$LOCAL_BASE}
IMAGE=${IMAGE:-localhost/lifecycle:latest}
PY=${PY:-.venv/bin/python}
CACHE_DIR=${CACHE_DIR:-/var/cache/lifecycle-ci}
NICE=(nice -n 10)

say() { printf '%s containers.sh: %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }

ensure_podman() {
  local missing=()
  for tool in podman runc mmdebstrap; do command -v "$tool" >/dev/null || missing+=("$tool"); done
  if ((${#missing[@]})); then
    say "installing ${missing[*]} (Debian)"
    apt-get update -q
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q podman runc mmdebstrap
  fi
  local conf=/etc/containers/containers.conf
  if ! grep -qs '^runtime = "runc"' "$conf"; then
    say "writing $conf (runc, cgroupfs, no default ulimits)"
    mkdir -p /etc/containers
    cat >"$conf" <<'CONF'
# .ci/containers.sh: containers on this kind of machine (no systemd, cgroup v1).
[containers]
default_ulimits = []

[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
CONF
  fi
}

ensure_base() {
  [[ $BASE_IMAGE == "$LOCAL_BASE" ]] || return 0 # a registry image: podman pulls it
  if podman image exists "$LOCAL_BASE"; then return 0; fi
  local tarball=$CACHE_DIR/bookworm-python3.tar
  if [[ ! -s $tarball ]]; then
    say "making the base image with mmdebstrap (Debian bookworm, python3, python3-venv)"
    mkdir -p "$CACHE_DIR"
    rm -rf "$tarball" "$tarball.tmp"
    "${NICE[@]}" mmdebstrap --format=tar --variant=minbase --include=python3,python3-venv,ca-certificates \
      --aptopt='Acquire::Check-Valid-Until "false"' \
      --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-exclude=/usr/share/man/*' \
      --dpkgopt='path-exclude=/usr/share/locale/*' \
      --dpkgopt='path-include=/usr/share/locale/locale.alias' \
      --customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*' \
      bookworm "$tarball.tmp" http://deb.debian.org/debian
    mv "$tarball.tmp" "$tarball"
  fi
  say "importing $tarball as $LOCAL_BASE"
  podman import --change 'ENV LANG=C.UTF-8' "$tarball" "$LOCAL_BASE" >/dev/null
}

wheels() {
  local dir=build/wheels
  mkdir -p "$dir"
  # The runtime dependencies as pyproject.toml declares them, at the versions .venv has.
  "$PY" -c 'import tomllib; print("\n".join(tomllib.load(open("pyproject.toml", "rb"))["project"]["dependencies"]))' >"$dir/requirements.txt"
  "$PY" -m pip freeze --exclude-editable --all | grep -v '^-e ' >"$dir/constraints.txt"
  # Warm: everything is in the folder already, no index needed.
  if ! "$PY" -m pip wheel -q --no-index --find-links "$dir" -w "$dir" \
    -r "$dir/requirements.txt" -c "$dir/constraints.txt" >/dev/null 2>&1; then
    say "building wheels into $dir"
    "${NICE[@]}" "$PY" -m pip wheel -q --find-links "$dir" -w "$dir" \
      -r "$dir/requirements.txt" -c "$dir/constraints.txt"
  fi
  # What the image's Python (another patch release, maybe) needs beyond the host's set.
  local version extra
  version=$(podman run --rm --entrypoint python3 "$BASE_IMAGE" -c 'import platform; print(platform.python_version())')
  extra=$("$PY" .ci/marker_extras.py "$dir" "$version")
  if [[ -n $extra ]]; then
    # shellcheck disable=SC2086 # one requirement a line, none with spaces
    "$PY" -m pip wheel -q --no-index --find-links "$dir" -w "$dir" $extra >/dev/null 2>&1 ||
      "${NICE[@]}" "$PY" -m pip wheel -q --find-links "$dir" -w "$dir" $extra
  fi
}

build() { # tag containerfile: podman build in docker format (OCI drops HEALTHCHECK)
  "${NICE[@]}" podman build --format docker --layers --build-arg "BASE_IMAGE=$BASE_IMAGE" \
    -t "$1" -f "$2" .
}

image() {
  ensure_podman
  ensure_base
  wheels
  say "building $IMAGE from $BASE_IMAGE"
  build "$IMAGE" Containerfile
  # Older builds' layers (a day old); the latest build's stay, the next build's cache.
  podman image prune -f --filter until=24h >/dev/null
  podman image inspect "$IMAGE" --format '{{.Size}}' |
    awk -v i="$IMAGE" '{ printf "%s: %.0f MB\n", i, $1 / 1e6 }'
}

services() {
  ensure_podman
  ensure_base
  build localhost/lifecycle-postgres:15 deploy/containers/postgres.Containerfile
  build localhost/lifecycle-redis:7 deploy/containers/redis.Containerfile
  build localhost/lifecycle-proxy:latest deploy/containers/proxy.Containerfile
}

case ${1:-} in
  prepare) ensure_podman && ensure_base ;;
  wheels) wheels ;;
  image) image ;;
  services) services ;;
  *)
    echo "usage: $0 prepare|wheels|image|services" >&2
    exit 2
    ;;
esac
