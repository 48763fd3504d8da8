#!/usr/bin/env bash
# Installs what the real node of `hack/cluster.sh up` runs on, from Debian packages, when
# missing: containerd + runc (the container runtime), the CNI plugins (pod network),
# iptables/conntrack (kube-proxy's data path and its --cleanup), socat (kubelet's port-forward)
# and busybox-static (the e2e tests' tiny image). Idempotent: a second run only checks.
#
# runc, not crun: Debian's crun refuses hybrid cgroups ("cgroups in hybrid mode not
# supported"), the layout of the CI machines (cgroup v1 controllers + a cgroup2 'unified').
set -euo pipefail
# shellcheck source=hack/apt.sh
source "$(dirname "${BASH_SOURCE[0]}")/../apt.sh"

# Debian's CNI plugins live under /usr/lib/cni; other distributions use /opt/cni/bin.
CNI_BIN_DIR=/usr/lib/cni

missing=()
command -v containerd >/dev/null 2>&1 || missing+=(containerd)
command -v runc >/dev/null 2>&1 || missing+=(runc)
[[ -x "${CNI_BIN_DIR}/bridge" && -x "${CNI_BIN_DIR}/host-local" && -x "${CNI_BIN_DIR}/loopback" && -x "${CNI_BIN_DIR}/portmap" ]] \
  || missing+=(containernetworking-plugins)
command -v iptables >/dev/null 2>&1 || missing+=(iptables)
command -v conntrack >/dev/null 2>&1 || missing+=(conntrack)
command -v socat >/dev/null 2>&1 || missing+=(socat)
dpkg -s busybox-static >/dev/null 2>&1 || missing+=(busybox-static)
# pause.c is linked statically: libc.a comes with libc6-dev.
command -v gcc >/dev/null 2>&1 || missing+=(gcc)
compgen -G "/usr/lib/*/libc.a" >/dev/null || missing+=(libc6-dev)

if (( ${#missing[@]} == 0 )); then
  exit 0
fi
apt_install realnode "${missing[@]}"
