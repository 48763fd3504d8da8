#!/usr/bin/env bash
# The project's images, built from Dockerfile.runtime and Dockerfile.operator with no
# container registry: a Debian base from Debian packages (mmdebstrap), buildah to build
# (docker instead, from the Dockerfiles' registry bases, where `docker info` works).
#
#   hack/images.sh build runtime|operator|all   build, or reuse what the inputs already built
#   hack/images.sh ref NAME                     the image reference, without building
#   hack/images.sh archive NAME                 path of an OCI archive (ctr -n k8s.io images import)
#   hack/images.sh check runtime|operator|all   run hack/images/check-NAME.sh inside the image
#   hack/images.sh clean                        drop every image, layer, base and archive
#
# A reference names the content hash of every input (the Dockerfile, the build context
# as .dockerignore admits it, build arguments, the base's recipe): localhost/ttsfleet/NAME:<hash12>.
# Everything lives under ${TTSFLEET_CACHE:-$HOME/.cache/ttsfleet}/images; each build keeps
# only the current image of its name (and the layers it is built from) so the disk does
# not fill. Log lines go to stderr: `ref` and `archive` print only their answer.
# TTSFLEET_IMAGE_BUILDER=buildah|docker overrides the choice; TTSFLEET_IMAGE_STORAGE=overlay|vfs
# picks buildah's storage driver (overlay: see README.md, "Images").
set -euo pipefail
# shellcheck source=hack/apt.sh
source "$(dirname "${BASH_SOURCE[0]}")/apt.sh"

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cache=${TTSFLEET_CACHE:-$HOME/.cache/ttsfleet}/images
storage_driver=${TTSFLEET_IMAGE_STORAGE:-overlay}
store=$cache/storage-$storage_driver
inputs=(python3 "$root/hack/images/inputs.py")
IMAGES=(runtime operator)

# The stand-in for python:3.12-slim-bookworm where no registry is: Debian's own Python
# (3.11 on bookworm) with venv and the headers Triton compiles its launchers against.
BASE_SUITE=bookworm
BASE_PACKAGES=python3,python3-venv,libpython3-dev,passwd,ca-certificates
BASE_MIRRORS=(
  "deb http://deb.debian.org/debian bookworm main"
  "deb http://deb.debian.org/debian bookworm-updates main"
  "deb http://deb.debian.org/debian-security bookworm-security main"
)
# Kept out of the base and of every package a Dockerfile installs on it.
BASE_DPKG_EXCLUDES=('/usr/share/doc/*' '/usr/share/man/*' '/usr/share/info/*' '/usr/share/locale/*' '/usr/lib/python3*/config-*/*.a')
# /usr merged by a hook, not by the usrmerge package (which pulls in perl: 55 MB).
BASE_HOOKS=/usr/share/mmdebstrap/hooks/merged-usr
BASE_RECIPE="mmdebstrap minbase ${BASE_HOOKS##*/} $BASE_SUITE $BASE_PACKAGES ${BASE_MIRRORS[*]} ${BASE_DPKG_EXCLUDES[*]} recommends=no"

log() { echo "==> [images] $*" >&2; }
fail() { echo "error: [images] $*" >&2; exit 1; }
sha12() { sha256sum | cut -c1-12; }

choose_builder() {
  if [[ -n ${TTSFLEET_IMAGE_BUILDER:-} ]]; then
    echo "$TTSFLEET_IMAGE_BUILDER"
  elif command -v docker >/dev/null && docker info >/dev/null 2>&1; then
    echo docker
  else
    echo buildah
  fi
}
builder=$(choose_builder)

bah() { buildah --root "$store" --runroot "$cache/run-$storage_driver" --storage-driver "$storage_driver" "$@"; }

