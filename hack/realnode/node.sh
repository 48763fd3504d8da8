# The real node of the local kwok cluster: containerd + runc + CNI bridge, kubelet and
# kube-proxy (both from the Kubernetes module of hack/versions.env) on this host, next to
# kwok's fake GPU nodes. Sourced by hack/cluster.sh, which provides CACHE, NAME, CLUSTER_DIR,
# BIN_DIR, KUBECONFIG_OUT, KWOK_WORKDIR, KUBE_VERSION and log/die/kc.
#
# Every host change is listed here and undone by realnode_down:
#   bridge   ${REALNODE_BRIDGE} with ${REALNODE_IP}/24 (the node address and the pods' gateway),
#            a route for the Service range through it, the pods' veths on it
#   iptables kube-proxy's KUBE-* chains (iptables and ip6tables), the CNI portmap's CNI-*
#            chains, our TTSFLEET-* guard chains (see realnode_guard)
#   sysctls  REALNODE_SYSCTLS, recorded before the first change and restored after
#   cgroups  kubepods/ trees in every cgroup hierarchy
#   mounts   under the node's directories (volumes, rootfs, netns, shm)
#   files    /var/lib/cni (CNI's result cache), /var/log/containers (kubelet's log links)
#            where they did not exist before
#   processes containerd and its shims, kubelet, kube-proxy
# Directories: ${REALNODE_DIR} (configs, pki, kubelet root, logs; removed by down),
# ${REALNODE_HOST_DIR} (containerd state, the host record; removed by down),
# ${REALNODE_IMAGE_STORE} (containerd's root: the imported images, kept unless --purge).

REALNODE_NAME=ttsfleet-real-0
# The label and the taint that keep every other pod off this node (one key for both): the
# operator's CPU serving key (operator/ttsfleet_operator/gpu_classes.py CPU_SERVING_KEY), so
# TTSServices of gpu.class cpu land here.
REALNODE_KEY=ttsfleet.io/cpu-serving
REALNODE_BRIDGE=ttsfleet0
REALNODE_IP=10.244.0.1
# Apart from kwok's fake pod IPs (10.0.0.0/24) and the Service range (10.96.0.0/16).
REALNODE_POD_CIDR=10.244.0.0/24
# One real node per host: its bridge, ports and iptables chains are host-wide.
REALNODE_HOST_DIR=/run/ttsfleet-realnode
REALNODE_DIR="${CLUSTER_DIR}/node"
REALNODE_IMAGE_STORE="${CACHE}/realnode/containerd"
REALNODE_CONTAINERD_SOCK="${REALNODE_HOST_DIR}/containerd/containerd.sock"
REALNODE_PAUSE_IMAGE="localhost/ttsfleet/pause:${KUBE_VERSION}"
REALNODE_CNI_BIN_DIR=/usr/lib/cni
REALNODE_TEMPLATES="${HACK_DIR}/realnode"
# kubelet sets the first six (its kernel tunables), the CNI bridge ip_forward; we set the
# bridge-nf ones (Service traffic between pods of one bridge must pass iptables); the
# conntrack ones are what kube-proxy would set if its config let it.
REALNODE_SYSCTLS=(
  vm/overcommit_memory vm/panic_on_oom kernel/panic kernel/panic_on_oops
  kernel/keys/root_maxkeys kernel/keys/root_maxbytes
  net/ipv4/ip_forward net/ipv6/conf/all/forwarding net/ipv4/conf/all/route_localnet
  net/bridge/bridge-nf-call-iptables net/bridge/bridge-nf-call-ip6tables
  net/netfilter/nf_conntrack_max net/netfilter/nf_conntrack_tcp_timeout_established
  net/netfilter/nf_conntrack_tcp_timeout_close_wait net/netfilter/nf_conntrack_tcp_be_liberal
)
# Host paths that kubelet and CNI create outside the directories we give them.
REALNODE_HOST_PATHS=(/var/lib/cni /var/log/containers /var/log/pods)

# The Service range, from the one place it is set (the API server's flag in kwokctl.yaml).
realnode_service_cidr() {
  awk '/key: service-cluster-ip-range/ {getline; print $2}' "${REPO_ROOT}/e2e/cluster/kwokctl.yaml"
}

