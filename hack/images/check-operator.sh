#!/bin/sh
# Runs inside the operator image, as its user (hack/images.sh check operator).
set -eu
ttsfleet operator run --help >/dev/null
python -c 'import kopf, ttsfleet_operator.operator_main; print("kopf", kopf.__version__)'
if python -c 'import torch' 2>/dev/null; then
  echo "torch is in the operator image" >&2
  exit 1
fi
echo "operator image: ttsfleet operator run --help works"
