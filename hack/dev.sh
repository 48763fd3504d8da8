#!/usr/bin/env bash
# The README's main job, after `make cluster-up`: the operator installed from the chart
# as users install it, a sample TTSService applied, and what resulted shown.
#
# A sample of gpu.class cpu (the default, samples/cpu-dev.yaml) runs for real on the
# local cluster's real node: the images are built here (hack/images.sh) and imported into
# its containerd, the operator runs as the chart's pod from its image, the runtime pods
# load a tiny random checkpoint from a volume on that node, and the script ends by
# speaking through the TTSService's Service. A GPU sample (SAMPLE=samples/spot.yaml)
# shows the fleet on the kwok fake GPU nodes, where nothing runs: the operator then runs
# here as a local process with the chart's ServiceAccount token.
# Idempotent: re-running rebuilds what changed, restarts the operator and re-applies.
#
#   hack/dev.sh [SAMPLE]            default samples/cpu-dev.yaml
#   hack/dev.sh speak [TEXT] [OUT]  speech from the dev fleet's pods through its Service,
#                                   written to OUT (default hello.wav)
#   hack/dev.sh down                stop the operator it started (`make dev-down`); the cluster
#                                   and what the operator made stay (`make cluster-down` deletes them)
#
# Environment: TTSFLEET_CACHE (default ~/.cache/ttsfleet), TTSFLEET_CLUSTER_NAME,
# TTSFLEET_DEV_NAMESPACE (default ttsfleet-dev).
set -euo pipefail

HACK_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_ROOT="$(cd "${HACK_DIR}/.." && pwd)"
CACHE="${TTSFLEET_CACHE:-${HOME}/.cache/ttsfleet}"
MODE=up
case "${1:-}" in
  down|speak) MODE="$1"; shift ;;
esac
NAMESPACE="${TTSFLEET_DEV_NAMESPACE:-ttsfleet-dev}"
SYSTEM_NAMESPACE=ttsfleet-system
RELEASE=ttsfleet
SERVICE_ACCOUNT=ttsfleet   # the chart's ServiceAccount: the release's full name
DEV_DIR="${CACHE}/dev"
PID_FILE="${DEV_DIR}/operator.pid"
LOG_FILE="${DEV_DIR}/operator.log"
SA_KUBECONFIG="${DEV_DIR}/operator.kubeconfig"
# The TTSService `speak` talks to: the last one this script applied.
SERVICE_FILE="${DEV_DIR}/service"
# Present while the chart's operator pod runs on the real node (make dev-down removes it).
POD_OPERATOR_FILE="${DEV_DIR}/operator.pod"
CPU_SERVING_KEY=ttsfleet.io/cpu-serving
CHECKPOINT_DIR="${DEV_DIR}/checkpoints"
CHECKPOINT_NAME=tiny-customvoice

step() { printf '==> %s\n' "$*"; }
die() { printf 'hack/dev.sh: ERROR: %s\n' "$*" >&2; exit 1; }

# Stops the operator this script started as a local process (its pid file), waiting up to
# 10 s for it to exit. A pid file whose process is gone, or is no longer
# `ttsfleet operator run` (the pid was reused), is only removed.
stop_operator() {
  local pid
  pid="$(cat "${PID_FILE}" 2>/dev/null || true)"
  if [[ -n "${pid}" ]] && ps -o args= -p "${pid}" 2>/dev/null | grep -q 'operator run'; then
    step "stopping the dev operator (pid ${pid})"
    kill "${pid}"
    for _ in $(seq 50); do kill -0 "${pid}" 2>/dev/null || break; sleep 0.2; done
    ! kill -0 "${pid}" 2>/dev/null || die "the operator (pid ${pid}) did not exit"
  elif [[ "${MODE}" == down && ! -f "${POD_OPERATOR_FILE}" ]]; then
    step "no dev operator running"
  fi
  rm -f "${PID_FILE}"
}

# Removes the chart's operator pod `make dev` runs on the real node: the release goes; the
# CRDs, and the TTSServices with what the operator made of them, stay.
stop_pod_operator() {
  [[ -f "${POD_OPERATOR_FILE}" ]] || return 0
  step "removing the dev operator pod (helm uninstall ${RELEASE} -n ${SYSTEM_NAMESPACE})"
  "${HELM}" uninstall "${RELEASE}" -n "${SYSTEM_NAMESPACE}" --wait >/dev/null 2>&1 || true
  rm -f "${POD_OPERATOR_FILE}"
}