ctr_k8s() { ctr --address "${REALNODE_CONTAINERD_SOCK}" --namespace k8s.io "$@"; }

# ---------------------------------------------------------------------------
# Processes: pid files under REALNODE_DIR, each checked against its command line
# ---------------------------------------------------------------------------
realnode_pid() { # component -> pid if it runs (and is ours), else nothing
  local f="${REALNODE_DIR}/$1.pid" pid
  [[ -f "${f}" ]] || return 0
  pid="$(cat "${f}")"
  if [[ -r "/proc/${pid}/cmdline" ]] && tr '\0' ' ' <"/proc/${pid}/cmdline" | grep -q -- "${REALNODE_DIR}/$1"; then
    echo "${pid}"
  fi
}

realnode_start() { # component cmd... ; its log in logs/<component>.log
  local name="$1"
  shift
  mkdir -p "${REALNODE_DIR}/logs"
  # Its own session: not part of the caller's process group (a test runner's, a terminal's).
  # The lock fds of cluster.sh (8) and build-control-plane.sh (9) must not be inherited.
  env PATH="/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" \
    setsid "$@" >>"${REALNODE_DIR}/logs/${name}.log" 2>&1 </dev/null 8>&- 9>&- &
  echo $! >"${REALNODE_DIR}/${name}.pid"
}

realnode_stop() { # component [grace seconds]
  local name="$1" grace="${2:-15}" pid
  pid="$(realnode_pid "${name}")"
  rm -f "${REALNODE_DIR}/${name}.pid" "${REALNODE_DIR}/${name}.stamp"
  [[ -n "${pid}" ]] || return 0
  # Its whole process group (setsid made it the leader): the forwarder's per-connection
  # children too. containerd's shims have groups of their own and outlive it by design.
  kill -- "-${pid}" 2>/dev/null || kill "${pid}" 2>/dev/null || true
  local deadline=$(( $(date +%s) + grace ))
  while [[ -d "/proc/${pid}" ]] && (( $(date +%s) < deadline )); do sleep 0.2; done
  if [[ -d "/proc/${pid}" ]]; then
    log "${name} (pid ${pid}) ignored SIGTERM for ${grace}s; killing it"
    kill -9 -- "-${pid}" 2>/dev/null || kill -9 "${pid}" 2>/dev/null || true
  fi
}

# (Re)start a component when it is not running or its inputs changed; the stamp is the
# hash of its command line and the files it reads.
realnode_ensure() { # component "files..." cmd...
  local name="$1" files="$2" want
  shift 2
  # shellcheck disable=SC2086
  want="$( { printf '%s\n' "$@"; cat ${files} </dev/null; } | sha256sum | cut -c1-16)"
  if [[ -n "$(realnode_pid "${name}")" && "$(cat "${REALNODE_DIR}/${name}.stamp" 2>/dev/null)" == "${want}" ]]; then
    return 0
  fi
  if [[ -n "$(realnode_pid "${name}")" ]]; then
    log "restarting ${name}: its configuration changed"
    realnode_stop "${name}"
  fi
  realnode_start "${name}" "$@"
  echo "${want}" >"${REALNODE_DIR}/${name}.stamp"
  log "started ${name} (pid $(cat "${REALNODE_DIR}/${name}.pid"), log ${REALNODE_DIR}/logs/${name}.log)"
}

# ---------------------------------------------------------------------------
# Host record: what was there before the first change, for realnode_down to restore
# ---------------------------------------------------------------------------
realnode_claim_host() {
  mkdir -p "${REALNODE_HOST_DIR}"
  local owner="${REALNODE_HOST_DIR}/owner"
  if [[ -f "${owner}" && "$(cat "${owner}")" != "${REALNODE_DIR}" ]]; then
    die "step 'real node': this host already runs the real node of $(cat "${owner}"); one per host (its bridge, ports and iptables chains are host-wide). Bring that cluster down, or set TTSFLEET_REAL_NODE=0"
  fi
  echo "${REALNODE_DIR}" >"${owner}"
  local record="${REALNODE_HOST_DIR}/host-before"
  [[ -f "${record}" ]] && return 0
  local key p
  {
    for key in "${REALNODE_SYSCTLS[@]}"; do
      if [[ -r "/proc/sys/${key}" ]]; then
        printf 'sysctl %s %s\n' "${key}" "$(tr '\t' ' ' <"/proc/sys/${key}")"
      fi
    done
    for p in "${REALNODE_HOST_PATHS[@]}"; do
      if [[ -e "${p}" ]]; then printf 'existed %s\n' "${p}"; fi
    done
  } >"${record}.tmp"
  mv -f "${record}.tmp" "${record}"
}

