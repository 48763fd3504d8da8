#!/usr/bin/env bash
# Gateway API CRDs (standard channel) from the published Go module
# sigs.k8s.io/gateway-api, fetched through the Go module proxy into our cache; nothing
# is vendored. Usage:
#   hack/gateway-api.sh dir        print the folder holding the standard CRDs (fetching once)
#   hack/gateway-api.sh install    kubectl apply them to $KUBECONFIG's cluster, wait Established
set -euo pipefail

# Pinned: the newest v1.x release when written; its standard channel serves HTTPRoute v1.
GATEWAY_API_VERSION="${GATEWAY_API_VERSION:-v1.4.1}"

CACHE="${TTSFLEET_CACHE:-${HOME}/.cache/ttsfleet}"
export GOMODCACHE="${CACHE}/go/mod"
export GOFLAGS=-mod=mod GOTOOLCHAIN=local
log() { printf '==> %s\n' "$*" >&2; }
die() { printf 'gateway-api.sh: ERROR: %s\n' "$*" >&2; exit 1; }

crd_dir() {
  local json dir
  command -v go >/dev/null || die "no 'go' on PATH (needed to fetch sigs.k8s.io/gateway-api@${GATEWAY_API_VERSION})"
  # `go mod download` outside a module only fills the cache; -json names the folder.
  json="$(cd "${CACHE}" && go mod download -json "sigs.k8s.io/gateway-api@${GATEWAY_API_VERSION}")" \
    || die "go mod download sigs.k8s.io/gateway-api@${GATEWAY_API_VERSION} failed: ${json:-no output}"
  dir="$(sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p' <<<"${json}")"
  [[ -d "${dir}/config/crd/standard" ]] || die "no config/crd/standard in '${dir}'"
  echo "${dir}/config/crd/standard"
}

case "${1:-}" in
  dir) mkdir -p "${CACHE}"; crd_dir ;;
  install)
    mkdir -p "${CACHE}"
    dir="$(crd_dir)"
    KUBECTL="${KUBECTL:-kubectl}"
    log "installing Gateway API ${GATEWAY_API_VERSION} CRDs (standard channel) from ${dir}"
    "${KUBECTL}" apply --server-side --force-conflicts -f "${dir}" >&2
    # The release's CRD files carry `status: {conditions: null}`. Until the API server
    # sets the conditions, `kubectl wait --for condition` fails on that null ("accessor
    # error: <nil> is of the type <nil>") instead of waiting: a race CI lost. Poll instead.
    for crd in httproutes.gateway.networking.k8s.io gateways.gateway.networking.k8s.io; do
      deadline=$((SECONDS + 60))
      until [[ "$("${KUBECTL}" get crd "${crd}" \
        -o jsonpath='{.status.conditions[?(@.type=="Established")].status}')" == True ]]; do
        ((SECONDS < deadline)) || die "CRD ${crd} not Established within 60 s"
        sleep 0.5
      done
      log "CRD ${crd} Established"
    done
    ;;
  *) sed -n '2,6p' "$0" >&2; exit 2 ;;
esac
