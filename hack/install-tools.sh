#!/usr/bin/env bash
# Installs the binaries the tests drive, into $TTSFLEET_CACHE/tools/bin:
#   helm      built from its Go module (no release tarballs are reachable here)
#   promtool  Debian's prometheus package (promtool check/test rules, real Prometheus in e2e)
#   chromium  Debian's chromium, for the playground page's browser test
#   redis-server  Debian's redis-server, the shared voice store the voice tests start
#   sox       Debian's sox, which the reference 25 Hz tokenizer runs (through pysox) to
#             normalise a cloned voice's loudness in the parity tests
# The Debian packages first (a minute), then helm (minutes, once).
# Idempotent: present tools are kept. Fails with the step that broke.
set -euo pipefail
# shellcheck source=hack/apt.sh
source "$(dirname "${BASH_SOURCE[0]}")/apt.sh"

HELM_VERSION=v3.22.0   # helm.sh/helm/v3; the chart is apiVersion v2, valid for helm 3 and 4

cache=${TTSFLEET_CACHE:-$HOME/.cache/ttsfleet}
bin=$cache/tools/bin
mkdir -p "$bin"
step() { echo "==> [tools] $*"; }
fail() { echo "error: [tools] $*" >&2; exit 1; }

want=()
command -v promtool >/dev/null || want+=(prometheus)
command -v chromium >/dev/null || want+=(chromium)
command -v redis-server >/dev/null || want+=(redis-server)
command -v sox >/dev/null || want+=(sox)
if ((${#want[@]})); then apt_install tools "${want[@]}" || exit 1; fi
for tool in promtool prometheus chromium redis-server sox; do
  ln -sf "$(command -v "$tool")" "$bin/$tool"
done

# The Kubernetes version `helm template` renders for when no cluster is asked (the
# chart's kubeVersion is checked against it). helm's own Makefile sets it from the
# client-go it is built with; `go install` skips the Makefile and leaves helm's fallback,
# v1.20.0, which the chart refuses.
helm_default_kube_version() {
  local chart
  chart=$(mktemp -d)
  mkdir -p "$chart/templates"
  printf 'apiVersion: v2\nname: probe\nversion: 0.0.0\n' >"$chart/Chart.yaml"
  printf 'kubeVersion: {{ .Capabilities.KubeVersion.Version }}\n' >"$chart/templates/probe.yaml"
  "$bin/helm" template probe "$chart" 2>/dev/null | sed -n 's/^kubeVersion: //p'
  rm -rf "$chart"
}

if [[ ! -x $bin/helm ]] || ! "$bin/helm" version --short 2>/dev/null | grep -q "^${HELM_VERSION}" \
  || [[ $(helm_default_kube_version) == v1.20.0 ]]; then
  step "building helm $HELM_VERSION from its Go module (a few minutes, once)"
  command -v go >/dev/null || fail "go is needed to build helm"
  export GOMODCACHE=$cache/go/mod GOCACHE=$cache/go/build
  start=$SECONDS
  helm_module="helm.sh/helm/v3@${HELM_VERSION}"
  helm_gomod=$(go mod download -json "$helm_module" | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",$/\1/p')
  client_go=$(awk '$1 == "k8s.io/client-go" { print $2 }' "$helm_gomod")
  [[ $client_go =~ ^v0\.([0-9]+)\. ]] || fail "no k8s.io/client-go v0.x in $helm_module's go.mod ($helm_gomod)"
  # client-go v0.N goes with Kubernetes 1.N (helm's Makefile reads it the same way).
  kube_minor=${BASH_REMATCH[1]}
  ldflags="-s -w -X helm.sh/helm/v3/internal/version.version=${HELM_VERSION}"
  for package in pkg/chartutil pkg/lint/rules; do
    ldflags+=" -X helm.sh/helm/v3/$package.k8sVersionMajor=1 -X helm.sh/helm/v3/$package.k8sVersionMinor=$kube_minor"
  done
  CGO_ENABLED=0 GOBIN=$bin nice -n 10 go install -trimpath -ldflags "$ldflags" \
    "helm.sh/helm/v3/cmd/helm@${HELM_VERSION}" || fail "go install $helm_module failed"
  step "helm built in $((SECONDS - start)) s: $("$bin/helm" version --short), renders for Kubernetes $(helm_default_kube_version)"
fi

step "ready: $(ls "$bin" | tr '\n' ' ')"
