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

if [[ ! -x $bin/helm ]] || ! "$bin/helm" version --short 2>/dev/null | grep -q "^${HELM_VERSION}"; then
  step "building helm $HELM_VERSION from its Go module (a few minutes, once)"
  command -v go >/dev/null || fail "go is needed to build helm"
  export GOMODCACHE=$cache/go/mod GOCACHE=$cache/go/build
  start=$SECONDS
  CGO_ENABLED=0 GOBIN=$bin nice -n 10 go install -trimpath \
    -ldflags "-s -w -X helm.sh/helm/v3/internal/version.version=${HELM_VERSION}" \
    "helm.sh/helm/v3/cmd/helm@${HELM_VERSION}" || fail "go install helm.sh/helm/v3/cmd/helm@${HELM_VERSION} failed"
  step "helm built in $((SECONDS - start)) s: $("$bin/helm" version --short)"
fi

step "ready: $(ls "$bin" | tr '\n' ' ')"