HELM="$(command -v helm || echo "${CACHE}/tools/bin/helm")"
if [[ "${MODE}" == down ]]; then
  stop_operator
  if [[ -f "${POD_OPERATOR_FILE}" ]]; then
    KUBECONFIG="$("${HACK_DIR}/cluster.sh" kubeconfig)"
    export KUBECONFIG
    stop_pod_operator
  fi
  exit 0
fi

"${HACK_DIR}/cluster.sh" status >/dev/null 2>&1 || die "no cluster running: run 'make cluster-up' (or hack/cluster.sh up) first"
KUBECONFIG="$("${HACK_DIR}/cluster.sh" kubeconfig)"
export KUBECONFIG
BIN_DIR="$("${HACK_DIR}/build-control-plane.sh" --print-bin-dir)"
KUBECTL="${BIN_DIR}/kubectl"; [[ -x "${KUBECTL}" ]] || KUBECTL="$(command -v kubectl)" || die "no kubectl"
[[ -x "${HELM}" ]] || die "no helm: run 'make tools'"
kc() { "${KUBECTL}" "$@"; }
mkdir -p "${DEV_DIR}"

# Speech from the dev fleet: through its Service's ClusterIP (kube-proxy routes this host's
# connection to a ready pod), with an API key from the Secret the operator made.
speak() {
  local text="${1:-Hello from the fleet.}" out="${2:-hello.wav}" name ip port key model body
  name="$(cat "${SERVICE_FILE}" 2>/dev/null)" || die "no dev fleet: run 'make dev' first"
  ip="$(kc get svc "${name}" -n "${NAMESPACE}" -o jsonpath='{.spec.clusterIP}')"
  port="$(kc get svc "${name}" -n "${NAMESPACE}" -o jsonpath='{.spec.ports[0].port}')"
  # The Secret's lines are `KEY` or `TENANT: KEY` (the operator writes `default: KEY`).
  key="$(kc get secret "${name}-api-keys" -n "${NAMESPACE}" -o jsonpath='{.data.keys}' | base64 -d \
    | awk 'NF && $1 !~ /^#/ {print $NF; exit}')"
  model="$(curl -sf --max-time 30 -H "Authorization: Bearer ${key}" "http://${ip}:${port}/v1/models" \
    | sed -n 's/.*"id":"\([^"]*\)".*/\1/p' | head -1)"
  [[ -n "${model}" ]] || die "no model from http://${ip}:${port}/v1/models (kubectl get pods -n ${NAMESPACE})"
  body="$(TEXT="${text}" MODEL="${model}" "${PYTHON}" -c 'import json, os
print(json.dumps({"model": os.environ["MODEL"], "voice": "vivian", "input": os.environ["TEXT"], "response_format": "wav"}))')"
  step "speaking through Service ${NAMESPACE}/${name} (http://${ip}:${port}, model ${model}) into ${out}"
  curl -sf --max-time 300 -o "${out}" "http://${ip}:${port}/v1/audio/speech" \
    -H "Authorization: Bearer ${key}" -H 'Content-Type: application/json' -d "${body}" \
    || die "the speech request failed"
  step "wrote ${out} ($(stat -c %s "${out}") bytes)"
}

TTSFLEET="$(command -v ttsfleet || true)"; [[ -n "${TTSFLEET}" ]] || die "no ttsfleet command: run 'make venv' and put its bin on PATH"
PYTHON="$(dirname "${TTSFLEET}")/python"
if [[ "${MODE}" == speak ]]; then
  speak "$@"
  exit 0
fi

SAMPLE="${1:-${REPO_ROOT}/samples/cpu-dev.yaml}"
SAMPLE_NAME="$(sed -n 's/^  name: *//p' "${SAMPLE}" | head -1)"
[[ -n "${SAMPLE_NAME}" ]] || die "no metadata.name in ${SAMPLE}"
ON_REAL_NODE=0
grep -Eq '^    class: *cpu *$' "${SAMPLE}" && ON_REAL_NODE=1

