#!/usr/bin/env bash
# The README's main job, after `make cluster-up`: the operator installed from the chart
# as users install it, running here as the chart's ServiceAccount (kwok has no
# kubelets, so the chart's own pod is a stand-in), a sample TTSService applied, and
# what resulted shown. Idempotent: re-running restarts the operator and re-applies.
#
#   hack/dev.sh [SAMPLE]      default samples/spot.yaml
#   hack/dev.sh down          stop the operator it started (`make dev-down`); the cluster
#                             and what the operator made stay (`make cluster-down` deletes them)
#
# Environment: TTSFLEET_CACHE (default ~/.cache/ttsfleet), TTSFLEET_CLUSTER_NAME,
# TTSFLEET_DEV_NAMESPACE (default ttsfleet-dev).
set -euo pipefail

HACK_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_ROOT="$(cd "${HACK_DIR}/.." && pwd)"
CACHE="${TTSFLEET_CACHE:-${HOME}/.cache/ttsfleet}"
MODE=up
if [[ "${1:-}" == down ]]; then MODE=down; shift; fi
SAMPLE="${1:-${REPO_ROOT}/samples/spot.yaml}"
NAMESPACE="${TTSFLEET_DEV_NAMESPACE:-ttsfleet-dev}"
SYSTEM_NAMESPACE=ttsfleet-system
RELEASE=ttsfleet
SERVICE_ACCOUNT=ttsfleet   # the chart's ServiceAccount: the release's full name
DEV_DIR="${CACHE}/dev"
PID_FILE="${DEV_DIR}/operator.pid"
LOG_FILE="${DEV_DIR}/operator.log"
SA_KUBECONFIG="${DEV_DIR}/operator.kubeconfig"

step() { printf '==> %s\n' "$*"; }
die() { printf 'hack/dev.sh: ERROR: %s\n' "$*" >&2; exit 1; }

# Stops the operator this script started (its pid file), waiting up to 10 s for it to exit.
# A pid file whose process is gone, or is no longer `ttsfleet operator run` (the pid was
# reused), is only removed.
stop_operator() {
  local pid
  pid="$(cat "${PID_FILE}" 2>/dev/null || true)"
  if [[ -n "${pid}" ]] && ps -o args= -p "${pid}" 2>/dev/null | grep -q 'operator run'; then
    step "stopping the dev operator (pid ${pid})"
    kill "${pid}"
    for _ in $(seq 50); do kill -0 "${pid}" 2>/dev/null || break; sleep 0.2; done
    ! kill -0 "${pid}" 2>/dev/null || die "the operator (pid ${pid}) did not exit"
  elif [[ "${MODE}" == down ]]; then
    step "no dev operator running"
  fi
  rm -f "${PID_FILE}"
}

if [[ "${MODE}" == down ]]; then
  stop_operator
  exit 0
fi

"${HACK_DIR}/cluster.sh" status >/dev/null 2>&1 || die "no cluster running: run 'make cluster-up' (or hack/cluster.sh up) first"
KUBECONFIG="$("${HACK_DIR}/cluster.sh" kubeconfig)"
export KUBECONFIG
BIN_DIR="$("${HACK_DIR}/build-control-plane.sh" --print-bin-dir)"
KUBECTL="${BIN_DIR}/kubectl"; [[ -x "${KUBECTL}" ]] || KUBECTL="$(command -v kubectl)" || die "no kubectl"
HELM="$(command -v helm || echo "${CACHE}/tools/bin/helm")"; [[ -x "${HELM}" ]] || die "no helm: run 'make tools'"
TTSFLEET="$(command -v ttsfleet || true)"; [[ -n "${TTSFLEET}" ]] || die "no ttsfleet command: run 'make venv' and put its bin on PATH"
SAMPLE_NAME="$(sed -n 's/^  name: *//p' "${SAMPLE}" | head -1)"
[[ -n "${SAMPLE_NAME}" ]] || die "no metadata.name in ${SAMPLE}"
kc() { "${KUBECTL}" "$@"; }
mkdir -p "${DEV_DIR}"

step "installing the chart charts/ttsfleet (helm upgrade --install ${RELEASE} -n ${SYSTEM_NAMESPACE})"
"${HELM}" upgrade --install "${RELEASE}" "${REPO_ROOT}/charts/ttsfleet" \
  --namespace "${SYSTEM_NAMESPACE}" --create-namespace --set resyncSeconds=10 >/dev/null

