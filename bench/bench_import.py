"""Imported checkpoints: how exact (logits against transformers') and how fast (import, decoding) on this CPU.

    python bench/bench_import.py --out bench/results/import.json

(a) For each checkpoint shape of the tests (`tests/hf_checkpoints.py`: OPUS-MT classic, tc-big and separate
    vocabularies, NLLB, M2M-100), the largest |logit difference| of the imported run against transformers' model
    on the tests' inputs; the largest over the Marian shapes and over the M2M-100 family go into
    bench/results/summary.json (`import_marian_max_logit_diff`, `import_m2m100_max_logit_diff`), its other keys
    kept.
(b) A base-size OPUS-MT checkpoint (d_model 512, 6 + 6 layers, 8 heads, FFN 2048, a 58,101-token vocabulary,
    random weights made with transformers as the tests make theirs): the seconds of `import_checkpoint`, then
    greedy search and beam 4 of `--sentences` short lines by the run artifact (`open_artifact(RUN).generate`, the
    checkpoint's generation defaults, compiled once untimed) and by transformers' `generate()` (PyTorch, eager,
    batches of the same size), in the same process; the figures that matter are the ratios. The machine's load
    average is read before and after each timed part.
"""

import argparse
import json
import os
import pathlib
import platform
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

SUMMARY = pathlib.Path(__file__).parent / "results" / "summary.json"
MARIAN_SHAPES = {"classic": {}, "tc-big": {"activation": "relu", "scale_embedding": False, "eos_first": False},
                 "separate": {"separate": True, "eos_first": False}}
BASE_VOCABULARY = 58101  # opus-mt-en-de's
BATCH = 32  # sentences per call, ours and transformers'


def logit_differences(root):
    """{shape: max |logit difference|} of each test shape, imported against transformers' model."""
    import numpy as np

    from t2t_keras.pretrained.importer import import_checkpoint
    from t2t_keras.runs import load_run_model, open_run
    from tests import hf_checkpoints
    from tests.test_pretrained_import import _hf_logits, _inputs

    shapes = {name: (hf_checkpoints.marian_checkpoint, options, "marian", ())
              for name, options in MARIAN_SHAPES.items()}
    shapes.update(nllb=(hf_checkpoints.nllb_checkpoint, {}, "m2m100", ("eng_Latn", "deu_Latn")),
                  m2m100=(hf_checkpoints.m2m100_checkpoint, {}, "m2m100", ("en", "de")))
    found = {}
    for index, (name, (build, options, family, languages)) in enumerate(shapes.items()):
        checkpoint = build(root / name, seed=index, **options)
        run = import_checkpoint(family, checkpoint, root / f"run-{name}", *languages)
        config = open_run(run).load_config()
        source, target_in = _inputs(config)
        ours = np.asarray(load_run_model(run)((source, target_in)))
        theirs = _hf_logits(checkpoint, source, target_in, config.model.special_ids.pad)
        found[name] = float(np.max(np.abs(ours - theirs)))
    return found


def timed(call):
    """`(seconds, value, load averages before and after)` of one call."""
    load = os.getloadavg()[0]
    start = time.perf_counter()
    value = call()
    return time.perf_counter() - start, value, (load, os.getloadavg()[0])


def transformers_generate(model, tokenizer, lines, num_beams):
    """transformers' `generate()` texts of `lines`, `BATCH` at a time."""
    import torch

    texts = []
    with torch.no_grad():
        for start in range(0, len(lines), BATCH):
            inputs = tokenizer(lines[start:start + BATCH], return_tensors="pt", padding=True)
            out = model.generate(**inputs, num_beams=num_beams, do_sample=False)
            texts += tokenizer.batch_decode(out, skip_special_tokens=True)
    return texts


def base_speed(root, count):
    """Import and decoding seconds of a base-size OPUS-MT checkpoint, ours against transformers'."""
    import torch
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    from t2t_keras.artifacts import open_artifact
    from t2t_keras.pretrained.importer import import_checkpoint
    from tests import hf_checkpoints

    torch.set_num_threads(os.cpu_count())
    made_up = BASE_VOCABULARY - 65  # the toy SentencePiece model's 60 pieces, <pad>, </s>, <unk> and two tags
    checkpoint = hf_checkpoints.marian_checkpoint(root / "base", sizes=hf_checkpoints.BASE, made_up=made_up)
    lines = [line for line in hf_checkpoints.sentences(count + count // 10, seed=21) if line][:count]
    result = {"sentences": len(lines), "vocabulary": len(json.loads((checkpoint / "vocab.json").read_text()))}
    result["import_s"], run, result["import_load"] = timed(lambda: import_checkpoint("marian", checkpoint,
                                                                                      root / "run-base"))
    artifact = open_artifact(run, batch_size=BATCH)
    model, tokenizer = AutoModelForSeq2SeqLM.from_pretrained(checkpoint).eval(), AutoTokenizer.from_pretrained(
        checkpoint)
    for num_beams in (1, 4):
        request = artifact.request(beam_size=num_beams)
        artifact.generate(lines, request)  # traced and compiled, untimed
        transformers_generate(model, tokenizer, lines[:BATCH], num_beams)  # warmed up, untimed
        ours = timed(lambda: artifact.generate(lines, request).best)
        theirs = timed(lambda: transformers_generate(model, tokenizer, lines, num_beams))
        result[f"beam{num_beams}"] = {
            "ours_s": ours[0], "transformers_s": theirs[0], "transformers_over_ours": theirs[0] / ours[0],
            "same_texts": sum(a == b for a, b in zip(ours[1], theirs[1])), "load": [*ours[2], *theirs[2]]}
    return result


def machine():
    """The CPU's model name, the core count and the versions."""
    import tensorflow as tf
    import torch
    import transformers

    lscpu = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    name = next((line.split(":", 1)[1].strip() for line in lscpu.splitlines() if line.startswith("Model name")), "?")
    return {"cpu": name, "cores": os.cpu_count(), "python": platform.python_version(), "tensorflow": tf.__version__,
            "torch": torch.__version__, "transformers": transformers.__version__}


def update_summary(differences):
    """Writes the two exactness figures into summary.json, keeping its other keys."""
    summary = json.loads(SUMMARY.read_text(encoding="utf-8"))
    summary["import_marian_max_logit_diff"] = max(differences[name] for name in MARIAN_SHAPES)
    summary["import_m2m100_max_logit_diff"] = max(differences["nllb"], differences["m2m100"])
    SUMMARY.write_text(json.dumps(summary, indent=1) + "\n", encoding="utf-8")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="bench/results/import.json")
    parser.add_argument("--sentences", type=int, default=100)
    parser.add_argument("--exactness-only", action="store_true", help="part (a) only: the logit differences")
    args = parser.parse_args()
    report = {"date": time.strftime("%Y-%m-%d"), "machine": machine()}
    with tempfile.TemporaryDirectory() as directory:
        report["max_logit_diff"] = logit_differences(pathlib.Path(directory))
        update_summary(report["max_logit_diff"])
        write(report, args.out)  # part (a) kept whatever happens to part (b)
        if not args.exactness_only:
            report["base_marian"] = base_speed(pathlib.Path(directory), args.sentences)
            write(report, args.out)
    print(json.dumps(report, indent=1))


def write(report, path):
    pathlib.Path(path).write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
