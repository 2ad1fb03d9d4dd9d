#!/usr/bin/env bash
# The main job end to end on the bundled default data (the LibreOffice help, English->German):
# installs t2t_keras into .venv, prepares the corpus, trains the `mini` model (configs/mini.yaml) for a time budget,
# averages the last checkpoints, evaluates BLEU/chrF on the held-out test pages, exports a SavedModel,
# translates example sentences with it and writes TensorBoard logs. Running it again resumes training.
#   bash main.sh                      # 30 minutes of training
#   bash main.sh --minutes 120        # longer
#   bash main.sh --minutes 0          # no more training: re-average, evaluate, export
set -euo pipefail
cd "$(dirname "$0")"
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
.venv/bin/python -m pip install --quiet --disable-pip-version-check -e .
bash scripts/apt-lists.sh
exec .venv/bin/t2t-keras main "$@"
