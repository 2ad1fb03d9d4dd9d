#!/usr/bin/env bash
# Issue #24's measurement in one command: a teacher on the default corpus, a student distilled from it, and
# bench/bench_distillation.py over both. Every step is skipped when its output is there, so a rerun after an
# interruption goes on where it stopped (training continues from the run's last checkpoint for the minutes given;
# the distillation skips its finished shards).
#   bash bench/distillation_pipeline.sh                       # teacher 70 min, student (mini) 67 min, bench
#   STUDENT_MINUTES=50 STUDENT=student-mini-6-2 bash bench/distillation_pipeline.sh   # a deep-encoder student
#   MINI_RUN=runs/main bash bench/distillation_pipeline.sh    # the main job's run joins the table
#   SHRUNK_DECODER_LAYERS=0 bash bench/distillation_pipeline.sh  # without the shrunk student
# Budget on 2 CPU cores: TEACHER_MINUTES + about 6 minutes of teacher translations + STUDENT_MINUTES + about
# 22 minutes for the shrunk student's SHRUNK_STEPS + about 20 minutes of exports and measurements: about 3 hours
# with the defaults (bench/results/history.md, "Issue #24's measurement in one command"; `mini` as the student: "One
# thread per shard; `mini` distilled above its teacher"; the shrunk student: "A two-layer decoder from the
# distilled `mini`"). Results: WORK/{teacher,student,student-shrunk}/, WORK/*-test.txt (evaluate, beam 4),
# WORK/bench/ and WORK/distillation.{json,md}; SUMMARY=bench/results/summary.json updates the summary keys.
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY="${PY:-$REPO/.venv/bin/python}"
WORK="${WORK:-$REPO/runs/distillation}"
TEACHER_MINUTES="${TEACHER_MINUTES:-70}"
STUDENT_MINUTES="${STUDENT_MINUTES:-67}"
STUDENT="${STUDENT:-mini}"  # measured: 26.81 BLEU against its teacher's 26.59; student-mini-6-2: 22.16
ENGINES="${ENGINES:-sm-float32 sm-float32-shortlist sm-bfloat16-shortlist ct2-float32}"
B1_SENTENCES="${B1_SENTENCES:-100}"
SHRUNK_DECODER_LAYERS="${SHRUNK_DECODER_LAYERS:-2}"  # 0: no shrunk student
SHRUNK_STEPS="${SHRUNK_STEPS:-6000}"
SHRUNK_RATE="${SHRUNK_RATE:-0.001}"
# The teacher's and the student's settings: the default corpus's 4,000 pieces (shared, as distill requires),
# the CPU's fast path, and the length penalty tuned for the main job.
SETTINGS=(--set data.vocab_size=4000 --set training.mixed_precision=auto --set training.jit_compile=auto
          --set training.fuse_elementwise=auto --set decoding.alpha=1.0)
t2t() { echo "$ t2t-keras $*"; "$PY" -m t2t_keras "$@"; }
mkdir -p "$WORK"

if [ ! -f "$WORK/teacher/averaged/averaged.json" ]; then
  if [ -f "$WORK/teacher/config.yaml" ]; then
    t2t train --run-dir "$WORK/teacher" --minutes "$TEACHER_MINUTES"
  else
    t2t train --config small --run-dir "$WORK/teacher" --minutes "$TEACHER_MINUTES" "${SETTINGS[@]}"
  fi
  t2t average --run-dir "$WORK/teacher"
fi
[ -f "$WORK/teacher-test.txt" ] || { t2t evaluate --run-dir "$WORK/teacher" --split test | tee "$WORK/teacher-test.tmp"
  mv "$WORK/teacher-test.tmp" "$WORK/teacher-test.txt"; }

if [ ! -f "$WORK/student/averaged/averaged.json" ]; then
  if [ -f "$WORK/student/config.yaml" ]; then
    t2t distill --teacher "$WORK/teacher" --run-dir "$WORK/student" --minutes "$STUDENT_MINUTES"
  else
    t2t distill --teacher "$WORK/teacher" --run-dir "$WORK/student" --config "$STUDENT" \
      --minutes "$STUDENT_MINUTES" "${SETTINGS[@]}"
  fi
  t2t average --run-dir "$WORK/student"
fi
[ -f "$WORK/student-test.txt" ] || { t2t evaluate --run-dir "$WORK/student" --split test | tee "$WORK/student-test.tmp"
  mv "$WORK/student-test.tmp" "$WORK/student-test.txt"; }

SYSTEMS=(--system "teacher=$WORK/teacher" --system "student=$WORK/student")
# Shrink and fine-tune: the student with SHRUNK_DECODER_LAYERS decoder layers, starting from its own evenly spaced
# ones (train --init-from), then trained on the distilled corpus at a constant rate near where the student ended.
if [ "$SHRUNK_DECODER_LAYERS" != 0 ]; then
  if [ ! -f "$WORK/student-shrunk/averaged/averaged.json" ]; then
    if [ -f "$WORK/student-shrunk/config.yaml" ]; then
      t2t train --run-dir "$WORK/student-shrunk"
    else
      t2t train --run-dir "$WORK/student-shrunk" --config "$WORK/student/config.yaml" --init-from "$WORK/student" \
        --init-weights averaged --set "model.num_decoder_layers=$SHRUNK_DECODER_LAYERS" \
        --set "training.learning_rate=$SHRUNK_RATE" --set "training.train_steps=$SHRUNK_STEPS"
    fi
    t2t average --run-dir "$WORK/student-shrunk"
  fi
  [ -f "$WORK/student-shrunk-test.txt" ] || { t2t evaluate --run-dir "$WORK/student-shrunk" --split test \
    | tee "$WORK/student-shrunk-test.tmp"; mv "$WORK/student-shrunk-test.tmp" "$WORK/student-shrunk-test.txt"; }
  SYSTEMS+=(--system "student-shrunk=$WORK/student-shrunk")
fi
[ -z "${MINI_RUN:-}" ] || SYSTEMS+=(--system "mini=$MINI_RUN")
# shellcheck disable=SC2086  # ENGINES is a list of words
PYTHONPATH="$REPO" "$PY" "$REPO/bench/bench_distillation.py" "${SYSTEMS[@]}" --teacher teacher \
  --work-dir "$WORK/bench" --b1-sentences "$B1_SENTENCES" --engines $ENGINES \
  --json "$WORK/distillation.json" --output "$WORK/distillation.md" ${SUMMARY:+--summary "$SUMMARY"}