realnode_restore_host() {
  local record="${REALNODE_HOST_DIR}/host-before" kind key value p
  [[ -f "${record}" ]] || return 0
  while read -r kind key value; do
    [[ "${kind}" == sysctl ]] || continue
    if [[ "$(tr '\t' ' ' <"/proc/sys/${key}")" != "${value}" ]]; then
      echo "${value}" >"/proc/sys/${key}" 2>/dev/null || log "could not restore sysctl ${key}=${value}"
    fi
  done <"${record}"
  for p in "${REALNODE_HOST_PATHS[@]}"; do
    grep -qx "existed ${p}" "${record}" || rm -rf "${p:?}"
  done
}

realnode_sysctl() { # key value
  echo "$2" >"/proc/sys/$1" || die "step 'real node network': could not set sysctl $1=$2"
}

# ---------------------------------------------------------------------------
# Network: the bridge, the Service route, the guard chains
# ---------------------------------------------------------------------------
realnode_network_up() {
  if ! ip link show "${REALNODE_BRIDGE}" >/dev/null 2>&1; then
    ip link add "${REALNODE_BRIDGE}" type bridge || die "step 'real node network': ip link add ${REALNODE_BRIDGE} type bridge failed"
  fi
  ip addr replace "${REALNODE_IP}/24" dev "${REALNODE_BRIDGE}"
  ip link set "${REALNODE_BRIDGE}" up
  # ClusterIPs route through our bridge, not the default route: a Service without a
  # kube-proxy rule (yet) goes nowhere rather than out of a host interface.
  ip route replace "$(realnode_service_cidr)" dev "${REALNODE_BRIDGE}" src "${REALNODE_IP}"
  realnode_sysctl net/bridge/bridge-nf-call-iptables 1
  realnode_sysctl net/ipv4/ip_forward 1
  realnode_guard
}

# Test traffic stays on this host: pods may reach each other and the host, nothing beyond;
# and a Service that kube-proxy sends anywhere but a pod on our bridge (say, to a kwok fake
# pod's 10.0.0.x) is refused rather than sent out of a host interface.
realnode_guard() {
  local t
  for t in iptables; do
    "${t}" -w -N TTSFLEET-RN-FORWARD 2>/dev/null || "${t}" -w -F TTSFLEET-RN-FORWARD
    "${t}" -w -A TTSFLEET-RN-FORWARD -i "${REALNODE_BRIDGE}" ! -o "${REALNODE_BRIDGE}" -j REJECT
    "${t}" -w -A TTSFLEET-RN-FORWARD -m conntrack --ctstate DNAT --ctorigdst "$(realnode_service_cidr)" \
      ! -o "${REALNODE_BRIDGE}" -j REJECT
    "${t}" -w -C FORWARD -j TTSFLEET-RN-FORWARD 2>/dev/null || "${t}" -w -I FORWARD 1 -j TTSFLEET-RN-FORWARD
    "${t}" -w -N TTSFLEET-RN-OUTPUT 2>/dev/null || "${t}" -w -F TTSFLEET-RN-OUTPUT
    "${t}" -w -A TTSFLEET-RN-OUTPUT -m conntrack --ctstate DNAT --ctorigdst "$(realnode_service_cidr)" \
      ! -o "${REALNODE_BRIDGE}" -j REJECT
    "${t}" -w -C OUTPUT -j TTSFLEET-RN-OUTPUT 2>/dev/null || "${t}" -w -I OUTPUT 1 -j TTSFLEET-RN-OUTPUT
  done
}

