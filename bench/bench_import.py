"""Imported checkpoints: how exact (logits against transformers') and how fast (import, decoding) on this CPU.

    python bench/bench_import.py --out bench/results/import.json

(a) For each checkpoint shape of the tests (`tests/hf_checkpoints.py`: OPUS-MT classic, tc-big and separate
    vocabularies, NLLB, M2M-100), the largest |logit difference| of the imported run against transformers' model
    on the tests' inputs; the largest over the Marian shapes and over the M2M-100 family go into
    bench/results/summary.json with `--update-summary` (`import_marian_max_logit_diff`,
    `import_m2m100_max_logit_diff`), its other keys kept.
(b) A base-size OPUS-MT checkpoint (d_model 512, 6 + 6 layers, 8 heads, FFN 2048, a 58,101-token vocabulary,
    random weights made with transformers as the tests make theirs): the seconds of `import_checkpoint`, then
    greedy search and beam 4 of `--sentences` short lines by the run artifact (`open_artifact(RUN).generate`, the
    checkpoint's generation defaults, compiled once untimed) and by transformers' `generate()` (PyTorch, eager,
    batches of the same size), in the same process; the figures that matter are the ratios. The machine's load
    average is read before and after each timed part.
(c) T5: the largest |logit difference| of each T5 shape of the tests (`tests/t5_checkpoints.py`: v1.0 tied, v1.1
    untied, an mT5 of MADLAD-400's layout, a umT5 as released and one as transformers 5 saves it; the largest into
    summary.json as `import_t5_max_logit_diff`), then a
    T5 v1.1 checkpoint of `--t5-size` (base: google/t5-v1_1-base's shape, d_model 768, d_ff 2048, 12 + 12 layers,
    12 heads, d_kv 64, a 32,128-token vocabulary, gated GELU, untied; random weights in float32, saved in shards
    of `T5_SIZES`' size with their index, as released): the import's seconds and peak memory, measured in a
    process of its own (`--measure-import`: resident memory above that of the process after a warm-up import of
    a tiny checkpoint, its peak read from /proc/self/status, as a ratio to the float32 size of the checkpoint's
    tensors and of the run's model), then greedy search and beam 4 by the run and by transformers' `generate()`
    (tokens a second, each side's generated tokens counted up to the end id; how many lines give the same tokens
    and the same text: random weights give repetitive text, so the tokens are the comparison that matters).

    python bench/bench_import.py --t5-only --t5-size base --out bench/results/import_t5.json

(d) `--t5-import-memory`: only the import's peak memory (as in (c), each in a process of its own) of the T5 v1.1
    checkpoint of `--t5-size` stored three ways: float32 shards imported as float32, the same weights in bfloat16
    shards (of half the bytes, as many) imported as float32, and imported with `--precision bfloat16` (a run of
    bfloat16 weights), each as a ratio to the checkpoint's stored bytes and to the run's model, in float32 and in the
    run's own dtype.

    python bench/bench_import.py --t5-import-memory --t5-size small --out bench/results/import_t5_memory.json

summary.json is written only with `--update-summary`.
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
T5_SHAPES = {"t5-v1.0": ("v1.0", "t5"), "t5-v1.1": ("v1.1", "t5"), "mt5-madlad": ("madlad", "mt5"),
             "umt5": ("v1.1", "umt5"), "umt5-transformers5": ("transformers5", "umt5")}
# --t5-size: (T5Config sizes, vocabulary, shard bytes); base is google/t5-v1_1-base's shape, tiny shows the road
T5_SIZES = {
    "base": (dict(d_model=768, d_kv=64, d_ff=2048, num_layers=12, num_decoder_layers=12, num_heads=12,
                  relative_attention_num_buckets=32, relative_attention_max_distance=128), 32128, 200 << 20),
    "small": (dict(d_model=512, d_kv=64, d_ff=1024, num_layers=4, num_decoder_layers=4, num_heads=8,
                   relative_attention_num_buckets=32, relative_attention_max_distance=128), 32128, 64 << 20),
    "tiny": (dict(d_model=64, d_kv=16, d_ff=128, num_layers=2, num_decoder_layers=2, num_heads=4,
                  relative_attention_num_buckets=32, relative_attention_max_distance=128), 32128, 4 << 20),
}


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


def t5_logit_differences(root):
    """{shape: max |logit difference|} of each T5 shape of the tests, imported against transformers' model."""
    import numpy as np
    import torch

    from t2t_keras.pretrained.importer import import_checkpoint
    from t2t_keras.runs import load_run_model, open_run
    from tests import t5_checkpoints
    from tests.test_t5_import import _inputs

    found = {}
    for index, (name, (kind, model_type)) in enumerate(T5_SHAPES.items()):
        checkpoint = t5_checkpoints.t5_checkpoint(root / name, kind, seed=index, model_type=model_type)
        run = import_checkpoint("t5", checkpoint, root / f"run-{name}", target_lang="de" if kind == "madlad" else None)
        source, target_in = _inputs(open_run(run).load_config())
        ours = np.asarray(load_run_model(run)((source, target_in)))
        with torch.no_grad():
            theirs = t5_checkpoints.reference_model(checkpoint)(
                input_ids=torch.tensor(source), attention_mask=torch.tensor(source != 0),
                decoder_input_ids=torch.tensor(target_in)).logits.numpy()
        found[name] = float(np.max(np.abs(ours - theirs)))
    return found


