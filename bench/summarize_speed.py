"""Headline ratios of a same-run peer benchmark: t2t_keras in its best setting against each peer in its own.

    python bench/summarize_speed.py bench/results/speed/raw.jsonl --output bench/results/summary.json \
        --markdown bench/results/speed/summary.md [--decode-raw bench/results/speed-decode/raw.jsonl]

Reads the harness's RESULT records (`../shared/bench-peers`, run by `bench/run_peers.sh`). For every peer, size
and measurement it keeps the fastest variant (float32 or bf16, graph, XLA, eager, compiled), each variant's value
being the median over its runs; runs that saw other processes use more than `--max-other` cores are left out when
a clean run of the same configuration exists (the harness's own rule). Ratios are ours / peer:

- `train_{size}_vs_best_keras`: training target tokens/s against the faster of keras-hub (P1) and the TF
  tutorial model (P2); `train_{size}_vs_torch` against PyTorch `nn.Transformer` (P3);
- `decode_b{batch}_{size}_vs_keras_hub` and `..._vs_torch`: greedy cached decoding, generated tokens/s;
- `rss_train_base_vs_lowest_peer`: peak training RSS at `base` of our fastest variant over the lowest of the
  peers' (each in its fastest variant).

With `--decode-raw`, the decoding figures come from that file (a later run of the decoding points only, all peers
in it) and the training figures from the first. Keys of an existing `--output` that this script does not compute
(figures measured outside the harness, e.g. `detail.rss_attribution` from `bench/results/rss_attribution.md`) are
kept.
"""

import argparse
import collections
import datetime
import json
import pathlib
import platform
import statistics
import sys

OURS, KERAS_HUB, TUTORIAL, TORCH = "OURS", "P1-keras_hub", "P2-tf_tutorial", "P3-torch"
KERAS_PEERS = (KERAS_HUB, TUTORIAL)


def load(path):
    records = []
    for line in pathlib.Path(path).read_text().splitlines():
        line = line.removeprefix("RESULT ").strip()
        if line.startswith("{"):
            record = json.loads(line)
            if not record.get("error"):
                records.append(record)
    return records


def peer_of(record):
    return OURS if record["peer"].startswith("OURS") else record["peer"]


def variants(records, mode, max_other):
    """{(peer, size, batch or None): {variant: (value, peak RSS MB, runs)}} of medians over clean runs."""
    groups = collections.defaultdict(list)
    for r in records:
        if r["mode"] != mode or (mode == "decode" and r.get("dec_kind") not in ("cached",)):
            continue
        batch = r.get("dec_batch") if mode == "decode" else None
        if mode == "train" and r.get("batch") != 64:
            continue
        groups[(peer_of(r), r["size"], batch, r["variant"])].append(r)
    table = collections.defaultdict(dict)
    key = "gen_tok_s_median" if mode == "decode" else "tok_s_median"
    for (peer, size, batch, variant), runs in groups.items():
        clean = [r for r in runs if (r.get("other_procs_cores") or 0.0) <= max_other] or runs
        table[(peer, size, batch)][variant] = (statistics.median(r[key] for r in clean),
                                               statistics.median(r["peak_rss_mb"] for r in clean), len(clean))
    return table


def best(table, peer, size, batch=None):
    """(variant, tok/s, peak RSS MB, runs) of the peer's fastest variant, or None."""
    found = table.get((peer, size, batch))
    if not found:
        return None
    variant, (value, rss, runs) = max(found.items(), key=lambda item: item[1][0])
    return variant, value, rss, runs


def summarize(records, max_other=0.25):
    train, decode = variants(records, "train", max_other), variants(records, "decode", max_other)
    summary, detail = {}, {"train": {}, "decode": {}}

    def ratio(ours, other):
        return None if ours is None or other is None else round(ours[1] / other[1], 3)

    for size in ("small", "base"):
        ours = best(train, OURS, size)
        keras = max(filter(None, (best(train, peer, size) for peer in KERAS_PEERS)), key=lambda b: b[1],
                    default=None)
        summary[f"train_{size}_vs_best_keras"] = ratio(ours, keras)
        summary[f"train_{size}_vs_torch"] = ratio(ours, best(train, TORCH, size))
        detail["train"][size] = {peer: best(train, peer, size) for peer in (OURS, KERAS_HUB, TUTORIAL, TORCH)}
        for batch in (1, 32):
            ours_decode = best(decode, OURS, size, batch)
            summary[f"decode_b{batch}_{size}_vs_keras_hub"] = ratio(ours_decode, best(decode, KERAS_HUB, size, batch))
            summary[f"decode_b{batch}_{size}_vs_torch"] = ratio(ours_decode, best(decode, TORCH, size, batch))
            detail["decode"][f"{size} b{batch}"] = {peer: best(decode, peer, size, batch)
                                                    for peer in (OURS, KERAS_HUB, TORCH)}
    ours = best(train, OURS, "base")
    peers = [b for b in (best(train, peer, "base") for peer in (KERAS_HUB, TUTORIAL, TORCH)) if b]
    summary["rss_train_base_vs_lowest_peer"] = (round(ours[2] / min(b[2] for b in peers), 3)
                                                if ours and peers else None)
    return summary, detail