# Delete every chain of a table whose name matches a pattern, and the rules jumping to it.
realnode_delete_chains() { # iptables|ip6tables table regex
  local t="$1" table="$2" re="$3" rule chain
  command -v "${t}-save" >/dev/null 2>&1 || return 0
  # iptables-save quotes comments the way a shell does: eval splits each rule back right.
  { "${t}-save" -t "${table}" 2>/dev/null || true; } | { grep -E -- "^-A .* -j (${re})( |\$)" || true; } \
    | while read -r rule; do
        eval "\"\${t}\" -w -t \"\${table}\" -D ${rule#-A }" 2>/dev/null || true
      done
  for chain in $("${t}-save" -t "${table}" 2>/dev/null | sed -n 's/^:\([^ ]*\) .*/\1/p' | grep -E -- "^(${re})\$"); do
    "${t}" -w -t "${table}" -F "${chain}" 2>/dev/null || true
  done
  for chain in $("${t}-save" -t "${table}" 2>/dev/null | sed -n 's/^:\([^ ]*\) .*/\1/p' | grep -E -- "^(${re})\$"); do
    "${t}" -w -t "${table}" -X "${chain}" 2>/dev/null || true
  done
}

realnode_network_down() {
  # kube-proxy's own cleanup knows its chains in both families (and ipvs/nftables state).
  if [[ -x "${BIN_DIR}/kube-proxy" ]]; then
    "${BIN_DIR}/kube-proxy" --cleanup >>"${REALNODE_HOST_DIR}/cleanup.log" 2>&1 \
      || log "kube-proxy --cleanup failed; deleting KUBE-* chains by hand"
  fi
  local t table
  for t in iptables ip6tables; do
    for table in filter nat mangle; do
      realnode_delete_chains "${t}" "${table}" 'KUBE-[A-Z0-9-]+|CNI-[A-Za-z0-9-]+|TTSFLEET-RN-[A-Z]+'
    done
  done
  ip route del "$(realnode_service_cidr)" dev "${REALNODE_BRIDGE}" 2>/dev/null || true
  # The pods' veths went with their network namespaces; the bridge goes now.
  ip link del "${REALNODE_BRIDGE}" 2>/dev/null || true
}

# ---------------------------------------------------------------------------
# Images: the sandbox image, and load-image
# ---------------------------------------------------------------------------
# The image's manifest digest named in an OCI archive's index.json (ref name -> digest).
realnode_archive_refs() { # archive -> lines "name digest"
  # Members are named index.json or ./index.json, as the tool that wrote it chose.
  { tar -xOf "$1" index.json 2>/dev/null || tar -xOf "$1" ./index.json 2>/dev/null; } | python3 -c '
import json, sys
for m in json.load(sys.stdin).get("manifests", []):
    a = m.get("annotations", {})
    name = a.get("io.containerd.image.name") or a.get("org.opencontainers.image.ref.name")
    if name:
        print(name, m["digest"])
'
}

realnode_image_digest() { # name -> digest of the image containerd holds, or nothing
  ctr_k8s images ls "name==$1" 2>/dev/null | awk 'NR > 1 {print $3}'
}

# Import an OCI archive unless containerd already holds its images at the same digests.
# The archive is only read in full when something is missing; a per-archive stamp (size,
# mtime, refs) spares even reading its index on a warm run.
realnode_load_image() { # archive
  local archive="$1" stamp refs name digest missing=0
  [[ -f "${archive}" ]] || die "load-image: no such file: ${archive}"
  archive="$(realpath "${archive}")"
  [[ -S "${REALNODE_CONTAINERD_SOCK}" ]] || die "load-image: the real node's containerd is not running (hack/cluster.sh up)"
  mkdir -p "${REALNODE_IMAGE_STORE}/imported"
  stamp="${REALNODE_IMAGE_STORE}/imported/$(sha256sum <<<"${archive}" | cut -c1-16)"
  if [[ -f "${stamp}" && "$(head -1 "${stamp}")" == "$(stat -c '%s %Y' "${archive}")" ]]; then
    refs="$(tail -n +2 "${stamp}")"
  else
    refs="$(realnode_archive_refs "${archive}")"
  fi
  [[ -n "${refs}" ]] || die "load-image: ${archive} names no image (its index.json has no ref name annotation)"
  while read -r name digest; do
    [[ "$(realnode_image_digest "${name}")" == "${digest}" ]] || missing=1
  done <<<"${refs}"
  if (( missing == 0 )); then
    log "load-image: already there: $(awk '{print $1}' <<<"${refs}" | tr '\n' ' ')"
  else
    log "load-image: importing ${archive} ($(du -h "${archive}" | cut -f1))"
    ctr_k8s images import "${archive}" >&2 || die "load-image: ctr images import ${archive} failed"
    while read -r name digest; do
      [[ "$(realnode_image_digest "${name}")" == "${digest}" ]] \
        || die "load-image: after the import, containerd has no ${name} at ${digest}"
    done <<<"${refs}"
    log "load-image: imported $(awk '{print $1}' <<<"${refs}" | tr '\n' ' ')"
  fi
  { stat -c '%s %Y' "${archive}"; echo "${refs}"; } >"${stamp}"
}