step "writing a kubeconfig for the chart's ServiceAccount ${SYSTEM_NAMESPACE}/${SERVICE_ACCOUNT} (its RBAC is all the operator gets)"
TOKEN="$(kc create token "${SERVICE_ACCOUNT}" -n "${SYSTEM_NAMESPACE}" --duration 24h)"
SERVER="$(kc config view --minify -o jsonpath='{.clusters[0].cluster.server}')"
CA_DATA="$(kc config view --minify --raw -o jsonpath='{.clusters[0].cluster.certificate-authority-data}')"
umask 077
cat >"${SA_KUBECONFIG}" <<KUBECONFIG
apiVersion: v1
kind: Config
clusters: [{name: dev, cluster: {server: "${SERVER}", certificate-authority-data: "${CA_DATA}"}}]
users: [{name: ${SERVICE_ACCOUNT}, user: {token: "${TOKEN}"}}]
contexts: [{name: operator, context: {cluster: dev, user: ${SERVICE_ACCOUNT}}}]
current-context: operator
KUBECONFIG
umask 022

stop_operator
step "starting the operator (log ${LOG_FILE})"
nohup "${TTSFLEET}" operator run --kubeconfig "${SA_KUBECONFIG}" --all-namespaces \
  --resync-seconds 10 --metrics-port 0 --liveness '' >>"${LOG_FILE}" 2>&1 </dev/null &
echo $! >"${PID_FILE}"
sleep 1
kill -0 "$(cat "${PID_FILE}")" 2>/dev/null || { tail -20 "${LOG_FILE}" >&2; die "the operator exited at once"; }

step "applying ${SAMPLE#"${REPO_ROOT}/"} in namespace ${NAMESPACE}"
kc create namespace "${NAMESPACE}" --dry-run=client -o yaml | kc apply -f - >/dev/null
kc apply -n "${NAMESPACE}" -f "${SAMPLE}"

step "waiting for TTSService ${SAMPLE_NAME} to be Ready"
if ! kc wait -n "${NAMESPACE}" "tts/${SAMPLE_NAME}" --for condition=Ready --timeout 120s >/dev/null; then
  tail -20 "${LOG_FILE}" >&2
  die "TTSService ${SAMPLE_NAME} not Ready in 120s (operator log: ${LOG_FILE})"
fi

step "what the operator made (kubectl get tts,deploy,svc,hpa,pdb,cm -n ${NAMESPACE} -o wide)"
kc get tts,deploy,svc,hpa,pdb,cm -n "${NAMESPACE}" -o wide
echo
step "pods and the nodes they run on"
kc get pods -n "${NAMESPACE}" -o custom-columns='POD:.metadata.name,POOL:.metadata.labels.ttsfleet\.io/pool,TRACK:.metadata.labels.ttsfleet\.io/track,NODE:.spec.nodeName,PHASE:.status.phase' --sort-by=.spec.nodeName
echo
kc get nodes -o custom-columns='NODE:.metadata.name,GPU:.metadata.labels.nvidia\.com/gpu\.product,CAPACITY:.metadata.labels.karpenter\.sh/capacity-type,ZONE:.metadata.labels.topology\.kubernetes\.io/zone' \
  | awk 'NR==1 || /gpu/'
echo
step "TTSService ${SAMPLE_NAME} status conditions"
kc get tts "${SAMPLE_NAME}" -n "${NAMESPACE}" \
  -o jsonpath='{range .status.conditions[*]}{.type}{"\t"}{.status}{"\t"}{.reason}{"\t"}{.message}{"\n"}{end}' | column -t -s $'\t'
echo
cat <<EOF
==> done. The operator runs in the background as ${SYSTEM_NAMESPACE}/${SERVICE_ACCOUNT} (pid $(cat "${PID_FILE}")).
    Try:                export KUBECONFIG=${KUBECONFIG}
                        kubectl scale tts/${SAMPLE_NAME} -n ${NAMESPACE} --replicas 9   (the pools follow)
    Operator log:       tail -f ${LOG_FILE}
    Stop the operator:  make dev-down   (before 'make e2e' on this cluster)
    Delete the cluster: make cluster-down
EOF
