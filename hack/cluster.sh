#!/usr/bin/env bash
# Local Kubernetes control plane for the e2e tests: kwok (real kube-apiserver,
# kube-controller-manager, kube-scheduler and etcd, fake GPU nodes), kind where a Docker
# engine runs, or an existing cluster. See --help.
set -euo pipefail

HACK_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_ROOT="$(cd "${HACK_DIR}/.." && pwd)"
# shellcheck source=hack/versions.env
source "${HACK_DIR}/versions.env"
# shellcheck source=hack/kube-release.sh
source "${HACK_DIR}/kube-release.sh"

usage() {
  cat <<EOF
Usage: hack/cluster.sh up|down [--purge]|load-image ARCHIVE|kubeconfig|status|--help

  up          start (or reuse) the cluster, wait until the API server is healthy, create
              the fake GPU node pools (e2e/cluster/nodes*.yaml), start the real node (kwok
              provider), install crds/*.yaml, and write the kubeconfig. Idempotent: a running
              cluster and node are reused as they are (a kwok cluster made from another
              e2e/cluster/kwokctl.yaml is recreated).
  down        delete the cluster, stop every process it started and undo every host change
              of the real node; --purge also removes the real node's image store
  load-image  import an OCI image archive into the real node's containerd (a no-op when
              it holds the archive's images already); pods use it with imagePullPolicy Never
  kubeconfig  print the kubeconfig path (export KUBECONFIG=\$(hack/cluster.sh kubeconfig))
  status      say whether the cluster runs and is healthy; exit 1 if not

Environment:
  TTSFLEET_CLUSTER_PROVIDER  kwok | kind | existing. Default: kind when 'docker info'
                             works, else kwok. existing = use \$KUBECONFIG as it is
                             (nodes and CRDs are still applied on 'up').
  TTSFLEET_CLUSTER_NAME      cluster name (default ttsfleet)
  TTSFLEET_CACHE             cache root (default \$HOME/.cache/ttsfleet)
  TTSFLEET_KIND_NODE_IMAGE   kind only: node image (default: kind ${KIND_VERSION}'s own)
  TTSFLEET_REAL_NODE         kwok only: 0 = no real node (default 1; needs root)
  TTSFLEET_KUBE_RELEASE      kwok only: newest (default, ${KUBE_VERSION}) | oldest (the oldest
                             supported minor, KUBE_OLDEST_VERSION in hack/versions.env; needs
                             TTSFLEET_REAL_NODE=0). A running cluster of the other release
                             is recreated.

kwok provider: 'kwokctl create cluster --runtime binary' with the binaries that
hack/build-control-plane.sh built (Kubernetes ${KUBE_VERSION}, etcd ${ETCD_VERSION},
kwok ${KWOK_VERSION}); it builds them first if needed and never downloads anything.
kwok's default node/pod "fast" stages make fake nodes Ready and their pods Running+Ready.

Files: kubeconfig  \${TTSFLEET_CACHE}/clusters/<name>/kubeconfig
       kwok state  \${TTSFLEET_CACHE}/kwok/clusters/<name>/ (component logs in logs/)
Node pools, labels and taints: e2e/cluster/nodes.yaml (keys listed at its top).

The real node (kwok provider): node ${REALNODE_NAME}, kubelet + kube-proxy ${KUBE_VERSION} with
containerd, runc and the CNI bridge from Debian packages (installed when missing). It carries
the taint ${REALNODE_KEY}=true:NoSchedule and the label ${REALNODE_KEY}=true: a pod meant for
it tolerates the one and selects the other. Its address ${REALNODE_IP} (bridge ${REALNODE_BRIDGE})
is also how its pods reach the host; pods get ${REALNODE_POD_CIDR} and reach nothing beyond
the bridge and the host. Images come only from 'load-image'.
Files: \${TTSFLEET_CACHE}/clusters/<name>/node/ (configs, kubelet root; logs in logs/),
       ${REALNODE_HOST_DIR}/ (containerd state), \${TTSFLEET_CACHE}/realnode/ (image store).
EOF
}

CACHE="${TTSFLEET_CACHE:-${HOME}/.cache/ttsfleet}"
NAME="${TTSFLEET_CLUSTER_NAME:-ttsfleet}"
CLUSTER_DIR="${CACHE}/clusters/${NAME}"
# shellcheck source=hack/realnode/node.sh
source "${HACK_DIR}/realnode/node.sh"

CMD="${1:-}"
PURGE=0
case "${CMD}" in
  up|kubeconfig|status) (( $# == 1 )) || { usage >&2; exit 2; } ;;
  down)
    case "${2:-}" in
      "") ;;
      --purge) PURGE=1 ;;
      *) usage >&2; exit 2 ;;
    esac
    ;;
  load-image) (( $# == 2 )) || { usage >&2; exit 2; } ;;
  -h|--help|help) usage; exit 0 ;;
  *) usage >&2; exit 2 ;;
esac
KUBECONFIG_OUT="${CLUSTER_DIR}/kubeconfig"
PROVIDER_FILE="${CLUSTER_DIR}/provider"
BIN_DIR="$("${HACK_DIR}/build-control-plane.sh" --print-bin-dir)"
# kwokctl keeps its clusters under our cache, never in ~/.kwok; kubectl its discovery
# cache too, never in ~/.kube.
export KWOK_WORKDIR="${CACHE}/kwok"
export KUBECACHEDIR="${KUBECACHEDIR:-${CACHE}/kube-cache}"

START=$(date +%s)
log() { printf '[cluster %3ss] %s\n' "$(( $(date +%s) - START ))" "$*" >&2; }
die() { printf '[cluster] ERROR: %s\n' "$*" >&2; exit 1; }

docker_works() { command -v docker >/dev/null 2>&1 && docker info >/dev/null 2>&1; }

# The provider a cluster was created with wins over the environment, so 'down' and
# 'status' act on what 'up' made.
if [[ -f "${PROVIDER_FILE}" && "${CMD}" != up ]]; then
  PROVIDER="$(cat "${PROVIDER_FILE}")"
else
  PROVIDER="${TTSFLEET_CLUSTER_PROVIDER:-}"
  if [[ -z "${PROVIDER}" ]]; then
    if docker_works; then PROVIDER=kind; else PROVIDER=kwok; fi
  fi
fi
case "${PROVIDER}" in
  kwok|kind|existing) ;;
  *) die "TTSFLEET_CLUSTER_PROVIDER must be kwok, kind or existing (got '${PROVIDER}')" ;;
esac

kubectl_bin() {
  if [[ -x "${BIN_DIR}/kubectl" ]]; then echo "${BIN_DIR}/kubectl"
  elif command -v kubectl >/dev/null 2>&1; then command -v kubectl
  else die "no kubectl: run hack/build-control-plane.sh"
  fi
}
kc() { "$(kubectl_bin)" --kubeconfig "${KUBECONFIG_OUT}" "$@"; }

healthy() { [[ -s "${KUBECONFIG_OUT}" ]] && kc get --raw=/readyz >/dev/null 2>&1; }

wait_healthy() { # seconds
  local deadline=$(( $(date +%s) + $1 ))
  until healthy; do
    (( $(date +%s) < deadline )) || return 1
    sleep 1
  done
}

# ---------------------------------------------------------------------------
# kwok: kwokctl, binary runtime, our binaries
# ---------------------------------------------------------------------------
KWOKCTL="${BIN_DIR}/kwokctl"
kwokctl_env() {
  # Every binary kwokctl could fetch is pinned to a local file: it must never download.
  # kwokctl runs the first kubectl on PATH (here often an old cloud-SDK one): put ours first.
  env PATH="${BIN_DIR}:${PATH}" \
      KWOK_KUBE_VERSION="${KUBE_VERSION}" \
      KWOK_ETCD_VERSION="${ETCD_VERSION#v}" \
      KWOK_KUBECTL_BINARY="${BIN_DIR}/kubectl" \
      KWOK_KUBE_BINARY_PREFIX="${BIN_DIR}" \
      KWOK_BINARY_PREFIX="${BIN_DIR}" \
      KWOK_ETCD_BINARY_PREFIX="${BIN_DIR}" \
      "$@" 8>&-  # the components it starts must not inherit our lock
}
# kwokctl edits a kubeconfig on create/delete (default ~/.kube/config). We keep our own
# copy, so it gets none on create ("") and a path that never exists on delete.
NO_KUBECONFIG="${KWOK_WORKDIR}/no-such-kubeconfig"
kwok_exists() { kwokctl_env "${KWOKCTL}" get clusters 2>/dev/null | grep -qx "${NAME}"; }

kwok_write_kubeconfig() {
  mkdir -p "${CLUSTER_DIR}"
  kwokctl_env "${KWOKCTL}" get kubeconfig --name "${NAME}" >"${KUBECONFIG_OUT}.tmp" \
    || die "step 'kubeconfig': kwokctl get kubeconfig --name ${NAME} failed"
  chmod 600 "${KUBECONFIG_OUT}.tmp"
  mv -f "${KUBECONFIG_OUT}.tmp" "${KUBECONFIG_OUT}"
}

# What the cluster was created from: a running cluster made from another kwokctl.yaml
# (say, a narrower Service range) or another Kubernetes release is recreated, not reused.
KWOK_CONFIG="${REPO_ROOT}/e2e/cluster/kwokctl.yaml"
KWOK_CONFIG_STAMP="${CLUSTER_DIR}/kwokctl.sha256"
kwok_config_hash() { { cat "${KWOK_CONFIG}"; echo "${KUBE_VERSION}"; } | sha256sum | cut -d' ' -f1; }
kwok_config_current() { [[ -f "${KWOK_CONFIG_STAMP}" && "$(cat "${KWOK_CONFIG_STAMP}")" == "$(kwok_config_hash)" ]]; }

kwok_create() {
  log "creating kwok cluster '${NAME}' (Kubernetes ${KUBE_VERSION}, etcd ${ETCD_VERSION}; logs in ${KWOK_WORKDIR}/clusters/${NAME}/logs)"
  kwokctl_env "${KWOKCTL}" create cluster \
      --name "${NAME}" \
      --runtime binary \
      --kube-apiserver-binary "${BIN_DIR}/kube-apiserver" \
      --kube-controller-manager-binary "${BIN_DIR}/kube-controller-manager" \
      --kube-scheduler-binary "${BIN_DIR}/kube-scheduler" \
      --kwok-controller-binary "${BIN_DIR}/kwok" \
      --etcd-binary "${BIN_DIR}/etcd" \
      --config "${KWOK_CONFIG}" \
      --kubeconfig "" \
      --quiet-pull \
      --wait 120s \
    || die "step 'kwokctl create cluster': failed; see the logs in ${KWOK_WORKDIR}/clusters/${NAME}/logs"
  mkdir -p "${CLUSTER_DIR}"
  kwok_config_hash >"${KWOK_CONFIG_STAMP}"
}

kwok_up() {
  # A warm build is a no-op (seconds); a cold one builds everything, a version bump rebuilds.
  "${HACK_DIR}/build-control-plane.sh" >/dev/null || die "step 'build control plane': hack/build-control-plane.sh failed"
  if kwok_exists && ! kwok_config_current; then
    log "kwok cluster '${NAME}' was created from another e2e/cluster/kwokctl.yaml or Kubernetes release; recreating it"
    kwokctl_env "${KWOKCTL}" delete cluster --name "${NAME}" --kubeconfig "${NO_KUBECONFIG}" >&2 || true
  fi
  if kwok_exists; then
    kwok_write_kubeconfig
    if healthy; then
      log "reusing running kwok cluster '${NAME}'"
      return 0
    fi
    # After a reboot every component is gone; after a crash some may linger. Stop them
    # all, then start them all.
    log "kwok cluster '${NAME}' exists but is not serving; restarting its components"
    kwokctl_env "${KWOKCTL}" stop cluster --name "${NAME}" >&2 || true
    kwokctl_env "${KWOKCTL}" start cluster --name "${NAME}" --wait 60s >&2 || true
    kwok_write_kubeconfig
    if wait_healthy 60; then return 0; fi
    log "kwok cluster '${NAME}' did not come back; recreating it"
    kwokctl_env "${KWOKCTL}" delete cluster --name "${NAME}" --kubeconfig "${NO_KUBECONFIG}" >&2 || true
  fi
  kwok_create
  kwok_write_kubeconfig
}

# PIDs of processes running a binary from this cluster's kwok directory.
kwok_cluster_pids() {
  local dir="${KWOK_WORKDIR}/clusters/${NAME}/" pid exe
  for pid in $(pgrep -u "$(id -u)" -f -- "${dir}" || true); do
    exe="$(tr '\0' ' ' <"/proc/${pid}/cmdline" 2>/dev/null || true)"
    [[ "${exe}" == "${dir}"* ]] && echo "${pid}"
  done
  return 0
}

kwok_down() {
  if [[ -x "${KWOKCTL}" ]] && kwok_exists; then
    log "deleting kwok cluster '${NAME}'"
    kwokctl_env "${KWOKCTL}" delete cluster --name "${NAME}" --kubeconfig "${NO_KUBECONFIG}" >&2 \
      || log "kwokctl delete cluster failed; stopping leftover processes by hand"
  else
    log "no kwok cluster '${NAME}'"
  fi
  # Safety net: nothing of this cluster may outlive 'down'.
  local pids pid
  pids="$(kwok_cluster_pids)"
  if [[ -n "${pids}" ]]; then
    log "stopping leftover processes: $(tr '\n' ' ' <<<"${pids}")"
    for pid in ${pids}; do kill "${pid}" 2>/dev/null || true; done
    sleep 2
    for pid in $(kwok_cluster_pids); do kill -9 "${pid}" 2>/dev/null || true; done
  fi
  rm -rf "${KWOK_WORKDIR:?}/clusters/${NAME:?}"
}

# ---------------------------------------------------------------------------
# kind: real kubelets in Docker; fake GPU nodes from a kwok controller on the host
# ---------------------------------------------------------------------------
KIND_KWOK_PID="${CLUSTER_DIR}/kwok-controller.pid"

kind_bin() {
  if command -v kind >/dev/null 2>&1; then command -v kind; return; fi
  local dir="${CACHE}/kind/${KIND_VERSION}"
  if [[ ! -x "${dir}/kind" ]]; then
    log "building kind ${KIND_VERSION} from its Go module"
    GOBIN="${dir}" GOMODCACHE="${CACHE}/go/mod" GOCACHE="${CACHE}/go/build" CGO_ENABLED=0 \
      nice -n 10 go install -trimpath -ldflags "-s -w" "sigs.k8s.io/kind@${KIND_VERSION}" >&2 \
      || die "step 'build kind': go install sigs.k8s.io/kind@${KIND_VERSION} failed"
  fi
  echo "${dir}/kind"
}

kind_stages() { # kwok's default "fast" stages, from the pinned kwok module
  local src="${CACHE}/go/mod/sigs.k8s.io/kwok@${KWOK_VERSION}/kustomize/stage" f
  [[ -d "${src}" ]] || die "step 'kwok stages': ${src} missing; run hack/build-control-plane.sh"
  for f in "${src}"/node/fast/*.yaml "${src}"/node/heartbeat-with-lease/*.yaml "${src}"/pod/fast/*.yaml; do
    [[ "$(basename "${f}")" == kustomization.yaml ]] && continue
    echo "---"
    cat "${f}"
  done
}

kind_up() {
  local kind
  kind="$(kind_bin)"
  "${HACK_DIR}/build-control-plane.sh" >/dev/null || die "step 'build control plane': hack/build-control-plane.sh failed"
  mkdir -p "${CLUSTER_DIR}"
  if "${kind}" get clusters 2>/dev/null | grep -qx "${NAME}"; then
    log "reusing kind cluster '${NAME}'"
  else
    local image_args=()
    [[ -n "${TTSFLEET_KIND_NODE_IMAGE:-}" ]] && image_args=(--image "${TTSFLEET_KIND_NODE_IMAGE}")
    log "creating kind cluster '${NAME}'"
    "${kind}" create cluster --name "${NAME}" "${image_args[@]}" --wait 180s \
      --kubeconfig "${KUBECONFIG_OUT}" >&2 || die "step 'kind create cluster': failed"
  fi
  "${kind}" get kubeconfig --name "${NAME}" >"${KUBECONFIG_OUT}.tmp" \
    || die "step 'kubeconfig': kind get kubeconfig failed"
  chmod 600 "${KUBECONFIG_OUT}.tmp"
  mv -f "${KUBECONFIG_OUT}.tmp" "${KUBECONFIG_OUT}"
  # Fake GPU nodes: a kwok controller on the host manages only the annotated nodes.
  if [[ -f "${KIND_KWOK_PID}" ]] && kill -0 "$(cat "${KIND_KWOK_PID}")" 2>/dev/null; then
    log "kwok controller already running (pid $(cat "${KIND_KWOK_PID}"))"
  else
    kind_stages >"${CLUSTER_DIR}/kwok-stages.yaml"
    nohup "${BIN_DIR}/kwok" \
      --kubeconfig "${KUBECONFIG_OUT}" \
      --config "${CLUSTER_DIR}/kwok-stages.yaml" \
      --manage-all-nodes=false \
      --manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake \
      --node-lease-duration-seconds=40 \
      >"${CLUSTER_DIR}/kwok-controller.log" 2>&1 8>&- &
    echo $! >"${KIND_KWOK_PID}"
    log "started kwok controller (pid $!, log ${CLUSTER_DIR}/kwok-controller.log)"
  fi
}

kind_down() {
  if [[ -f "${KIND_KWOK_PID}" ]]; then
    local pid
    pid="$(cat "${KIND_KWOK_PID}")"
    kill "${pid}" 2>/dev/null && log "stopped kwok controller (pid ${pid})" || true
    rm -f "${KIND_KWOK_PID}"
  fi
  local kind
  kind="$(kind_bin)"
  if "${kind}" get clusters 2>/dev/null | grep -qx "${NAME}"; then
    log "deleting kind cluster '${NAME}'"
    "${kind}" delete cluster --name "${NAME}" --kubeconfig "${KUBECONFIG_OUT}" >&2 || die "step 'kind delete cluster': failed"
  fi
}

# ---------------------------------------------------------------------------
# existing: whatever $KUBECONFIG points at
# ---------------------------------------------------------------------------
existing_up() {
  local src="${KUBECONFIG:-${HOME}/.kube/config}"
  [[ "${src}" != *:* ]] || die "provider existing: KUBECONFIG with several files is not supported; merge them first"
  [[ -s "${src}" ]] || die "provider existing: no kubeconfig at '${src}' (set KUBECONFIG)"
  mkdir -p "${CLUSTER_DIR}"
  # A copy, so the tests get a stable path; the user's file is never written.
  cp -f "${src}" "${KUBECONFIG_OUT}.tmp" && chmod 600 "${KUBECONFIG_OUT}.tmp" && mv -f "${KUBECONFIG_OUT}.tmp" "${KUBECONFIG_OUT}"
}

# ---------------------------------------------------------------------------
# Common: nodes, CRDs, readiness
# ---------------------------------------------------------------------------
apply_nodes() {
  local f
  for f in "${REPO_ROOT}"/e2e/cluster/nodes*.yaml; do
    [[ -e "${f}" ]] || continue
    log "applying ${f#"${REPO_ROOT}"/}"
    kc apply -f "${f}" >/dev/null || die "step 'apply ${f#"${REPO_ROOT}"/}': kubectl apply failed"
  done
  log "waiting for the fake nodes to be Ready"
  kc wait --for=condition=Ready node -l type=kwok --timeout=120s >/dev/null \
    || die "step 'nodes Ready': fake nodes did not become Ready (is the kwok controller running? see its log)"
  wait_nodes_untainted
}

# The taints the control plane puts on a node that is not (yet) Ready: not-ready, unreachable.
# The API server's TaintNodesByCondition admission plugin gives every new node
# not-ready:NoSchedule; the controller-manager's node lifecycle controller removes it only
# once it has observed the node Ready, seconds after kwok marked it so (longer on a
# freshly started controller-manager). Until then pods do not schedule there and the nodes
# do not look like the pools nodes.yaml declares: 'up' is not done before that.
wait_nodes_untainted() {
  local deadline=$(( $(date +%s) + 120 )) tainted
  log "waiting for the node lifecycle controller to lift its start-up taints from the fake nodes"
  while :; do
    tainted="$(kc get nodes -l type=kwok -o jsonpath='{range .items[*]}{.metadata.name}{"\t"}{.spec.taints[*].key}{"\n"}{end}' \
      | awk -F'\t' '$2 ~ /node\.kubernetes\.io\/(not-ready|unreachable)/ {print $1 " (" $2 ")"}')" \
      || die "step 'node taints': kubectl get nodes failed"
    [[ -z "${tainted}" ]] && return 0
    (( $(date +%s) < deadline )) \
      || die "step 'node taints': still tainted by the control plane after 120s: $(tr '\n' ' ' <<<"${tainted}")(is kube-controller-manager running?)"
    sleep 1
  done
}

install_crds() {
  local crds=()
  shopt -s nullglob
  crds=("${REPO_ROOT}"/crds/*.yaml "${REPO_ROOT}"/crds/*.yml)
  shopt -u nullglob
  if (( ${#crds[@]} == 0 )); then
    log "no CRDs in crds/ yet; skipping"
    return 0
  fi
  local args=() f
  for f in "${crds[@]}"; do args+=(-f "${f}"); done
  log "installing ${#crds[@]} CRD file(s) from crds/"
  kc apply --server-side --force-conflicts --field-manager=ttsfleet-cluster-sh "${args[@]}" >/dev/null \
    || die "step 'install CRDs': kubectl apply of crds/ failed"
  kc wait --for=condition=Established --timeout=60s "${args[@]}" >/dev/null \
    || die "step 'install CRDs': CRDs did not become Established"
}

wait_default_serviceaccount() {
  # Pods are refused until the controller-manager has made the default ServiceAccount.
  local deadline=$(( $(date +%s) + 60 ))
  until kc get serviceaccount default -n default >/dev/null 2>&1; do
    (( $(date +%s) < deadline )) || die "step 'default ServiceAccount': not created in 60s (is kube-controller-manager running?)"
    sleep 1
  done
}

# One 'up', 'down' or 'load-image' at a time per cluster (parallel test sessions share it).
if [[ "${CMD}" == up || "${CMD}" == down || "${CMD}" == load-image ]]; then
  mkdir -p "${CACHE}/clusters"
  exec 8>"${CACHE}/clusters/.${NAME}.lock"
  if ! flock -n 8; then
    log "another 'hack/cluster.sh up|down' holds the lock for '${NAME}'; waiting"
    flock 8
  fi
fi

case "${CMD}" in
  up)
    # The real node's kubelet is the newest release's; a kubelet newer than its API server
    # is outside the version skew Kubernetes supports.
    if [[ "${TTSFLEET_KUBE_RELEASE:-newest}" != newest && "${PROVIDER}" == kwok && "${TTSFLEET_REAL_NODE:-1}" != 0 ]]; then
      die "TTSFLEET_KUBE_RELEASE=${TTSFLEET_KUBE_RELEASE} runs without the real node: set TTSFLEET_REAL_NODE=0"
    fi
    case "${PROVIDER}" in
      kwok) kwok_up ;;
      kind) kind_up ;;
      existing) existing_up ;;
    esac
    mkdir -p "${CLUSTER_DIR}"
    echo "${PROVIDER}" >"${PROVIDER_FILE}"
    wait_healthy 120 || die "step 'API server healthy': /readyz did not answer ok in 120s (kubeconfig ${KUBECONFIG_OUT})"
    apply_nodes
    if [[ "${PROVIDER}" == kwok && "${TTSFLEET_REAL_NODE:-1}" != 0 ]]; then
      realnode_up
    elif [[ "${PROVIDER}" == kwok && -d "${REALNODE_DIR}" ]]; then
      log "TTSFLEET_REAL_NODE=0: stopping the real node"
      realnode_down 0
      kc delete node "${REALNODE_NAME}" --ignore-not-found >/dev/null
    fi
    install_crds
    wait_default_serviceaccount
    log "cluster '${NAME}' (${PROVIDER}) is up: $(kc version -o json 2>/dev/null | sed -n 's/.*"gitVersion": "\([^"]*\)".*/\1/p' | tail -1), $(kc get nodes --no-headers 2>/dev/null | wc -l) nodes"
    log "export KUBECONFIG=${KUBECONFIG_OUT}"
    ;;
  down)
    case "${PROVIDER}" in
      # The node first: its kubelet must not outlive the API server it reports to.
      kwok) realnode_down "${PURGE}"; kwok_down ;;
      kind) kind_down ;;
      existing) log "provider existing: leaving the cluster alone" ;;
    esac
    rm -rf "${CLUSTER_DIR}"
    ;;
  load-image)
    [[ "${PROVIDER}" == kwok ]] || die "load-image: only the kwok provider's real node is supported (provider ${PROVIDER}; kind has 'kind load image-archive')"
    realnode_load_image "$2"
    ;;
  kubeconfig)
    echo "${KUBECONFIG_OUT}"
    ;;
  status)
    if healthy; then
      echo "cluster '${NAME}' (${PROVIDER}): healthy; kubeconfig ${KUBECONFIG_OUT}"
      kc get nodes -L nvidia.com/gpu.product,karpenter.sh/capacity-type,topology.kubernetes.io/zone 2>/dev/null || true
      if [[ "${PROVIDER}" == kwok && -d "${REALNODE_DIR}" ]]; then
        echo "real node ${REALNODE_NAME}:"
        realnode_status
      fi
    else
      echo "cluster '${NAME}' (${PROVIDER}): not running"
      exit 1
    fi
    ;;
esac
