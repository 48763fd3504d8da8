# Sourced after hack/versions.env: picks which Kubernetes release the control plane is
# built from and started with. TTSFLEET_KUBE_RELEASE=newest (default) | oldest, the two ends
# of the supported range; each has its own consumer module under hack/control-plane/ and its
# own bin folder in the cache, so both stay built side by side.
# shellcheck shell=bash disable=SC2034  # the variables are read by the scripts that source us
case "${TTSFLEET_KUBE_RELEASE:-newest}" in
  newest)
    KUBE_MODULE_DIR=kubernetes
    ;;
  oldest)
    KUBE_VERSION="${KUBE_OLDEST_VERSION}"
    KUBE_STAGING_VERSION="${KUBE_OLDEST_STAGING_VERSION}"
    KUBE_MODULE_DIR=kubernetes-oldest
    ;;
  *)
    echo "TTSFLEET_KUBE_RELEASE='${TTSFLEET_KUBE_RELEASE}' is not a release we build; use newest or oldest" >&2
    exit 2
    ;;
esac