def timed(call):
    """`(seconds, value, load averages before and after)` of one call."""
    load = os.getloadavg()[0]
    start = time.perf_counter()
    value = call()
    return time.perf_counter() - start, value, (load, os.getloadavg()[0])


def transformers_generate(model, tokenizer, lines, num_beams, with_ids=False):
    """transformers' `generate()` texts of `lines`, `BATCH` at a time; `with_ids`: `(texts, output id rows)`."""
    import torch

    texts, rows = [], []
    with torch.no_grad():
        for start in range(0, len(lines), BATCH):
            inputs = tokenizer(lines[start:start + BATCH], return_tensors="pt", padding=True)
            out = model.generate(**inputs, num_beams=num_beams, do_sample=False)
            texts += tokenizer.batch_decode(out, skip_special_tokens=True)
            rows += out.tolist()
    return (texts, rows) if with_ids else texts


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


def t5_checkpoint(root, size, dtype="float32"):
    """A T5 v1.1 checkpoint of `T5_SIZES[size]`, float32 (or "bfloat16", in shards of half the bytes), in shards
    with their index (random weights, the same for either dtype)."""
    import torch

    from tests import t5_checkpoints

    sizes, vocabulary, shard_bytes = T5_SIZES[size]
    return t5_checkpoints.t5_checkpoint(root / f"t5-{size}-{dtype}", "v1.1", sizes=sizes, vocab_size=vocabulary,
                                        dtype=getattr(torch, dtype), shard_bytes=shard_bytes // (
                                            2 if dtype == "bfloat16" else 1))


def resident(field):
    """`field` of /proc/self/status (VmRSS: resident memory now, VmHWM: its peak) in bytes."""
    with open("/proc/self/status", encoding="utf-8") as status:
        line = next(line for line in status if line.startswith(field + ":"))
    return int(line.split()[1]) * 1024


def measure_import(checkpoint, run, precision="float32"):
    """In this process: the seconds and peak resident memory of importing `checkpoint` as `run` with `precision`,
    above the memory of the process after a warm-up import of a tiny checkpoint with that precision (TensorFlow's
    first-use allocations are not the import's); the bytes of the checkpoint's tensors and of the run's model
    weights, in float32 and as stored."""
    import gc

    from t2t_keras.pretrained.importer import import_checkpoint
    from tests import t5_checkpoints

    with tempfile.TemporaryDirectory() as directory:
        warm = t5_checkpoints.t5_checkpoint(pathlib.Path(directory) / "tiny")
        import_checkpoint("t5", warm, pathlib.Path(directory) / "run", precision=precision)
    gc.collect()
    before = resident("VmRSS")
    try:  # "5" resets the peak (VmHWM) to the memory now (Linux 4.0 on); else the process's peak since it started
        pathlib.Path("/proc/self/clear_refs").write_text("5")
        how = "VmHWM after /proc/self/clear_refs"
    except OSError:
        how = "ru_maxrss"
    seconds, _, load = timed(lambda: import_checkpoint("t5", checkpoint, run, precision=precision))
    peak = resident("VmHWM") if how != "ru_maxrss" else resource_peak()
    added = peak - before
    return {"precision": precision, "import_s": seconds, "import_load": load, "peak_measured_by": how,
            "base_mib": before / 2**20, "added_peak_mib": added / 2**20, **sizes_against(checkpoint, run, added)}