ensure_tools() {
  local missing=()
  command -v buildah >/dev/null || missing+=(buildah)
  command -v mmdebstrap >/dev/null || missing+=(mmdebstrap)
  ((${#missing[@]} == 0)) && return
  apt_install images "${missing[@]}" || exit 1
}

base_ref() { echo "localhost/ttsfleet/base-python:$(printf '%s' "$BASE_RECIPE" | sha12)"; }

# Build arguments, as the build gets them and as the hash sees them.
build_args() {
  if [[ $builder == buildah ]]; then
    echo "PYTHON_IMAGE=$(base_ref)"
  fi
}

image_ref() {
  local name=$1 args hash
  [[ -f $root/Dockerfile.$name ]] || fail "no image named '$name' (runtime, operator)"
  mapfile -t args < <(build_args)
  hash=$("${inputs[@]}" hash "$root" "$root/Dockerfile.$name" "name=$name" "${args[@]/#/build-arg }" \
    "base=$( [[ $builder == buildah ]] && echo "$BASE_RECIPE" || echo "the Dockerfile's default")")
  echo "localhost/ttsfleet/$name:${hash:0:12}"
}

image_exists() {
  if [[ $builder == docker ]]; then
    docker image inspect "$1" >/dev/null 2>&1
  else
    [[ -d $store ]] && bah inspect --type image "$1" >/dev/null 2>&1
  fi
}

# Runs a long command with its output in a log file and one progress line every 30 s.
with_progress() {
  local what=$1 logfile=$2
  shift 2
  mkdir -p "$(dirname "$logfile")"
  local start=$SECONDS
  "$@" >"$logfile" 2>&1 &
  local pid=$! last=$SECONDS
  while kill -0 "$pid" 2>/dev/null; do
    sleep 2
    if ((SECONDS - last >= 30)); then
      last=$SECONDS
      # A build's last step, or any tool's last line.
      local at
      at=$(grep -E '(STEP|Step) [0-9]+/[0-9]+|^#[0-9]+ ' "$logfile" | tail -n 1 || true)
      [[ -n $at ]] || at=$(tail -n 1 "$logfile")
      log "$what: $((SECONDS - start)) s, at: ${at:0:100}"
    fi
  done
  if ! wait "$pid"; then
    tail -n 40 "$logfile" >&2
    fail "$what failed after $((SECONDS - start)) s (log: $logfile)"
  fi
  log "$what: done in $((SECONDS - start)) s"
}

ensure_base() {
  local ref tarball
  ref=$(base_ref)
  image_exists "$ref" && return
  ensure_tools
  tarball=$cache/base/base-python-${ref##*:}.tar
  mkdir -p "$cache/base"
  if [[ ! -f $tarball ]]; then
    local hooks=() pattern
    for pattern in "${BASE_DPKG_EXCLUDES[@]}"; do hooks+=(--dpkgopt="path-exclude=$pattern"); done
    with_progress "base rootfs ($BASE_SUITE, mmdebstrap)" "$cache/logs/base.log" \
      nice -n 10 mmdebstrap --variant=minbase --include="$BASE_PACKAGES" --hook-dir="$BASE_HOOKS" \
      --aptopt='APT::Install-Recommends "false"' "${hooks[@]}" \
      --customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/* "$1"/var/log/*' \
      "$BASE_SUITE" "${tarball%.tar}.partial.tar" "${BASE_MIRRORS[@]}"
    mv "${tarball%.tar}.partial.tar" "$tarball"
  fi
  log "importing the base as $ref"
  local ctr
  ctr=$(bah from --pull=never scratch)
  bah add "$ctr" "$tarball" / >/dev/null
  bah config --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    --env LANG=C.UTF-8 --cmd python3 "$ctr"
  bah commit --quiet --rm "$ctr" "$ref" >/dev/null
  # A new recipe makes every older base dead weight.
  local old
  while read -r old; do
    [[ -n $old && $old != "$ref" ]] && bah rmi "$old" >/dev/null 2>&1 || true
  done < <(bah images --format '{{.Name}}:{{.Tag}}' --filter reference=localhost/ttsfleet/base-python 2>/dev/null)
  find "$cache/base" -name 'base-python-*' ! -name "${tarball##*/}" -delete
}

# pip in a build reaches PyPI through this machine's TLS proxy where there is one: the
# host's CA bundle is mounted beside the image's own (not over it: that would break
# `apt-get install ca-certificates`) and pip.conf points there. Mounts only: nothing of
# the host is committed into a layer.
build_mounts() {
  local bundle=/etc/ssl/certs/ca-certificates.crt
  [[ -f $bundle ]] || return 0
  mkdir -p "$cache/build"
  printf '[global]\ncert = /run/ttsfleet-build/host-ca.crt\n' >"$cache/build/pip.conf"
  echo "--volume=$bundle:/run/ttsfleet-build/host-ca.crt:ro"
  echo "--volume=$cache/build/pip.conf:/etc/pip.conf:ro"
}

build_one() {
  local name=$1 ref start
  ref=$(image_ref "$name")
    if image_exists "$ref"; then
    log "$name: $ref is built (inputs unchanged)"
    return
  fi
  start=$SECONDS
  local args=() arg
  while read -r arg; do [[ -n $arg ]] && args+=(--build-arg "$arg"); done < <(build_args)
  if [[ $builder == docker ]]; then
    log "$name: building $ref with docker"
    with_progress "$name (docker build)" "$cache/logs/$name.log" \
      nice -n 10 docker build -f "$root/Dockerfile.$name" "${args[@]}" -t "$ref" "$root"
  else
    ensure_tools
    ensure_base
    local mounts
    mapfile -t mounts < <(build_mounts)
    log "$name: building $ref with buildah ($storage_driver storage)"
    mkdir -p "$cache/tmp"
    with_progress "$name (buildah bud)" "$cache/logs/$name.log" \
      env TMPDIR="$cache/tmp" nice -n 10 buildah --root "$store" --runroot "$cache/run-$storage_driver" \
      --storage-driver "$storage_driver" bud --isolation chroot --layers --pull=never \
      -f "$root/Dockerfile.$name" "${args[@]}" "${mounts[@]}" -t "$ref" "$root"
  fi
  log "$name: $ref built in $((SECONDS - start)) s, $(image_size "$ref")"
  prune "$name" "$ref"
}

image_size() {
  if [[ $builder == docker ]]; then
    docker image inspect --format '{{.Size}} bytes' "$1"
  else
    bah images --format '{{.Size}}' "$1" 2>/dev/null | head -n 1
  fi
}

# Keeps the current image of NAME only: its older tags, their archives and the layer
# cache no named image is built on any more.
prune() {
  local name=$1 ref=$2 old
  if [[ $builder == docker ]]; then
    while read -r old; do
      [[ -n $old && $old != "$ref" ]] && docker image rm "$old" >/dev/null || true
    done < <(docker images --format '{{.Repository}}:{{.Tag}}' "localhost/ttsfleet/$name")
  else
    while read -r old; do
      if [[ -n $old && $old != "$ref" ]]; then
        log "pruning $old"
        bah rmi "$old" >/dev/null 2>&1 || true
      fi
    done < <(bah images --format '{{.Name}}:{{.Tag}}' --filter "reference=localhost/ttsfleet/$name" 2>/dev/null)
    local stale
    mapfile -t stale < <("${inputs[@]}" stale "$store" "$storage_driver")
    if ((${#stale[@]})) && [[ -n ${stale[0]} ]]; then
      log "pruning ${#stale[@]} cache images no current image is built on"
      bah rmi "${stale[@]}" >/dev/null 2>&1 || true
    fi
  fi
  find "$cache/archives" -name "$name-*.tar" ! -name "$name-${ref##*:}.tar" -delete 2>/dev/null || true
}

archive_one() {
  local name=$1 ref path start
  build_one "$name"
  ref=$(image_ref "$name")
  path=$cache/archives/$name-${ref##*:}.tar
  if [[ ! -f $path ]]; then
    mkdir -p "$cache/archives"
    start=$SECONDS
    # buildah gzips every layer into the archive (--disable-compression does not take in
    # 1.28): 160 s for the runtime's 2.9 GB. The digests stay those of the unchanged
    # layers, so containerd unpacks only the layers a code change made.
    if [[ $builder == docker ]]; then
      with_progress "$name archive (docker save)" "$cache/logs/$name-archive.log" \
        docker save -o "$path.partial" "$ref"
    else
      with_progress "$name archive (oci-archive)" "$cache/logs/$name-archive.log" \
        env TMPDIR="$cache/tmp" nice -n 10 buildah --root "$store" --runroot "$cache/run-$storage_driver" \
        --storage-driver "$storage_driver" push --quiet --format oci \
        "$ref" "oci-archive:$path.partial:$ref"
    fi
    mv "$path.partial" "$path"
    log "$name: archive written in $((SECONDS - start)) s ($(du -h "$path" | cut -f1))"
  fi
  echo "$path"
}

# Runs hack/images/check-NAME.sh inside the built image, as the image's user.
check_one() {
  local name=$1 ref script=/run/ttsfleet-check/check.sh
  build_one "$name"
  ref=$(image_ref "$name")
  log "$name: checking $ref (hack/images/check-$name.sh inside it)"
  local start=$SECONDS status=0
  if [[ $builder == docker ]]; then
    docker run --rm --network host --entrypoint /bin/sh \
      -v "$root/hack/images/check-$name.sh:$script:ro" "$ref" "$script" >&2 || status=$?
  else
    local ctr
    ctr=$(bah from --pull=never "$ref")
    bah run --isolation chroot -v "$root/hack/images/check-$name.sh:$script:ro" "$ctr" -- /bin/sh "$script" >&2 \
      || status=$?
    bah rm "$ctr" >/dev/null
  fi
  ((status == 0)) || fail "$name: the check inside $ref failed"
  log "$name: checked in $((SECONDS - start)) s"
}

clean() {
  if [[ $builder == docker ]]; then
    docker images --format '{{.Repository}}:{{.Tag}}' | grep '^localhost/ttsfleet/' | xargs -r docker image rm >/dev/null || true
  fi
  if [[ -d $cache ]]; then
    local driver
    for driver in overlay vfs; do
      if [[ -d $cache/storage-$driver ]] && command -v buildah >/dev/null; then
        buildah --root "$cache/storage-$driver" --runroot "$cache/run-$driver" --storage-driver "$driver" \
          rm --all >/dev/null 2>&1 || true
        buildah --root "$cache/storage-$driver" --runroot "$cache/run-$driver" --storage-driver "$driver" \
          rmi --all --force >/dev/null 2>&1 || true
      fi
    done
    # A mount left by an interrupted build would keep rm from the layers below it.
    grep -o " $cache/[^ ]*" /proc/mounts | sort -r | xargs -r umount -l 2>/dev/null || true
    rm -rf "$cache"
  fi
  log "removed $cache"
}

names() {
  case ${1:-} in
    all) echo "${IMAGES[@]}" ;;
    runtime | operator) echo "$1" ;;
    *) fail "image name expected: runtime, operator (or all for build)" ;;
  esac
}

case ${1:-} in
  build)
    for name in $(names "${2:-}"); do build_one "$name"; done
    ;;
  ref)
    [[ ${2:-} == all ]] && fail "ref takes one image name"
    image_ref "$(names "${2:-}")"
    ;;
  archive)
    [[ ${2:-} == all ]] && fail "archive takes one image name"
    archive_one "$(names "${2:-}")"
    ;;
  check)
    for name in $(names "${2:-}"); do check_one "$name"; done
    ;;
  clean) clean ;;
  *)
    sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2
    ;;
esac
