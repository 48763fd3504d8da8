#!/usr/bin/env bash
# Build the local e2e control plane (kube-apiserver, kube-controller-manager,
# kube-scheduler, kubectl, etcd, kwok, kwokctl) and the real node's kubelet and kube-proxy
# from their published Go modules into a cache outside the repository. See --help.
set -euo pipefail

HACK_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=hack/versions.env
source "${HACK_DIR}/versions.env"
# shellcheck source=hack/kube-release.sh
source "${HACK_DIR}/kube-release.sh"
MODULES_DIR="${HACK_DIR}/control-plane"

usage() {
  cat <<EOF
Usage: hack/build-control-plane.sh [--force] [--update-modules] [--print-bin-dir] [--help]

Builds, once, the binaries of the local e2e control plane from Go modules pinned in
hack/versions.env (Kubernetes ${KUBE_VERSION}, etcd ${ETCD_VERSION}, kwok ${KWOK_VERSION}):

  kube-apiserver kube-controller-manager kube-scheduler kubectl   (k8s.io/kubernetes)
  kubelet kube-proxy            (k8s.io/kubernetes, the real node; skipped when TTSFLEET_REAL_NODE=0)
  etcd                                                            (go.etcd.io/etcd/server/v3)
  kwok kwokctl                                                    (sigs.k8s.io/kwok)

into \${TTSFLEET_CACHE:-\$HOME/.cache/ttsfleet}/k8s/<kube-version>/bin/. Binaries whose
stamp matches the current recipe are skipped, so a second run takes seconds. The Go
module and build caches live under \${TTSFLEET_CACHE}/go/ so rebuilds are incremental.
The recipe is the consumer modules in hack/control-plane/*/go.mod (+ go.sum).

Options:
  --force           rebuild every binary even if its stamp is current
  --update-modules  regenerate hack/control-plane/*/go.mod and go.sum from
                    hack/versions.env (needs the Go module proxy), then build
  --print-bin-dir   print the bin directory and exit (nothing is built)
  -h, --help        this text

Environment:
  TTSFLEET_CACHE    cache root (default \$HOME/.cache/ttsfleet)
  BUILD_JOBS        parallel compile jobs (default 2); builds run under nice -n 10
  TTSFLEET_REAL_NODE  0 = skip kubelet and kube-proxy (default 1)
  TTSFLEET_KUBE_RELEASE  newest (default, ${KUBE_VERSION}) | oldest (the oldest supported
                    minor, KUBE_OLDEST_VERSION in hack/versions.env; control plane only,
                    no real node)
EOF
}

FORCE=0
UPDATE=0
PRINT_BIN=0
for arg in "$@"; do
  case "${arg}" in
    --force) FORCE=1 ;;
    --update-modules) UPDATE=1 ;;
    --print-bin-dir) PRINT_BIN=1 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "build-control-plane: unknown argument: ${arg} (see --help)" >&2; exit 2 ;;
  esac
done

CACHE="${TTSFLEET_CACHE:-${HOME}/.cache/ttsfleet}"
BIN_DIR="${CACHE}/k8s/${KUBE_VERSION}/bin"
if [[ "${PRINT_BIN}" == 1 ]]; then
  echo "${BIN_DIR}"
  exit 0
fi

START_ALL=$(date +%s)
log() { printf '[build-control-plane %4ss] %s\n' "$(( $(date +%s) - START_ALL ))" "$*" >&2; }
die() { printf '[build-control-plane] ERROR: %s\n' "$*" >&2; exit 1; }

command -v go >/dev/null 2>&1 || die "step 'check toolchain': go not found in PATH (need Go >= ${GO_VERSION_MIN})"
GO_VER="$(go env GOVERSION)"
go_minor="$(sed -E 's/^go1\.([0-9]+).*/\1/' <<<"${GO_VER}")"
want_minor="${GO_VERSION_MIN#1.}"
if [[ ! "${go_minor}" =~ ^[0-9]+$ ]] || (( go_minor < want_minor )); then
  die "step 'check toolchain': ${GO_VER} is too old; Kubernetes ${KUBE_VERSION} needs Go >= ${GO_VERSION_MIN}"
fi

mkdir -p "${BIN_DIR}" "${CACHE}/go/mod" "${CACHE}/go/build"
export GOMODCACHE="${CACHE}/go/mod"
export GOCACHE="${CACHE}/go/build"
export GOTOOLCHAIN=local
export CGO_ENABLED=0
export GOFLAGS="-p=${BUILD_JOBS:-2} -buildvcs=false -trimpath -mod=readonly"
# The Go module proxy is the only network source; never fall back to VCS hosts.
export GOPROXY="${GOPROXY:-https://proxy.golang.org}"
GOPROXY="${GOPROXY%%,direct}"
export GOPROXY