def machine(records, cpuinfo=pathlib.Path("/proc/cpuinfo")):
    """CPU model, cores, the instruction sets that pick the fast path, and the frameworks' versions."""
    lines = cpuinfo.read_text().splitlines() if cpuinfo.exists() else []
    model = next((line.split(":", 1)[1].strip() for line in lines if line.startswith("model name")),
                 platform.processor() or platform.machine())
    flags = next((set(line.split(":", 1)[1].split()) for line in lines if line.startswith("flags")), set())
    cores = sum(line.startswith("processor") for line in lines)
    extras = ", ".join(f for f in ("avx2", "avx512f", "avx512_bf16", "amx_bf16") if f in flags)
    versions = {k: next((r[k] for r in records if r.get(k)), None) for k in ("tf", "keras", "keras_hub", "torch")}
    return f"{model}, {cores} cores ({extras}); " + ", ".join(f"{k} {v}" for k, v in versions.items() if v)


def markdown(summary, detail):
    lines = ["| ratio (ours / peer, same run) | value |", "|---|---:|"]
    lines += [f"| `{key}` | {value if value is not None else '-'} |" for key, value in summary.items()
              if key not in ("machine", "date")]
    lines += ["", "| measurement | ours | keras-hub | TF tutorial | PyTorch |", "|---|---|---|---|---|"]

    def cell(b):
        return "-" if not b else f"{b[1]:,.0f} ({b[0]}, {b[2]:,.0f} MB)"

    for size, row in detail["train"].items():
        lines.append(f"| train {size} (target tok/s, best variant, peak RSS) | {cell(row[OURS])} | "
                     f"{cell(row[KERAS_HUB])} | {cell(row[TUTORIAL])} | {cell(row[TORCH])} |")
    for name, row in detail["decode"].items():
        lines.append(f"| greedy cached decode {name} (generated tok/s) | {cell(row[OURS])} | {cell(row[KERAS_HUB])} "
                     f"| - | {cell(row[TORCH])} |")
    return "\n".join(lines) + "\n"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("raw", type=pathlib.Path, help="the harness's raw.jsonl")
    parser.add_argument("--output", type=pathlib.Path, default=pathlib.Path("bench/results/summary.json"))
    parser.add_argument("--markdown", type=pathlib.Path, help="also write the ratios and values as markdown")
    parser.add_argument("--max-other", type=float, default=0.25)
    parser.add_argument("--decode-raw", type=pathlib.Path,
                        help="take the decoding records from this later same-run measurement instead")
    args = parser.parse_args(argv)
    records = load(args.raw)
    if args.decode_raw:
        records = [r for r in records if r["mode"] != "decode"] + load(args.decode_raw)
    summary, detail = summarize(records, args.max_other)
    dates = sorted(r["time_unix"] for r in records if r.get("time_unix"))
    summary["machine"] = machine(records)
    summary["date"] = (datetime.datetime.fromtimestamp(dates[-1], datetime.timezone.utc).date().isoformat()
                       if dates else datetime.date.today().isoformat())
    summary["detail"] = {mode: {name: {peer: (None if b is None else {"variant": b[0], "tok_s": round(b[1], 1),
                                                                      "peak_rss_mb": round(b[2]), "runs": b[3]})
                                       for peer, b in row.items()} for name, row in rows.items()}
                         for mode, rows in detail.items()}
    previous = json.loads(args.output.read_text()) if args.output.exists() else {}
    for key, value in previous.items():
        summary.setdefault(key, value)
    for key, value in previous.get("detail", {}).items():
        summary["detail"].setdefault(key, value)
    args.output.write_text(json.dumps(summary, indent=1) + "\n")
    text = markdown({k: v for k, v in summary.items() if k != "detail"}, detail)
    print(text)
    if args.markdown:
        args.markdown.write_text(f"Machine: {summary['machine']}; {summary['date']}.\n\n" + text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