# The pod sandbox image, built from pause.c in the Kubernetes module (what the release's
# registry.k8s.io/pause is built from), with gcc -static.
realnode_pause_image() {
  local src="${CACHE}/go/mod/k8s.io/kubernetes@${KUBE_VERSION}/build/pause/linux/pause.c"
  local dir="${CACHE}/realnode/images" archive
  archive="${dir}/pause-${KUBE_VERSION}.tar"
  if [[ ! -f "${archive}" ]]; then
    [[ -f "${src}" ]] || die "step 'pause image': ${src} missing (hack/build-control-plane.sh downloads the module)"
    mkdir -p "${dir}"
    gcc -Os -Wall -Werror -static -DVERSION="${KUBE_VERSION}-ttsfleet" -o "${dir}/pause" "${src}" \
      || die "step 'pause image': gcc -static pause.c failed"
    python3 "${REALNODE_TEMPLATES}/oci-image.py" --name "${REALNODE_PAUSE_IMAGE}" --out "${archive}" \
      --file "${dir}/pause:/pause" --entrypoint /pause >/dev/null \
      || die "step 'pause image': hack/realnode/oci-image.py failed"
  fi
  realnode_load_image "${archive}"
}

# ---------------------------------------------------------------------------
# Credentials: client certificates signed by the kwok cluster's CA
# ---------------------------------------------------------------------------
realnode_kubeconfig() { # out user-CN group
  local out="$1" cn="$2" group="$3" ca_dir="${KWOK_WORKDIR}/clusters/${NAME}/pki" server
  local key="${out%.kubeconfig}.key" crt="${out%.kubeconfig}.crt"
  [[ -f "${ca_dir}/ca.crt" && -f "${ca_dir}/ca.key" ]] || die "step 'real node credentials': no CA in ${ca_dir}"
  server="$(kc config view --minify -o jsonpath='{.clusters[0].cluster.server}')"
  openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout "${key}" \
      -subj "/O=${group}/CN=${cn}" 2>/dev/null \
    | openssl x509 -req -CA "${ca_dir}/ca.crt" -CAkey "${ca_dir}/ca.key" -set_serial "0x$(openssl rand -hex 8)" \
      -days 30 -extfile <(printf 'keyUsage=critical,digitalSignature\nextendedKeyUsage=clientAuth\n') \
      -out "${crt}" 2>/dev/null \
    || die "step 'real node credentials': signing ${cn} failed"
  local kubectl
  kubectl="$(kubectl_bin)"
  rm -f "${out}"
  "${kubectl}" config --kubeconfig "${out}" set-cluster local --server "${server}" \
    --certificate-authority "${ca_dir}/ca.crt" --embed-certs >/dev/null
  "${kubectl}" config --kubeconfig "${out}" set-credentials node --client-certificate "${crt}" \
    --client-key "${key}" --embed-certs >/dev/null
  "${kubectl}" config --kubeconfig "${out}" set-context local --cluster local --user node >/dev/null
  "${kubectl}" config --kubeconfig "${out}" use-context local >/dev/null
  chmod 600 "${out}" "${key}"
}

realnode_credentials() {
  local pki="${REALNODE_DIR}/pki" ca="${KWOK_WORKDIR}/clusters/${NAME}/pki/ca.crt"
  mkdir -p "${pki}"
  # New cluster, new CA: sign again.
  if ! cmp -s "${ca}" "${pki}/ca.crt" 2>/dev/null || [[ ! -f "${pki}/kube-proxy.kubeconfig" ]]; then
    realnode_kubeconfig "${pki}/kubelet.kubeconfig" "system:node:${REALNODE_NAME}" system:nodes
    # system:kube-proxy is bound to the system:node-proxier ClusterRole by default.
    realnode_kubeconfig "${pki}/kube-proxy.kubeconfig" system:kube-proxy system:node-proxier
    cp -f "${ca}" "${pki}/ca.crt"
  fi
}