# One build at a time per cache (parallel CI jobs on one machine share it).
exec 9>"${CACHE}/k8s/.build.lock"
if ! flock -n 9; then
  log "another build holds ${CACHE}/k8s/.build.lock; waiting"
  flock 9
fi

# ---------------------------------------------------------------------------
# Consumer modules (the committed recipe)
# ---------------------------------------------------------------------------
# The Kubernetes binaries come from two consumer modules of the same k8s.io/kubernetes
# release: the control plane's, and the real node's (kubelet, kube-proxy), which pulls in
# the container and cgroup libraries. Apart, so adding or bumping the node's binaries does
# not change the control plane's recipe and rebuild it.
KUBE_CONTROL_PLANE_CMDS=(kube-apiserver kube-controller-manager kube-scheduler kubectl)
KUBE_NODE_CMDS=(kubelet kube-proxy)

write_kubernetes_mod() { # dir purpose cmd...
  local dir="${MODULES_DIR}/$1" purpose="$2" kmod
  shift 2
  mkdir -p "${dir}"
  kmod="$(cd "${dir}" && GOFLAGS=-mod=mod go mod download -json "k8s.io/kubernetes@${KUBE_VERSION}" \
    | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",$/\1/p')"
  [[ -f "${kmod}" ]] || die "step 'update-modules': could not fetch k8s.io/kubernetes@${KUBE_VERSION} go.mod"
  {
    echo "// Consumer module: builds the Kubernetes ${purpose} binaries from the published"
    echo "// k8s.io/kubernetes module. Generated by hack/build-control-plane.sh --update-modules."
    echo "module ttsfleet.local/hack/control-plane/$(basename "${dir}")"
    echo
    echo "go 1.26.0"
    echo
    echo "tool ("
    local c
    for c in "$@"; do
      printf '\tk8s.io/kubernetes/cmd/%s\n' "${c}"
    done
    echo ")"
    echo
    echo "require k8s.io/kubernetes ${KUBE_VERSION}"
    echo
    echo "// k8s.io/kubernetes replaces its staging modules with ./staging paths, which only"
    echo "// exist in its own tree; use their released versions instead."
    echo "replace ("
    awk '/^\tk8s\.io\/[^ ]+ v0\.0\.0$/{print $1}' "${kmod}" | while read -r m; do
      printf '\t%s => %s %s\n' "${m}" "${m}" "${KUBE_STAGING_VERSION}"
    done
    echo ")"
  } >"${dir}/go.mod"
}

write_simple_mod() { # dir module version tool...
  local dir="${MODULES_DIR}/$1" mod="$2" ver="$3"; shift 3
  {
    echo "// Consumer module for ${mod}. Generated by hack/build-control-plane.sh --update-modules."
    echo "module ttsfleet.local/hack/control-plane/$(basename "${dir}")"
    echo
    echo "go 1.26.0"
    echo
    echo "tool ("
    local t
    for t in "$@"; do printf '\t%s\n' "${t}"; done
    echo ")"
    echo
    echo "require ${mod} ${ver}"
  } >"${dir}/go.mod"
}

update_modules() {
  log "update-modules: regenerating consumer modules from hack/versions.env (${TTSFLEET_KUBE_RELEASE:-newest} release)"
  local dirs=("${KUBE_MODULE_DIR}" kwok etcd)
  mkdir -p "${MODULES_DIR}"/{"${KUBE_MODULE_DIR}",kwok,etcd}
  write_kubernetes_mod "${KUBE_MODULE_DIR}" control-plane "${KUBE_CONTROL_PLANE_CMDS[@]}"
  if [[ "${KUBE_MODULE_DIR}" == kubernetes ]]; then
    # The real node runs only the newest release.
    mkdir -p "${MODULES_DIR}/kubernetes-node"
    write_kubernetes_mod kubernetes-node node "${KUBE_NODE_CMDS[@]}"
    dirs+=(kubernetes-node)
  fi
  write_simple_mod kwok sigs.k8s.io/kwok "${KWOK_VERSION}" sigs.k8s.io/kwok/cmd/kwok sigs.k8s.io/kwok/cmd/kwokctl
  write_simple_mod etcd go.etcd.io/etcd/server/v3 "${ETCD_VERSION}" go.etcd.io/etcd/server/v3
  local d
  for d in "${dirs[@]}"; do
    rm -f "${MODULES_DIR}/${d}/go.sum"
    (cd "${MODULES_DIR}/${d}" && GOFLAGS=-mod=mod nice -n 10 go mod tidy) \
      || die "step 'update-modules': go mod tidy failed in hack/control-plane/${d}"
  done
}

