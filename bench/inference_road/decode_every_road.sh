#!/usr/bin/env bash
# Decodes a file every way the toolkit can, with the code of one checkout, to compare two checkouts line for line.
#   bash bench/inference_road/decode_every_road.sh CHECKOUT RUN_DIR INPUT OUT_DIR
# CHECKOUT: a checkout of t2t_keras (its package is imported through PYTHONPATH, the python is $PYTHON or .venv's);
# RUN_DIR: a trained translation run with a shortlist (`t2t-keras shortlist`), copied per checkout so that neither
# writes into the other's; OUT_DIR gets one NAME.txt per road and times.txt. Each checkout exports the run itself.
set -euo pipefail
code=$(cd "$1" && pwd); run=$(cd "$2" && pwd); input=$(realpath "$3"); mkdir -p "$4"; out=$(cd "$4" && pwd)
py=${PYTHON:-$(cd "$(dirname "$0")/../.." && pwd)/.venv/bin/python}
export PYTHONPATH=$code TF_CPP_MIN_LOG_LEVEL=2
cd "$code"
timed() { local name=$1 began; shift; began=$(date +%s); "$@"; echo "$name $(( $(date +%s) - began )) s" >> "$out/times.txt"; }
t() { local name=$1; shift; timed "$name" "$py" -m t2t_keras translate "$@" --input "$input" > "$out/$name.txt" 2> "$out/$name.err"; }
e() { local name=$1; shift; timed "export-$name" "$py" -m t2t_keras export --run-dir "$run" "$@" > "$out/export-$name.log" 2>&1; }
t run-b4 --run-dir "$run"
t run-b1 --run-dir "$run" --beam-size 1
t run-b4-shortlist --run-dir "$run" --shortlist
e sm --out "$out/sm"
e sm-shortlist --out "$out/sm-shortlist" --shortlist
for beam in 4 1; do
  t "sm-b$beam" --saved-model "$out/sm" --beam-size $beam
  t "sm-shortlist-b$beam" --saved-model "$out/sm-shortlist" --beam-size $beam
done
e ct2 --out "$out/ct2" --format ctranslate2
e litert --out "$out/model.tflite" --format litert
for beam in 4 1; do
  t "ct2-b$beam" --ctranslate2 "$out/ct2" --beam-size $beam
  t "litert-b$beam" --litert "$out/model.tflite" --beam-size $beam
done
