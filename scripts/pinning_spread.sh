#!/usr/bin/env bash
# Issue 31: the repeat-to-repeat spread of the kombu and pika ceilings and of pika's
# at-most-once backlog case, unpinned and pinned, in alternating repeats (ABBA order,
# so a drift in the machine's load falls on both alike), each step after the machine is quiet
# (--wait-quiet: other processes under 10 % of it). Writes one results file per run
# into results/pinning/<UTC time>/ and prints each figure's spread across the repeats
# (`mqlab show ... --table spread`; the shell's glob keeps run order up to 9 pairs).
#   bash scripts/pinning_spread.sh [PAIRS]      (default 4 pairs: 8 ceiling + 8 backlog runs)
# It runs the mqlab of the tree it lives in (PYTHONPATH), so that a copy of a commit keeps
# measuring that commit while the work tree changes; MQLAB_PYTHON: the interpreter (a venv's).
set -euo pipefail
cd "$(dirname "$0")/.."
pairs=${1:-4}
out=results/pinning/$(date -u +%Y%m%dT%H%M%SZ)
mkdir -p "$out"
py=${MQLAB_PYTHON:-.venv/bin/python}
mq() { PYTHONPATH=$PWD "$py" -m mqlab.console.cli "$@"; }
one() {  # mode repeat
  local mode=$1 i=$2 pre=""
  [[ $mode == pinned ]] && pre="pinned-"
  mq ceiling "profiles/pinning/${pre}ceiling.toml" -o "$out/ceiling-$mode-$i.json" --quiet \
    --wait-quiet >/dev/null
  mq run "profiles/pinning/${pre}backlog.toml" -o "$out/backlog-$mode-$i.json" --quiet \
    --wait-quiet >/dev/null
}
for ((i = 1; i <= pairs; i++)); do
  if ((i % 2)); then one unpinned "$i"; one pinned "$i"; else one pinned "$i"; one unpinned "$i"; fi
  echo "pair $i done $(date -u +%H:%M:%S)"
done
mq show "$out"/ceiling-*.json --table spread --markdown
mq show "$out"/backlog-*.json --table spread --markdown
