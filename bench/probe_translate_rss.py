"""Resident memory of translating a file with a SavedModel, stage by stage: TensorFlow imported, export loaded,
then after every batch of `--batch` lines (VmRSS and the peak so far, MB).

    python bench/probe_translate_rss.py --saved-model runs/main/export --input test.en [--sorted]
"""

import argparse
import os
import resource
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def rss_mb():
    """This process's resident set now, MB."""
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) // 1024 for line in status if line.startswith("VmRSS"))


def peak_mb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--saved-model", required=True)
    parser.add_argument("--input", required=True, help="one sentence per line")
    parser.add_argument("--batch", type=int, default=320, help="lines per translate call")
    parser.add_argument("--sorted", action="store_true", help="translate the lines in order of length")
    args = parser.parse_args(argv)
    with open(args.input, encoding="utf-8") as lines_file:
        lines = lines_file.read().splitlines()
    print(f"start {rss_mb()} MB", flush=True)
    from t2t_keras.artifacts.saved_model import SavedModelArtifact

    print(f"imported {rss_mb()} MB", flush=True)
    artifact = SavedModelArtifact(args.saved_model)
    request = artifact.request()  # the export's defaults
    print(f"loaded {rss_mb()} MB", flush=True)
    if args.sorted:
        lines = sorted(lines, key=len)
    began = time.time()
    for start in range(0, len(lines), args.batch):
        artifact.generate(lines[start:start + args.batch], request)
        print(f"{min(start + args.batch, len(lines))} lines: {rss_mb()} MB, peak {peak_mb()} MB, "
              f"{time.time() - began:.0f} s", flush=True)


if __name__ == "__main__":
    main()