def resource_peak():
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def sizes_against(checkpoint, run, added):
    """The bytes of the checkpoint's tensors (in float32, and as stored: its safetensors files) and of the run's
    model weights (in float32, and in the run's dtype), in MiB, and `added` bytes as a ratio to each."""
    import numpy as np

    from t2t_keras.pretrained.checkpoint import Checkpoint, tensor_shape
    from t2t_keras.runs import load_run_model, weights_bytes

    tensors = Checkpoint(checkpoint).tensors()
    weights = load_run_model(run).weights
    sizes = {"checkpoint_float32": 4 * sum(int(np.prod(tensor_shape(tensors, name))) for name in tensors),
             "checkpoint_stored": sum(path.stat().st_size for path in checkpoint.glob("*.safetensors")),
             "model_float32": 4 * sum(int(np.prod(weight.shape)) for weight in weights),
             "model_own_dtype": weights_bytes(weights)}
    return {**{f"{name}_mib": size / 2**20 for name, size in sizes.items()},
            **{f"added_peak_over_{name}": added / size for name, size in sizes.items()}}


def import_memory(checkpoint, run, precision="float32"):
    """`measure_import` in a process of its own (this one has held other models)."""
    out = subprocess.run([sys.executable, os.path.abspath(__file__), "--measure-import", str(checkpoint), str(run),
                          "--measure-precision", precision], capture_output=True, text=True, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def t5_import_memory(root, size):
    """(d): the import's peak memory of the `size` checkpoint in float32 and bfloat16 shards, imported as float32,
    and of the bfloat16 one imported with --precision bfloat16."""
    checkpoints = {dtype: t5_checkpoint(root, size, dtype) for dtype in ("float32", "bfloat16")}
    rows = []
    for stored, precision in (("float32", "float32"), ("bfloat16", "float32"), ("bfloat16", "bfloat16")):
        row = {"stored": stored, "shards": len(list(checkpoints[stored].glob("model-*.safetensors")))}
        row.update(import_memory(checkpoints[stored], root / f"run-{stored}-{precision}", precision))
        rows.append(row)
        print(json.dumps(row), flush=True)
    return {"size": size, "sizes": T5_SIZES[size][0], "vocabulary": T5_SIZES[size][1], "rows": rows}


def until_end(ids, end, pad):
    """`ids` up to and with the first `end`; where there is none, without the trailing `pad`s (both sides alike)."""
    if end in ids:
        return ids[:ids.index(end) + 1]
    while ids and ids[-1] == pad:
        ids = ids[:-1]
    return ids


def run_tokens(artifact, lines, request):
    """Per line, the run's best output ids up to its end id (`until_end`), from the searches `artifact.generate`
    runs (`Generator.search` on its batches; the outputs hold no decoder start)."""
    generator = artifact.generator
    ids = generator.special_ids
    sources, _, empty = generator.source_rows(lines)
    found = [[] for _ in lines]
    for batch, source in generator.batches(sources, empty):
        for line, row in zip(batch, generator.search(source, request).tokens.numpy()[:len(batch), 0].tolist()):
            found[line] = until_end(row, ids.eos, ids.pad)
    return found


def t5_decoding(artifact, model, tokenizer, lines, num_beams):
    """Greedy or beam search of `lines` by the run and by transformers: seconds, tokens a second, lines alike."""
    request = artifact.request(beam_size=num_beams)
    artifact.generate(lines, request)  # traced and compiled, untimed
    transformers_generate(model, tokenizer, lines[:BATCH], num_beams)  # warmed up, untimed
    ours = timed(lambda: artifact.generate(lines, request).best)
    theirs = timed(lambda: transformers_generate(model, tokenizer, lines, num_beams, with_ids=True))
    our_ids = run_tokens(artifact, lines, request)
    # generate()'s rows start with the decoder start
    their_ids = [until_end(row[1:], tokenizer.eos_token_id, tokenizer.pad_token_id) for row in theirs[1][1]]
    our_count, their_count = sum(map(len, our_ids)), sum(map(len, their_ids))
    return {"ours_s": ours[0], "transformers_s": theirs[0], "ours_tokens": our_count,
            "transformers_tokens": their_count, "ours_tokens_per_s": our_count / ours[0],
            "transformers_tokens_per_s": their_count / theirs[0], "transformers_over_ours": theirs[0] / ours[0],
            "same_tokens": sum(a == b for a, b in zip(our_ids, their_ids)),
            "same_texts": sum(a == b for a, b in zip(ours[1], theirs[1][0])), "load": [*ours[2], *theirs[2]]}


def t5_speed(root, count, size):
    """Import (time, peak memory) and decoding of a T5 v1.1 checkpoint of `size`, ours against transformers'."""
    import torch

    from t2t_keras.artifacts import open_artifact
    from tests import hf_checkpoints, t5_checkpoints

    torch.set_num_threads(os.cpu_count())
    checkpoint = t5_checkpoint(root, size)
    lines = [line for line in hf_checkpoints.sentences(count + count // 10, seed=21) if line][:count]
    result = {"size": size, "sizes": T5_SIZES[size][0], "vocabulary": T5_SIZES[size][1], "sentences": len(lines),
              "shards": len(list(checkpoint.glob("model-*.safetensors")))}
    result.update(import_memory(checkpoint, root / f"run-t5-{size}"))
    artifact = open_artifact(root / f"run-t5-{size}", batch_size=BATCH)
    model, tokenizer = t5_checkpoints.reference_model(checkpoint), t5_checkpoints.reference_tokenizer(checkpoint)
    for num_beams in (1, 4):
        result[f"beam{num_beams}"] = t5_decoding(artifact, model, tokenizer, lines, num_beams)
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


def update_summary(report):
    """Writes the exactness figures of `report` into summary.json, keeping its other keys."""
    summary = json.loads(SUMMARY.read_text(encoding="utf-8"))
    differences = report.get("max_logit_diff")
    if differences:
        summary["import_marian_max_logit_diff"] = max(differences[name] for name in MARIAN_SHAPES)
        summary["import_m2m100_max_logit_diff"] = max(differences["nllb"], differences["m2m100"])
    if report.get("t5_max_logit_diff"):
        summary["import_t5_max_logit_diff"] = max(report["t5_max_logit_diff"].values())
    SUMMARY.write_text(json.dumps(summary, indent=1) + "\n", encoding="utf-8")


def arguments():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", help="the report (default: bench/results/import.json; with --t5-import-memory "
                                      "bench/results/import_t5_memory.json; with --t5-only "
                                      "bench/results/import_t5.json)")
    parser.add_argument("--sentences", type=int, default=100)
    parser.add_argument("--exactness-only", action="store_true", help="the logit differences only")
    parser.add_argument("--t5-only", action="store_true", help="part (c) only: the T5 family")
    parser.add_argument("--t5-size", choices=sorted(T5_SIZES), default="base",
                        help="the T5 v1.1 checkpoint timed (tiny: to see that the bench runs)")
    parser.add_argument("--update-summary", action="store_true",
                        help="write the logit differences into bench/results/summary.json")
    parser.add_argument("--t5-import-memory", action="store_true",
                        help="part (d) only: the import's peak memory of the --t5-size checkpoint in float32 and "
                             "bfloat16 shards, imported as float32 and with --precision bfloat16")
    parser.add_argument("--measure-import", nargs=2, metavar=("CHECKPOINT", "RUN"), help=argparse.SUPPRESS)
    parser.add_argument("--measure-precision", default="float32", help=argparse.SUPPRESS)
    return parser.parse_args()


def main():
    args = arguments()
    if args.measure_import:
        print(json.dumps(measure_import(*map(pathlib.Path, args.measure_import), args.measure_precision)))
        return
    name = "import_t5_memory" if args.t5_import_memory else "import_t5" if args.t5_only else "import"
    out = args.out or f"bench/results/{name}.json"
    report = {"date": time.strftime("%Y-%m-%d"), "machine": machine()}
    with tempfile.TemporaryDirectory() as directory:
        root = pathlib.Path(directory)
        if args.t5_import_memory:
            report[f"t5_{args.t5_size}_import_memory"] = t5_import_memory(root, args.t5_size)
            write(report, out)
            print(json.dumps(report, indent=1))
            return
        if not args.t5_only:
            report["max_logit_diff"] = logit_differences(root)
        report["t5_max_logit_diff"] = t5_logit_differences(root)
        write(report, out)  # the exactness kept whatever happens to the timings
        if not args.exactness_only:
            if not args.t5_only:
                report["base_marian"] = base_speed(root, args.sentences)
                write(report, out)
            report[f"t5_{args.t5_size}"] = t5_speed(root, args.sentences, args.t5_size)
            write(report, out)
    if args.update_summary:
        update_summary(report)
    print(json.dumps(report, indent=1))


def write(report, path):
    pathlib.Path(path).write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
