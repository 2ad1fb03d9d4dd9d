#!/usr/bin/env bash
# T5's relative position bias against §3.5's sinusoid on the main job's preset (`mini`), each for the main job's
# 30 minutes, one after the other on one machine with nothing else running:
#   1. `mini` with model.position_encoding=sinusoidal, then =relative: updates in 30 minutes, and the updates per
#      second of the training steps (timing.json);
#   2. each run's last 5 checkpoints averaged, the dev split decoded at beam 4, α 1.4 (sacreBLEU, chrF), twice each,
#      alternated: the decoding seconds.
# Prints one line per figure; bench/results/relative-position.md holds the pairs measured.
#   bash bench/relative_position.sh [WORK]      # WORK: the two runs (default /tmp/relative-position)
set -euo pipefail
cd "$(dirname "$0")/.."
WORK=${1:-/tmp/relative-position}
PY=.venv/bin/python
T2T=.venv/bin/t2t-keras
mkdir -p "$WORK"
for enc in sinusoidal relative; do
  rm -rf "${WORK:?}/$enc"
  $T2T train --config mini --minutes 30 --run-dir "$WORK/$enc" --set model.position_encoding=$enc > "$WORK/$enc.log" 2>&1
  $T2T average --run-dir "$WORK/$enc" --last 5 > /dev/null
  $PY -c "
import json; t=[r for r in json.load(open('$WORK/$enc/timing.json')) if r.get('kind', 'train') == 'train'][-1]
print('$enc', 'updates', t['final_step'], 'updates/s', round(t['final_step'] / t['parts']['training steps'], 3))"
done
for i in 1 2; do
  for enc in sinusoidal relative; do
    $T2T evaluate --run-dir "$WORK/$enc" --split dev --json --beam-size 4 --alpha 1.4 2>/dev/null | tail -1 | \
      $PY -c "import json,sys; d=json.loads(sys.stdin.read()); print('$enc', $i, 'dev BLEU', d['bleu'], 'chrF', d['chrf'], 'decode seconds', d['decode_seconds'])"
  done
done