# ---------------------------------------------------------------------------
# up / down / status
# ---------------------------------------------------------------------------
realnode_render() { # template out
  sed -e "s|@CONTAINERD_ROOT@|${REALNODE_IMAGE_STORE}|g" \
      -e "s|@CONTAINERD_STATE@|${REALNODE_HOST_DIR}/containerd|g" \
      -e "s|@CONTAINERD_SOCK@|${REALNODE_CONTAINERD_SOCK}|g" \
      -e "s|@PAUSE_IMAGE@|${REALNODE_PAUSE_IMAGE}|g" \
      -e "s|@RUNC@|$(command -v runc)|g" \
      -e "s|@CNI_BIN_DIR@|${REALNODE_CNI_BIN_DIR}|g" \
      -e "s|@CNI_CONF_DIR@|${REALNODE_DIR}/cni|g" \
      -e "s|@IPAM_DIR@|${REALNODE_HOST_DIR}/ipam|g" \
      -e "s|@BRIDGE@|${REALNODE_BRIDGE}|g" \
      -e "s|@POD_CIDR@|${REALNODE_POD_CIDR}|g" \
      -e "s|@NODE_IP@|${REALNODE_IP}|g" \
      -e "s|@NODE_NAME@|${REALNODE_NAME}|g" \
      -e "s|@TAINT_KEY@|${REALNODE_KEY}|g" \
      -e "s|@POD_LOGS_DIR@|${REALNODE_DIR}/pod-logs|g" \
      -e "s|@KUBE_PROXY_KUBECONFIG@|${REALNODE_DIR}/pki/kube-proxy.kubeconfig|g" \
      "${REALNODE_TEMPLATES}/$1" >"$2.tmp"
  if grep -q '@[A-Z_]*@' "$2.tmp"; then
    die "step 'real node config': unfilled placeholder in $1: $(grep -o '@[A-Z_]*@' "$2.tmp" | head -1)"
  fi
  mv -f "$2.tmp" "$2"
}

# A kubelet applies its labels and taints only when it registers its Node. A node registered
# with other ones (an older node.sh) is deleted, its kubelet stopped, so that the kubelet
# started next registers it anew; its pods go with it.
realnode_reregister_if_changed() {
  local labels taints
  labels="$(kc get node "${REALNODE_NAME}" -o jsonpath="{.metadata.labels['${REALNODE_KEY//./\\.}']}" 2>/dev/null)" || return 0
  taints="$(kc get node "${REALNODE_NAME}" -o jsonpath='{range .spec.taints[*]}{.key}={.value}:{.effect}{" "}{end}' 2>/dev/null)" || return 0
  if [[ "${labels}" == true && " ${taints}" == *" ${REALNODE_KEY}=true:NoSchedule "* ]]; then
    return 0
  fi
  log "node ${REALNODE_NAME} was registered without label and taint ${REALNODE_KEY}=true; registering it anew"
  realnode_stop kubelet
  kc delete node "${REALNODE_NAME}" --wait=true >/dev/null
}

# In-cluster clients (the operator as a pod) reach the API server at the kubernetes Service,
# whose endpoint is the advertised address, the node's, on the API server's port
# (e2e/cluster/kwokctl.yaml). The API server listens on loopback only: a forwarder on the
# node address passes those connections on, so nothing listens on a host interface.
realnode_apiserver_proxy() {
  local port endpoint
  port="$(kc config view --minify -o jsonpath='{.clusters[0].cluster.server}' | sed -E 's#^https://127\.0\.0\.1:([0-9]+)$#\1#')"
  [[ "${port}" =~ ^[0-9]+$ ]] || die "step 'API server for pods': the kubeconfig's server is not https://127.0.0.1:PORT"
  endpoint="$(kc get endpointslices -n default -l kubernetes.io/service-name=kubernetes \
    -o jsonpath='{.items[0].endpoints[0].addresses[0]}:{.items[0].ports[0].port}')"
  [[ "${endpoint}" == "${REALNODE_IP}:${port}" ]] \
    || die "step 'API server for pods': the kubernetes Service points at ${endpoint}, not ${REALNODE_IP}:${port} (kube-apiserver's advertise-address in e2e/cluster/kwokctl.yaml must be REALNODE_IP)"
  # exec -a: the forwarder's command line names it, as realnode_pid checks.
  realnode_ensure apiserver-proxy "" \
    bash -c 'exec -a "$0" socat "$@"' "${REALNODE_DIR}/apiserver-proxy" \
      "TCP-LISTEN:${port},bind=${REALNODE_IP},fork,reuseaddr" "TCP:127.0.0.1:${port}"
}