if [[ "${ON_REAL_NODE}" == 1 ]]; then
  NODE="$(kc get nodes -l "${CPU_SERVING_KEY}=true" -o jsonpath='{.items[0].metadata.name}')"
  [[ -n "${NODE}" ]] \
    || die "${SAMPLE#"${REPO_ROOT}/"} serves on a node labelled ${CPU_SERVING_KEY}=true and the cluster has none (hack/cluster.sh up starts the real node unless TTSFLEET_REAL_NODE=0)"
  declare -A IMAGE
  for image in operator runtime; do
    step "the ${image} image (hack/images.sh builds it only when its inputs changed)"
    archive="$("${HACK_DIR}/images.sh" archive "${image}")"
    "${HACK_DIR}/cluster.sh" load-image "${archive}"
    IMAGE[${image}]="$("${HACK_DIR}/images.sh" ref "${image}")"
  done

  stop_operator
  step "installing the chart charts/ttsfleet (helm upgrade --install ${RELEASE} -n ${SYSTEM_NAMESPACE}): the operator pod from ${IMAGE[operator]} on ${NODE}"
  "${HELM}" upgrade --install "${RELEASE}" "${REPO_ROOT}/charts/ttsfleet" \
    --namespace "${SYSTEM_NAMESPACE}" --create-namespace --set resyncSeconds=10 \
    --set image.repository="${IMAGE[operator]%:*}" --set image.tag="${IMAGE[operator]##*:}" \
    --set image.pullPolicy=Never \
    --set-string "nodeSelector.${CPU_SERVING_KEY//./\\.}=true" \
    --set "tolerations[0].key=${CPU_SERVING_KEY}" --set "tolerations[0].operator=Exists" \
    --set "tolerations[0].effect=NoSchedule" --wait --timeout 5m >/dev/null \
    || die "the operator pod did not become ready: kubectl logs -n ${SYSTEM_NAMESPACE} deploy/${RELEASE}"
  touch "${POD_OPERATOR_FILE}"

  step "a tiny random checkpoint on ${NODE}'s disk (${CHECKPOINT_DIR}/${CHECKPOINT_NAME}), a volume the sample's claim binds"
  if [[ ! -f "${CHECKPOINT_DIR}/.${CHECKPOINT_NAME}.written" ]]; then
    "$(dirname "${TTSFLEET}")/ttsfleet-runtime" checkpoint --random --size tiny --variant CustomVoice \
      --seed 0 --out "${CHECKPOINT_DIR}/${CHECKPOINT_NAME}" >/dev/null
    touch "${CHECKPOINT_DIR}/.${CHECKPOINT_NAME}.written"
  fi
  chmod -R a+rX "${CHECKPOINT_DIR}"
  kc create namespace "${NAMESPACE}" --dry-run=client -o yaml | kc apply -f - >/dev/null
  CLAIM="$(sed -n 's/^ *claimName: *//p' "${SAMPLE}" | head -1)"
  kc apply -f - >/dev/null <<VOLUME
apiVersion: v1
kind: PersistentVolume
metadata: {name: ${NAMESPACE}-${CLAIM}}
spec:
  capacity: {storage: 1Gi}
  accessModes: [ReadOnlyMany]
  persistentVolumeReclaimPolicy: Retain
  storageClassName: ""
  claimRef: {namespace: ${NAMESPACE}, name: ${CLAIM}}
  hostPath: {path: ${CHECKPOINT_DIR}, type: Directory}
  nodeAffinity:
    required:
      nodeSelectorTerms:
      - matchExpressions: [{key: kubernetes.io/hostname, operator: In, values: [${NODE}]}]
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: ${CLAIM}, namespace: ${NAMESPACE}}
spec:
  accessModes: [ReadOnlyMany]
  storageClassName: ""
  volumeName: ${NAMESPACE}-${CLAIM}
  resources: {requests: {storage: 1Gi}}
VOLUME

  step "applying ${SAMPLE#"${REPO_ROOT}/"} in namespace ${NAMESPACE} with runtime.image ${IMAGE[runtime]}"
  "${PYTHON}" -c 'import sys, yaml
service = yaml.safe_load(open(sys.argv[1]))
runtime = service["spec"].setdefault("runtime", {})
runtime["image"], runtime["imagePullPolicy"] = sys.argv[2], "Never"
print(yaml.safe_dump(service))' "${SAMPLE}" "${IMAGE[runtime]}" | kc apply -n "${NAMESPACE}" -f -
  READY_TIMEOUT=600s
