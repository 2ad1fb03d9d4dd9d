"""CTranslate2's threads on this CPU: concurrent searches (`inter_threads`) against threads per search
(`intra_threads`), the choice behind `Decisions.ctranslate2_threads`.

    python bench/bench_ctranslate2_threads.py --ctranslate2 runs/main/exports/ct2 [--lines 2000]
    python bench/bench_ctranslate2_threads.py --ctranslate2 EXPORT --base-width   # also a random 512-wide model

For each `(inter_threads, intra_threads)` of `SETTINGS` (0: CTranslate2's default) a Translator of the export
translates `--lines` lines of the default corpus' English training side (SentencePiece pieces of the export's
tokenizer, EOS appended) with beam 4 in one call of 32-line batches, after a warm-up call; then the same lines one
at a time (batch 1, the first `--batch1-lines`). With `--base-width` a random 6+6-layer model of width 512 (44M
weights; toy vocabulary, outputs cut at 40 tokens) is exported and measured the same way. Lines/s of each setting,
and whether each setting's tokens equal the first's. Writes `OUT/ctranslate2-threads.json` and `.md`.
"""

import argparse
import json
import os
import pathlib
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
SETTINGS = ((1, 0), (1, 1), (1, 2), (2, 1))  # (inter_threads, intra_threads); with --cores N, also (N, 1)
MAX_DECODING = 40  # tokens of the random model's outputs (its positions end at 64)


def pieces(export, lines, most=None):
    import sentencepiece as spm

    processor = spm.SentencePieceProcessor(model_file=str(pathlib.Path(export) / "tokenizer.model"))
    return [processor.encode(line, out_type=str)[:most] + ["</s>"] for line in lines]


def measure(export, tokens, batch1_lines, settings, max_decoding=256):
    import ctranslate2

    rows, first = [], None
    for inter, intra in settings:
        translator = ctranslate2.Translator(str(export), device="cpu", inter_threads=inter, intra_threads=intra)
        options = dict(beam_size=4, max_decoding_length=max_decoding)
        translator.translate_batch(tokens[:64], max_batch_size=32, **options)
        start = time.perf_counter()
        results = translator.translate_batch(tokens, max_batch_size=32, **options)
        batch32 = len(tokens) / (time.perf_counter() - start)
        start = time.perf_counter()
        for line in tokens[:batch1_lines]:
            translator.translate_batch([line], **options)
        batch1 = batch1_lines / (time.perf_counter() - start)
        hypotheses = [r.hypotheses[0] for r in results]
        first = hypotheses if first is None else first
        rows.append({"inter_threads": inter, "intra_threads": intra, "batch32_lines_per_s": round(batch32, 2),
                     "batch1_lines_per_s": round(batch1, 2), "same_tokens": hypotheses == first})
        print(rows[-1], flush=True)
    return rows


def random_base_export(directory):
    sys.path.insert(0, str(ROOT / "bench"))
    from bench_model_versions import make_exports

    return make_exports(pathlib.Path(directory), 1, "ctranslate2", 512, 6)[0]


def write(out, results, machine):
    out.mkdir(parents=True, exist_ok=True)
    (out / "ctranslate2-threads.json").write_text(json.dumps({"machine": machine, **results}, indent=1) + "\n")
    lines = [f"# CTranslate2's threads on {machine}", "",
             "`python bench/bench_ctranslate2_threads.py` (beam 4; lines/s; 0 threads: CTranslate2's default).", ""]
    for name, rows in results.items():
        lines += [f"## {name}", "", "| inter_threads | intra_threads | batch 32 | batch 1 | same tokens |",
                  "|---:|---:|---:|---:|---|"]
        lines += [f"| {r['inter_threads']} | {r['intra_threads']} | {r['batch32_lines_per_s']:.2f} | "
                  f"{r['batch1_lines_per_s']:.2f} | {'yes' if r['same_tokens'] else 'no'} |" for r in rows]
        lines.append("")
    (out / "ctranslate2-threads.md").write_text("\n".join(lines))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ctranslate2", required=True, help="a CTranslate2 export of ours")
    parser.add_argument("--lines", type=int, default=2000)
    parser.add_argument("--batch1-lines", type=int, default=100)
    parser.add_argument("--base-width", action="store_true", help="also a random 512-wide 6+6-layer model")
    parser.add_argument("--out", default=str(RESULTS))
    args = parser.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    from bench_data_scale import _machine
    from bench_pipeline import default_corpus, first_lines

    from t2t_keras.switches.decisions import Decisions

    cores = Decisions.before_tensorflow().cores
    settings = list(SETTINGS) + ([(cores, 1)] if cores > 2 else [])
    lines = first_lines(default_corpus()[0], args.lines)
    results = {f"{pathlib.Path(args.ctranslate2).name}, {len(lines)} lines":
               measure(args.ctranslate2, pieces(args.ctranslate2, lines), args.batch1_lines, settings)}
    if args.base_width:
        with tempfile.TemporaryDirectory() as tmp:
            export = random_base_export(tmp)
            base_lines = lines[:256]
            results[f"random width-512 model, {len(base_lines)} lines"] = measure(
                export, pieces(export, base_lines, 60), min(args.batch1_lines, 16), settings, MAX_DECODING)
    write(pathlib.Path(args.out), results, _machine())


if __name__ == "__main__":
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
    main()
