#!/usr/bin/env bash
# T5's relative position bias against §3.5's sinusoid on the main job's preset (`mini`), one after the other on one
# machine, nothing else running:
#   1. `mini` for the main job's 30 minutes (bench/config_search.py: last 5 averaged, dev BLEU at beam 4, α 1.4);
#   2. `mini` with model.position_encoding=relative for the same number of updates (training.train_steps), averaged
#      and scored the same way: quality at equal updates, whatever else ran on the machine meanwhile;
#   3. the speed of each, alternated on a quiet machine: updates per second of training steps in 3-minute runs
#      (timing.json), and the seconds of the dev split's beam-4 decoding of the two runs of 1 and 2.
# Updates in 30 minutes = the sinusoid's updates x the measured speed ratio. Prints one line per figure.
#   bash bench/relative_position.sh [WORK]      # WORK: the 3-minute runs (default /tmp/relative-position)
set -euo pipefail
cd "$(dirname "$0")/.."
WORK=${1:-/tmp/relative-position}
PY=.venv/bin/python
T2T=.venv/bin/t2t-keras
export TF_CPP_MIN_LOG_LEVEL=2
$PY bench/config_search.py train mini --minutes 30 --again
ROOT=$($PY -c 'import json; r=[r for r in json.load(open("bench/results/config-search.json"))["runs"] if r["candidate"]=="mini"][-1]; print(r["run_dir"].rsplit("/", 1)[0])')
UPDATES=$($PY -c 'import json; print([r for r in json.load(open("bench/results/config-search.json"))["runs"] if r["candidate"]=="mini"][-1]["updates"])')
echo "sinusoidal: $UPDATES updates in 30 minutes"
RELATIVE=$ROOT/relative-equal-updates
rm -rf "$RELATIVE"
$T2T train --config mini --minutes 60 --run-dir "$RELATIVE" --set model.position_encoding=relative \
  --set training.train_steps="$UPDATES"
$T2T average --run-dir "$RELATIVE" --last 5
$T2T evaluate --run-dir "$RELATIVE" --split dev --json --beam-size 4 --alpha 1.4 | tail -1
rm -rf "$WORK"; mkdir -p "$WORK"
for i in 1 2; do
  for enc in sinusoidal relative; do
    $T2T train --config mini --minutes 3 --run-dir "$WORK/$enc-$i" --set model.position_encoding=$enc > "$WORK/$enc-$i.log" 2>&1
    $PY -c "
import json; t=[r for r in json.load(open('$WORK/$enc-$i/timing.json')) if r.get('kind', 'train') == 'train'][-1]
print('$enc', $i, 'updates', t['final_step'], 'training-step seconds', round(t['parts']['training steps'], 1),
      'updates/s', round(t['final_step'] / t['parts']['training steps'], 3))"
  done
done
for i in 1 2; do
  for run in mini-30min relative-equal-updates; do
    $T2T evaluate --run-dir "$ROOT/$run" --split dev --json --beam-size 4 --alpha 1.4 2>/dev/null | tail -1 | \
      $PY -c "import json,sys; d=json.loads(sys.stdin.read()); print('$run', $i, 'dev BLEU', d['bleu'], 'decode seconds', d['decode_seconds'])"
  done
done
