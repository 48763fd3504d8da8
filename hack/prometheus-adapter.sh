#!/usr/bin/env bash
# Build prometheus-adapter once from its Go module into the cache; print the binary's path.
set -euo pipefail

HACK_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=hack/monitoring.env
source "${HACK_DIR}/monitoring.env"

usage() {
  cat <<EOF_USAGE
Usage: hack/prometheus-adapter.sh [--force] [--help]

Builds prometheus-adapter ${PROMETHEUS_ADAPTER_VERSION} (Go module sigs.k8s.io/prometheus-adapter,
pinned in hack/monitoring.env) into \${TTSFLEET_CACHE:-\$HOME/.cache/ttsfleet}/monitoring/bin/
and prints the binary's path. A binary whose stamp matches the recipe (version, Go version)
is kept, so a second run takes milliseconds. Module and build caches: \${TTSFLEET_CACHE}/go/.

Options:
  --force     rebuild even if the stamp is current
  -h, --help  this text
EOF_USAGE
}

FORCE=0
for arg in "$@"; do
  case "${arg}" in
    --force) FORCE=1 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "prometheus-adapter.sh: unknown argument: ${arg} (see --help)" >&2; exit 2 ;;
  esac
done

CACHE="${TTSFLEET_CACHE:-${HOME}/.cache/ttsfleet}"
BIN_DIR="${CACHE}/monitoring/bin"
OUT="${BIN_DIR}/prometheus-adapter"
STAMP="${BIN_DIR}/.prometheus-adapter.stamp"
MODULE="sigs.k8s.io/prometheus-adapter"

die() { printf '[prometheus-adapter] ERROR: %s\n' "$*" >&2; exit 1; }
command -v go >/dev/null 2>&1 || die "go not found in PATH"

# Bump when the build flags below change, so a stamped binary gets rebuilt.
RECIPE_REV=1
WANT="rev=${RECIPE_REV} ${MODULE}/cmd/adapter@${PROMETHEUS_ADAPTER_VERSION} $(go env GOVERSION)"
if [[ "${FORCE}" == 0 && -x "${OUT}" && "$(cat "${STAMP}" 2>/dev/null)" == "${WANT}" ]]; then
  echo "${OUT}"
  exit 0
fi

mkdir -p "${BIN_DIR}" "${CACHE}/go/mod" "${CACHE}/go/build"
export GOMODCACHE="${CACHE}/go/mod" GOCACHE="${CACHE}/go/build" GOTOOLCHAIN=local CGO_ENABLED=0
export GOFLAGS="-p=${BUILD_JOBS:-2} -buildvcs=false -trimpath"
# The Go module proxy is the only network source; never fall back to VCS hosts.
GOPROXY="${GOPROXY:-https://proxy.golang.org}"
export GOPROXY="${GOPROXY%%,direct}"

# One build at a time per cache (parallel test sessions may ask together).
exec 9>"${BIN_DIR}/.build.lock"
flock 9
if [[ "${FORCE}" == 0 && -x "${OUT}" && "$(cat "${STAMP}" 2>/dev/null)" == "${WANT}" ]]; then
  echo "${OUT}"
  exit 0
fi

t0=$(date +%s)
tmp="$(mktemp -d "${BIN_DIR}/.build.XXXXXX")"
trap 'rm -rf "${tmp}"' EXIT
# Built inside the module as published (its own go.mod and go.sum, fetched from the proxy
# and checked against the checksum database): the release exactly, no consumer module to
# keep in step. (`go install pkg@version` would also ask the proxy for the module's version
# list, which it refuses for this module.)
src="$(go mod download -json "${MODULE}@${PROMETHEUS_ADAPTER_VERSION}" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')"
[[ -d "${src}" ]] || die "go mod download ${MODULE}@${PROMETHEUS_ADAPTER_VERSION} failed (GOPROXY=${GOPROXY})"
(cd "${src}" && nice -n 10 go build -mod=readonly -ldflags "-s -w" -o "${tmp}/adapter" ./cmd/adapter) >&2 \
  || die "go build ${MODULE}/cmd/adapter@${PROMETHEUS_ADAPTER_VERSION} failed (cache ${CACHE}/go)"
mv -f "${tmp}/adapter" "${OUT}"
printf '%s' "${WANT}" >"${STAMP}"
printf '[prometheus-adapter] built %s in %ss\n' "${PROMETHEUS_ADAPTER_VERSION}" "$(( $(date +%s) - t0 ))" >&2
echo "${OUT}"
