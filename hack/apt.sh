# shellcheck shell=bash
# apt_install PREFIX PACKAGE...: installs Debian packages for the project's scripts.
#
# Sourced by hack/install-tools.sh, hack/images.sh and hack/realnode/install-packages.sh.
# `make test` runs their builds side by side, and dpkg serves one caller at a time: a
# second apt-get would fail at once on its lock ("Could not get lock
# /var/lib/dpkg/lock-frontend"). So every install here takes the project's own lock
# first, and apt-get itself waits for dpkg's lock (an apt run the project did not start).
# The package lists are refreshed only when an install without refreshing fails (a fresh
# machine, or a container image with its lists removed).
apt_install() {
  local prefix=$1 sudo="" start=$SECONDS
  shift
  [[ $(id -u) -eq 0 ]] || sudo=sudo
  local lock_dir=${TTSFLEET_CACHE:-$HOME/.cache/ttsfleet}
  mkdir -p "$lock_dir"
  echo "==> [$prefix] apt-get install $*" >&2
  (
    flock 9
    local apt=($sudo env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 -y -qq)
    "${apt[@]}" install --no-install-recommends "$@" >/dev/null 2>&1 \
      || { "${apt[@]}" update >/dev/null && "${apt[@]}" install --no-install-recommends "$@" >/dev/null; }
  ) 9>"$lock_dir/.apt.lock" || { echo "error: [$prefix] apt-get install $* failed" >&2; return 1; }
  echo "==> [$prefix] installed $* in $((SECONDS - start)) s" >&2
}