has_require() { # dir module version
  grep -Eq "(^require |^[[:space:]]+)$2 $3( // indirect)?\$" "${MODULES_DIR}/$1/go.mod"
}
check_modules() {
  local node_ok=1
  if [[ "${KUBE_MODULE_DIR}" == kubernetes ]]; then
    has_require kubernetes-node k8s.io/kubernetes "${KUBE_VERSION}" \
      && grep -q "k8s.io/api => k8s.io/api ${KUBE_STAGING_VERSION}\$" "${MODULES_DIR}/kubernetes-node/go.mod" \
      || node_ok=0
  fi
  if ! { has_require "${KUBE_MODULE_DIR}" k8s.io/kubernetes "${KUBE_VERSION}" \
      && grep -q "k8s.io/api => k8s.io/api ${KUBE_STAGING_VERSION}\$" "${MODULES_DIR}/${KUBE_MODULE_DIR}/go.mod" \
      && (( node_ok )) \
      && has_require kwok sigs.k8s.io/kwok "${KWOK_VERSION}" \
      && has_require etcd go.etcd.io/etcd/server/v3 "${ETCD_VERSION}"; }; then
    die "step 'check recipe': hack/control-plane/*/go.mod do not match hack/versions.env; run hack/build-control-plane.sh --update-modules"
  fi
}

[[ "${UPDATE}" == 1 ]] && update_modules
check_modules

# ---------------------------------------------------------------------------
# Build
# ---------------------------------------------------------------------------
# Bump when the flags below change, so stamped binaries get rebuilt.
RECIPE_REV=1
recipe_hash() { # module dir -> hash of its go.mod/go.sum
  cat "${MODULES_DIR}/$1/go.mod" "${MODULES_DIR}/$1/go.sum" | sha256sum | cut -c1-16
}

BUILT=()
SKIPPED=()
build_one() { # name moduledir package ldflags-function
  local name="$1" moddir="$2" pkg="$3" flagsfn="$4"
  local out="${BIN_DIR}/${name}" stamp="${BIN_DIR}/.${name}.stamp"
  local want
  want="rev=${RECIPE_REV} ${pkg} ${GO_VER} $(recipe_hash "${moddir}") ${KUBE_VERSION} ${ETCD_VERSION} ${KWOK_VERSION}"
  if [[ "${FORCE}" == 0 && -x "${out}" && -f "${stamp}" && "$(cat "${stamp}")" == "${want}" ]]; then
    SKIPPED+=("${name}")
    return 0
  fi
  local ldflags
  ldflags="$("${flagsfn}")"
  log "building ${name} (${pkg}) ..."
  local t0 tmp
  t0=$(date +%s)
  tmp="${out}.tmp.$$"
  # A heartbeat, so a 15-minute kube-apiserver compile does not look like a hang in CI logs.
  # Its sleep holds no pipe open and is ended with it (callers read our output to EOF).
  (
    trap 'kill "${nap}" 2>/dev/null; exit 0' TERM
    while :; do
      sleep 60 >/dev/null 2>&1 &
      nap=$!
      wait "${nap}"
      log "... still building ${name} ($(( $(date +%s) - t0 ))s)"
    done
  ) &
  local heartbeat=$!
  if ! (cd "${MODULES_DIR}/${moddir}" && nice -n 10 go build -ldflags "${ldflags}" -o "${tmp}" "${pkg}"); then
    kill "${heartbeat}" 2>/dev/null || true
    rm -f "${tmp}"
    die "step 'build ${name}': go build ${pkg} failed (module hack/control-plane/${moddir}; cache ${CACHE}/go)"
  fi
  kill "${heartbeat}" 2>/dev/null || true
  mv -f "${tmp}" "${out}"
  printf '%s' "${want}" >"${stamp}"
  log "built ${name} in $(( $(date +%s) - t0 ))s ($(du -h "${out}" | cut -f1))"
  BUILT+=("${name}")
}

