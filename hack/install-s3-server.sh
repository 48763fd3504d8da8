#!/usr/bin/env bash
# Builds s3s-fs, the S3-compatible server the response cache tests start (Apache-2.0;
# MinIO is AGPL), from its crate into $TTSFLEET_CACHE/s3s-fs/<version>/bin, once.
# Cold: ~6.5 min of one niced core on the dev machine (measured 2026-11-28, 390 s);
# warm: nothing. `make test` starts it in the background beside lint and unit, and the
# tests' fixture (tests/support/s3_server.py) runs it too: under the lock it waits for
# a build already running, or builds, or returns at once when the binary is there.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=hack/versions.env
source "$root/hack/versions.env"
cache=${TTSFLEET_CACHE:-$HOME/.cache/ttsfleet}
home=$cache/s3s-fs/$S3S_FS_VERSION
binary=$home/bin/s3s-fs
step() { echo "==> [s3s-fs] $*"; }
mkdir -p "$home"
exec 9>"$home/.lock"
flock 9
if [[ -x $binary ]]; then
  step "ready: $binary"
  exit 0
fi
PATH=$PATH:$HOME/.cargo/bin
command -v cargo >/dev/null || { echo "error: [s3s-fs] cargo is needed to build s3s-fs" >&2; exit 1; }
step "building s3s-fs $S3S_FS_VERSION from its crate (minutes, once)"
start=$SECONDS
target=$home/target
CARGO_TARGET_DIR=$target nice -n 10 cargo install s3s-fs --version "$S3S_FS_VERSION" \
  --features binary --locked --root "$home.partial" --quiet
mv "$home.partial/bin/s3s-fs" "$binary.tmp" && mv "$binary.tmp" "$binary"
rm -rf "$home.partial" "$target"
step "built in $((SECONDS - start)) s: $binary"