realnode_wait_ready() {
  local deadline=$(( $(date +%s) + 120 )) ready taints
  while :; do
    ready="$(kc get node "${REALNODE_NAME}" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null || true)"
    taints="$(kc get node "${REALNODE_NAME}" -o jsonpath='{.spec.taints[*].key}' 2>/dev/null || true)"
    if [[ "${ready}" == True && "${taints}" != *node.kubernetes.io/not-ready* ]]; then
      return 0
    fi
    (( $(date +%s) < deadline )) \
      || die "step 'real node Ready': ${REALNODE_NAME} not Ready (Ready=${ready:-none}, taints ${taints:-none}) after 120s; see ${REALNODE_DIR}/logs/kubelet.log"
    sleep 0.5
  done
}

realnode_up() {
  local t0
  t0=$(date +%s)
  [[ "$(id -u)" -eq 0 ]] \
    || die "step 'real node': needs root (a bridge, iptables, mounts, cgroups); TTSFLEET_REAL_NODE=0 runs the cluster without it"
  "${REALNODE_TEMPLATES}/install-packages.sh" || die "step 'real node packages': hack/realnode/install-packages.sh failed"
  mkdir -p "${REALNODE_DIR}"/{logs,cni,pod-logs} "${REALNODE_IMAGE_STORE}"
  realnode_claim_host
  realnode_network_up

  realnode_render containerd.toml "${REALNODE_DIR}/containerd.toml"
  realnode_render cni.conflist "${REALNODE_DIR}/cni/10-ttsfleet-realnode.conflist"
  realnode_ensure containerd "${REALNODE_DIR}/containerd.toml ${REALNODE_DIR}/cni/10-ttsfleet-realnode.conflist" \
    containerd --config "${REALNODE_DIR}/containerd.toml"
  local deadline=$(( $(date +%s) + 30 ))
  until ctr_k8s version >/dev/null 2>&1; do
    (( $(date +%s) < deadline )) || die "step 'containerd': not serving on ${REALNODE_CONTAINERD_SOCK} after 30s; see ${REALNODE_DIR}/logs/containerd.log"
    sleep 0.2
  done
  realnode_pause_image

  realnode_credentials
  realnode_reregister_if_changed
  realnode_render kubelet.yaml "${REALNODE_DIR}/kubelet.yaml"
  realnode_ensure kubelet "${REALNODE_DIR}/kubelet.yaml ${REALNODE_DIR}/pki/kubelet.kubeconfig" \
    "${BIN_DIR}/kubelet" \
      --config "${REALNODE_DIR}/kubelet.yaml" \
      --kubeconfig "${REALNODE_DIR}/pki/kubelet.kubeconfig" \
      --root-dir "${REALNODE_DIR}/kubelet" \
      --hostname-override "${REALNODE_NAME}" \
      --node-ip "${REALNODE_IP}" \
      --node-labels "${REALNODE_KEY}=true" \
      --v 1
  local t_kubelet
  t_kubelet=$(date +%s)
  realnode_render kube-proxy.yaml "${REALNODE_DIR}/kube-proxy.yaml"
  realnode_ensure kube-proxy "${REALNODE_DIR}/kube-proxy.yaml ${REALNODE_DIR}/pki/kube-proxy.kubeconfig" \
    "${BIN_DIR}/kube-proxy" --config "${REALNODE_DIR}/kube-proxy.yaml" --v 1
  realnode_apiserver_proxy
  realnode_wait_ready
  log "real node ${REALNODE_NAME} Ready ($(( $(date +%s) - t_kubelet ))s after kubelet, $(( $(date +%s) - t0 ))s in all): address ${REALNODE_IP} on ${REALNODE_BRIDGE}, pods ${REALNODE_POD_CIDR}, taint ${REALNODE_KEY}=true:NoSchedule, label ${REALNODE_KEY}=true"
}