# Version stamping, as the Kubernetes release build does (hack/lib/version.sh), so
# `kube-apiserver --version` and `kubectl version` report the release. Computed only when
# something is built: a warm run touches no network.
kube_ldflags() {
  # buildDate: the release's publication time from the module proxy (reproducible).
  local date="${KUBE_BUILD_DATE:-}"
  if [[ -z "${date}" ]]; then
    date="$(cd "${MODULES_DIR}/${KUBE_MODULE_DIR}" && go list -m -json "k8s.io/kubernetes@${KUBE_VERSION}" \
      | sed -n 's/^[[:space:]]*"Time": "\([^"]*\)",*$/\1/p')" \
      || die "step 'version info': go list -m k8s.io/kubernetes@${KUBE_VERSION} failed (GOPROXY=${GOPROXY})"
  fi
  local major minor flags="-s -w" p
  major="$(sed -E 's/^v([0-9]+)\..*/\1/' <<<"${KUBE_VERSION}")"
  minor="$(sed -E 's/^v[0-9]+\.([0-9]+)\..*/\1/' <<<"${KUBE_VERSION}")"
  for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    flags+=" -X ${p}.gitVersion=${KUBE_VERSION}"
    flags+=" -X ${p}.gitMajor=${major}"
    flags+=" -X ${p}.gitMinor=${minor}"
    # The module proxy does not record the release's commit; set KUBE_GIT_COMMIT to stamp it.
    flags+=" -X ${p}.gitCommit=${KUBE_GIT_COMMIT:-0000000000000000000000000000000000000000}"
    flags+=" -X ${p}.gitTreeState=clean"
    flags+=" -X ${p}.buildDate=${date:-1970-01-01T00:00:00Z}"
  done
  echo "${flags}"
}
# kwok/kwokctl: report our kwok version and default to our Kubernetes version
# (hack/cluster.sh also points every binary kwokctl could fetch at local files).
kwok_ldflags() {
  echo "-s -w -X sigs.k8s.io/kwok/pkg/consts.Version=${KWOK_VERSION#v}" \
    "-X sigs.k8s.io/kwok/pkg/consts.KubeVersion=${KUBE_VERSION#v}" \
    "-X sigs.k8s.io/kwok/pkg/consts.PreRelease=GA"
}
etcd_ldflags() {
  echo "-s -w -X go.etcd.io/etcd/api/v3/version.GitSHA=module-${ETCD_VERSION}"
}

log "Kubernetes ${KUBE_VERSION}, etcd ${ETCD_VERSION}, kwok ${KWOK_VERSION}; ${GO_VER}; into ${BIN_DIR}"
build_one etcd etcd go.etcd.io/etcd/server/v3 etcd_ldflags
build_one kwok kwok sigs.k8s.io/kwok/cmd/kwok kwok_ldflags
build_one kwokctl kwok sigs.k8s.io/kwok/cmd/kwokctl kwok_ldflags
for c in "${KUBE_CONTROL_PLANE_CMDS[@]}"; do
  build_one "${c}" "${KUBE_MODULE_DIR}" "k8s.io/kubernetes/cmd/${c}" kube_ldflags
done
# The real node's binaries (hack/realnode/); not needed when it is switched off, and the
# real node runs only the newest release.
if [[ "${KUBE_MODULE_DIR}" == kubernetes ]] && [[ "${TTSFLEET_REAL_NODE:-1}" != 0 ]]; then
  for c in "${KUBE_NODE_CMDS[@]}"; do
    build_one "${c}" kubernetes-node "k8s.io/kubernetes/cmd/${c}" kube_ldflags
  done
fi

# Smoke check: the binaries run and report the pinned version.
got="$("${BIN_DIR}/kube-apiserver" --version 2>&1 || true)"
[[ "${got}" == "Kubernetes ${KUBE_VERSION}" ]] \
  || die "step 'verify': kube-apiserver --version says '${got}', want 'Kubernetes ${KUBE_VERSION}'"
if [[ "${KUBE_MODULE_DIR}" == kubernetes ]] && [[ "${TTSFLEET_REAL_NODE:-1}" != 0 ]]; then
  got="$("${BIN_DIR}/kubelet" --version 2>&1 || true)"
  [[ "${got}" == "Kubernetes ${KUBE_VERSION}" ]] \
    || die "step 'verify': kubelet --version says '${got}', want 'Kubernetes ${KUBE_VERSION}'"
fi
got="$("${BIN_DIR}/etcd" --version 2>&1 | head -1 || true)"
[[ "${got}" == "etcd Version: ${ETCD_VERSION#v}" ]] \
  || die "step 'verify': etcd --version says '${got}', want 'etcd Version: ${ETCD_VERSION#v}'"

log "done in $(( $(date +%s) - START_ALL ))s; built: ${BUILT[*]:-none}; up to date: ${SKIPPED[*]:-none}"
echo "${BIN_DIR}"
