#!/usr/bin/env bash
# Brings the tree in line with `make lint` as far as tools can, then says what is left:
#   ruff format, ruff check --fix (safe fixes only), then ruff check and lint-imports
#   as `make lint` runs them. Exit status: 0 when nothing is left.
#
#   hack/lint-fix.sh [PATH...]     default: the whole repository
#
# Review the diff before committing it: the formatter rewraps lines, --fix sorts imports
# and applies pyupgrade/simplify rewrites. Findings left need a person (a zip() that
# should say strict=, a name that shadows, a line the formatter cannot wrap).
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE="${TTSFLEET_CACHE:-${HOME}/.cache/ttsfleet}"
BIN="${CACHE}/venv/bin"
tool() { if [[ -x "${BIN}/$1" ]]; then echo "${BIN}/$1"; else command -v "$1" || { echo "hack/lint-fix.sh: no $1: run 'make venv'" >&2; exit 1; }; fi; }
RUFF="$(tool ruff)"
LINT_IMPORTS="$(tool lint-imports)"
cd "${REPO_ROOT}"
# lint-imports reads the packages it imports: this tree's, whatever the venv's editable install points at.
export PYTHONPATH="${REPO_ROOT}/operator:${REPO_ROOT}/runtime${PYTHONPATH:+:${PYTHONPATH}}"
(( $# )) || set -- .

echo "==> ruff format $*"
"${RUFF}" format "$@"
echo "==> ruff check --fix $*"
"${RUFF}" check --fix --quiet "$@" || true

status=0
echo "==> left for a person: ruff check"
if ! "${RUFF}" check --statistics "$@"; then
  "${RUFF}" check --output-format concise "$@" || true
  status=1
fi
echo "==> left for a person: lint-imports"
"${LINT_IMPORTS}" --no-cache || status=1
exit "${status}"