# Remove every container (and its task) containerd holds: the images stay, the pods go.
realnode_remove_containers() {
  local id
  for id in $(ctr_k8s tasks ls -q 2>/dev/null); do
    ctr_k8s tasks kill -a -s SIGKILL "${id}" >/dev/null 2>&1 || true
  done
  for id in $(ctr_k8s tasks ls -q 2>/dev/null); do
    ctr_k8s tasks delete -f "${id}" >/dev/null 2>&1 || true
  done
  for id in $(ctr_k8s containers ls -q 2>/dev/null); do
    ctr_k8s containers delete "${id}" >/dev/null 2>&1 || true
  done
}

# Processes left in the kubepods cgroups (a shim's children after a crash), then the
# cgroups themselves, deepest first, in every hierarchy.
realnode_cgroups_down() {
  local top d pid
  for top in /sys/fs/cgroup/*/kubepods /sys/fs/cgroup/kubepods /sys/fs/cgroup/*/kubepods.slice; do
    [[ -d "${top}" ]] || continue
    while read -r d; do
      for pid in $(cat "${d}/cgroup.procs" 2>/dev/null); do kill -9 "${pid}" 2>/dev/null || true; done
    done < <(find "${top}" -type d)
    find "${top}" -depth -type d -exec rmdir {} + 2>/dev/null || true
    [[ -d "${top}" ]] && log "could not remove cgroup ${top}"
  done
  return 0
}

realnode_mounts_down() {
  local m
  for m in $(awk '{print $2}' /proc/self/mounts | grep -E "^(${REALNODE_DIR}|${REALNODE_HOST_DIR}|${REALNODE_IMAGE_STORE})/" | sort -r); do
    umount "${m}" 2>/dev/null || umount -l "${m}" 2>/dev/null || log "could not unmount ${m}"
  done
}

# Shims outlive containerd by design; ours are the ones started with our socket.
realnode_shims_down() {
  local pid
  for pid in $(pgrep -f -- "containerd-shim.* -address ${REALNODE_CONTAINERD_SOCK}" || true); do
    kill -9 "${pid}" 2>/dev/null || true
  done
}

realnode_down() { # [purge]
  local purge="${1:-0}" t0
  t0=$(date +%s)
  if [[ ! -d "${REALNODE_DIR}" && ! -d "${REALNODE_HOST_DIR}" ]]; then
    [[ "${purge}" == 1 ]] && rm -rf "${CACHE:?}/realnode"
    return 0
  fi
  if [[ -f "${REALNODE_HOST_DIR}/owner" && "$(cat "${REALNODE_HOST_DIR}/owner")" != "${REALNODE_DIR}" ]]; then
    log "the real node on this host belongs to $(cat "${REALNODE_HOST_DIR}/owner"); leaving it alone"
    rm -rf "${REALNODE_DIR:?}"
    return 0
  fi
  log "stopping the real node ${REALNODE_NAME}"
  realnode_stop kubelet
  realnode_stop kube-proxy
  realnode_stop apiserver-proxy
  if [[ -S "${REALNODE_CONTAINERD_SOCK}" ]]; then
    realnode_remove_containers
    log "removed the node's containers (images kept)"
  fi
  realnode_stop containerd
  realnode_shims_down
  log "stopped kubelet, kube-proxy, containerd and its shims"
  realnode_cgroups_down
  realnode_mounts_down
  realnode_network_down
  log "removed the node's iptables chains, routes and bridge"
  realnode_restore_host
  rm -rf "${REALNODE_DIR:?}" "${REALNODE_HOST_DIR:?}"
  if [[ "${purge}" == 1 ]]; then
    log "removing the real node's image store ${CACHE}/realnode"
    rm -rf "${CACHE:?}/realnode"
  fi
  log "real node down ($(( $(date +%s) - t0 ))s); image store $([[ "${purge}" == 1 ]] && echo removed || echo "kept in ${REALNODE_IMAGE_STORE}")"
}

realnode_status() {
  local c
  for c in containerd kubelet kube-proxy apiserver-proxy; do
    printf '  %-10s %s\n' "${c}" "$(p="$(realnode_pid "${c}")"; [[ -n "${p}" ]] && echo "running (pid ${p})" || echo "not running")"
  done
}
