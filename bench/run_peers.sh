#!/usr/bin/env bash
# Runs the peer benchmark harness (../shared/bench-peers) with t2t_keras and the peers in the same run.
#   bash bench/run_peers.sh                        # tiny + small, 1 repetition
#   SIZES="tiny small base" REPS=3 bash bench/run_peers.sh
#   T2T_SHORTLIST=50,100 PEERS=ours MODES=decode OUT=bench/results/peers-shortlist bash bench/run_peers.sh
#       # ours over a vocabulary shortlist; a pass of its own OUT keeps its logs (the harness names them per
#       # configuration, so a second pass into the same OUT overwrites the first's; raw.jsonl keeps both)
# Results: bench/results/peers/{raw.jsonl,results.md,results.csv,logs/}.
set -eu
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
HARNESS="${HARNESS:-$REPO/../shared/bench-peers}"
VENVS="${VENVS:-$REPO/bench/.venvs}"
mkdir -p "$VENVS"
if [ ! -x "$VENVS/tf/bin/python" ]; then
  python3 -m venv "$VENVS/tf"
  "$VENVS/tf/bin/pip" install -q -e "$REPO" "keras-hub==0.32.0" psutil
fi
if [ ! -x "$VENVS/torch/bin/python" ]; then
  python3 -m venv "$VENVS/torch"
  "$VENVS/torch/bin/pip" install -q "torch==2.13.0" numpy psutil
fi
export TF_PY="$VENVS/tf/bin/python" TORCH_PY="$VENVS/torch/bin/python"
export PYTHONPATH="$REPO/bench${PYTHONPATH:+:$PYTHONPATH}"
export OURS_ADAPTER=t2t_keras_adapter
export PEERS="${PEERS:-ours p1 p2 p3}"
export SIZES="${SIZES:-tiny small}"
export REPS="${REPS:-1}"
export TRAIN_VARIANTS="${TRAIN_VARIANTS:-ours:graph ours:xla p1:graph p1:xla p2:graph p2:xla p3:eager}"
export DEC_KINDS="${DEC_KINDS:-ours:naive ours:cached p1:naive p1:cached p1:cached-xla p2:naive p3:naive p3:cached}"
export OUT="${OUT:-$REPO/bench/results/peers}"
bash "$HARNESS/run_all.sh"
python3 "$HARNESS/aggregate.py" "$OUT/raw.jsonl" --md "$OUT/results.md" --csv "$OUT/results.csv"
