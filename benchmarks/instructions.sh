#!/usr/bin/env bash
# Instructions executed by one in-process workload, counted by valgrind (callgrind), for comparing
# two versions of the code on a machine whose speed drifts: the count does not depend on the
# machine's load or phase (two runs of the same code differed by 0.04%).
#
#   benchmarks/instructions.sh [-C DIR] WORKLOAD SCALE
#
# Runs `policyd bench -w WORKLOAD --scale SCALE` from the checkout DIR (default: this one) with
# PYTHONHASHSEED=0 under `valgrind --tool=callgrind` (about 60x slower than normal) and prints the
# total. The total includes start-up and the workload's setup; run two scales of one version (say
# 0.1 and 0.2) and divide the difference by the pods added to get instructions per measured pod,
# and compare versions at one scale. Needs valgrind (Debian package `valgrind`) and a virtualenv
# with policyd's dependencies (PYTHON; default: DIR's .venv, this checkout's, else python3).
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
dir=$here
if [ "${1:-}" = "-C" ]; then
  dir=$(cd "$2" && pwd)
  shift 2
fi
if [ $# -ne 2 ]; then
  echo "usage: $0 [-C DIR] WORKLOAD SCALE" >&2
  exit 2
fi
workload=$1
scale=$2
command -v valgrind > /dev/null || { echo "valgrind is not installed" >&2; exit 2; }
python=${PYTHON:-}
if [ -z "$python" ]; then
  for candidate in "$dir/.venv/bin/python" "$here/.venv/bin/python" python3; do
    if command -v "$candidate" > /dev/null; then python=$candidate; break; fi
  done
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
(
  cd "$dir"
  PYTHONHASHSEED=0 PYTHONPATH="$dir" valgrind --tool=callgrind --callgrind-out-file="$work/out" \
    "$python" -m policyd bench -w "$workload" --scale "$scale" --out "$work/results" -q
) > "$work/log" 2>&1 || { cat "$work/log" >&2; exit 1; }
total=$(sed -n 's/.*Collected : \([0-9]*\).*/\1/p' "$work/log")
grep '^| [A-Z]' "$work/log" | cut -d'|' -f2,8 >&2 || true
echo "$workload scale $scale: $total instructions"
