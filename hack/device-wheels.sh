#!/usr/bin/env bash
# Downloads bench/device-wheels.txt as cp312 manylinux wheels into .whl/ (git-ignored) for
# the GPU machine, which has no network. Then a device call carries .whl and runs
#   python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl
set -euo pipefail
cd "$(dirname "$0")/.."
grep -qx '/.whl/' .git/info/exclude 2>/dev/null || echo '/.whl/' >> .git/info/exclude
platforms=()
for n in 17 24 27 28 31 34; do platforms+=(--platform "manylinux_2_${n}_x86_64"); done
grep -v '^#' bench/device-wheels.txt | grep . | python3 -m pip download -q --no-deps --only-binary=:all: \
  --python-version 3.12 --implementation cp --platform manylinux2014_x86_64 "${platforms[@]}" -d .whl -r /dev/stdin
echo "==> $(ls .whl/*.whl | wc -l) wheels in .whl/ ($(du -sh .whl | cut -f1))"