else
  stop_pod_operator
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
  step "starting the operator here as the chart's ServiceAccount (kwok's nodes run no pod; log ${LOG_FILE})"
  nohup "${TTSFLEET}" operator run --kubeconfig "${SA_KUBECONFIG}" --all-namespaces \
    --resync-seconds 10 --metrics-port 0 --liveness '' >>"${LOG_FILE}" 2>&1 </dev/null &
  echo $! >"${PID_FILE}"
  sleep 1
  kill -0 "$(cat "${PID_FILE}")" 2>/dev/null || { tail -20 "${LOG_FILE}" >&2; die "the operator exited at once"; }

  step "applying ${SAMPLE#"${REPO_ROOT}/"} in namespace ${NAMESPACE}"
  kc create namespace "${NAMESPACE}" --dry-run=client -o yaml | kc apply -f - >/dev/null
  kc apply -n "${NAMESPACE}" -f "${SAMPLE}"
  READY_TIMEOUT=120s
fi
echo "${SAMPLE_NAME}" >"${SERVICE_FILE}"

step "waiting for TTSService ${SAMPLE_NAME} to be Ready (at most ${READY_TIMEOUT})"
if ! kc wait -n "${NAMESPACE}" "tts/${SAMPLE_NAME}" --for condition=Ready --timeout "${READY_TIMEOUT}" >/dev/null; then
  kc get pods -n "${NAMESPACE}" -o wide >&2 || true
  if [[ "${ON_REAL_NODE}" == 1 ]]; then
    kc logs -n "${SYSTEM_NAMESPACE}" "deploy/${RELEASE}" --tail 20 >&2 || true
  else
    tail -20 "${LOG_FILE}" >&2
  fi
  die "TTSService ${SAMPLE_NAME} not Ready in ${READY_TIMEOUT}"
fi

step "what the operator made (kubectl get tts,deploy,svc,hpa,pdb,cm -n ${NAMESPACE} -o wide)"
kc get tts,deploy,svc,hpa,pdb,cm -n "${NAMESPACE}" -o wide
echo
step "pods and the nodes they run on"
kc get pods -n "${NAMESPACE}" -o custom-columns='POD:.metadata.name,POOL:.metadata.labels.ttsfleet\.io/pool,TRACK:.metadata.labels.ttsfleet\.io/track,NODE:.spec.nodeName,PHASE:.status.phase,IP:.status.podIP' --sort-by=.spec.nodeName
echo
kc get nodes -o custom-columns='NODE:.metadata.name,GPU:.metadata.labels.nvidia\.com/gpu\.product,CPU-SERVING:.metadata.labels.ttsfleet\.io/cpu-serving,CAPACITY:.metadata.labels.karpenter\.sh/capacity-type,ZONE:.metadata.labels.topology\.kubernetes\.io/zone'
echo
step "TTSService ${SAMPLE_NAME} status conditions"
kc get tts "${SAMPLE_NAME}" -n "${NAMESPACE}" \
  -o jsonpath='{range .status.conditions[*]}{.type}{"\t"}{.status}{"\t"}{.reason}{"\t"}{.message}{"\n"}{end}' | column -t -s $'\t'
echo
if [[ "${ON_REAL_NODE}" == 1 ]]; then
  speak "Hello from a real pod of the fleet." "${DEV_DIR}/hello.wav"
  cat <<DONE
==> done. The operator runs as the pod of chart release ${SYSTEM_NAMESPACE}/${RELEASE}; the runtime pods serve on ${NODE}.
    Speak again:        hack/dev.sh speak "Any text." out.wav
    Try:                export KUBECONFIG=${KUBECONFIG}
                        kubectl logs -n ${NAMESPACE} -l ttsfleet.io/service=${SAMPLE_NAME} --tail 5
    Operator log:       kubectl logs -n ${SYSTEM_NAMESPACE} deploy/${RELEASE} -f
    Stop the operator:  make dev-down   (before 'make e2e' on this cluster)
    Delete the cluster: make cluster-down
DONE
else
  cat <<DONE
==> done. The operator runs in the background as ${SYSTEM_NAMESPACE}/${SERVICE_ACCOUNT} (pid $(cat "${PID_FILE}")).
    Try:                export KUBECONFIG=${KUBECONFIG}
                        kubectl scale tts/${SAMPLE_NAME} -n ${NAMESPACE} --replicas 9   (the pools follow)
    Operator log:       tail -f ${LOG_FILE}
    Stop the operator:  make dev-down   (before 'make e2e' on this cluster)
    Delete the cluster: make cluster-down
DONE
fi
