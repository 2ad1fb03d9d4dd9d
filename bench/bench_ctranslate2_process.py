"""A CTranslate2 process with and without TensorFlow: start-up time and resident memory of the CPU production
road, this checkout against a baseline checkout, in the same run.

    git worktree add /tmp/baseline f9d9c36
    python bench/bench_ctranslate2_process.py --baseline /tmp/baseline --out bench/results/ctranslate2-process.json

Three ways a CTranslate2 export is used, each a new process per repeat (the checkouts alternate, repeat by
repeat, so drift on the machine falls on both):

* `library`: `open_artifact(EXPORT).generate(lines)` in `python -c`, the seconds from start to exit and the
  process's peak resident memory (its VmHWM at the end), and whether TensorFlow was imported;
* `translate`: `t2t-keras translate --ctranslate2 EXPORT --input FILE` (the CLI's module run by `runpy`, to read
  the same figures at its end);
* `serve`: `t2t-keras serve --ctranslate2 EXPORT --port 0`, the seconds until its first prediction is answered,
  and its resident memory (VmRSS) then; it is stopped with SIGTERM.

Every way's translations must be the same in both checkouts (checked; a difference fails the bench). The export
is the test suite's tiny run exported (`tests.roads`, 40 updates of the tiny preset) unless `--export` names one:
with a model this small the figures are the process's own, its imports and runtimes, which is what differs.
"""

import argparse
import json
import os
import pathlib
import platform
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # tests.test_server's reading of a server's port
PEAK = """
def _peak():
    import re, sys
    status = open("/proc/self/status").read()
    print("peak kB:", re.search(r"VmHWM:\\s+(\\d+) kB", status).group(1), file=sys.stderr)
    print("tensorflow imported:", "tensorflow" in sys.modules, file=sys.stderr)
"""
LIBRARY = PEAK + """
import sys
from t2t_keras.artifacts import open_artifact
artifact = open_artifact(sys.argv[1])
lines = open(sys.argv[2], encoding="utf-8").read().splitlines()
print("\\n".join(artifact.generate(lines, artifact.request()).best))
_peak()
"""
COMMAND = PEAK + """
import runpy, sys
sys.argv = ["t2t-keras"] + sys.argv[1:]
try:
    runpy.run_module("t2t_keras", run_name="__main__")
finally:
    _peak()
"""


def child_env(checkout):
    """The environment of a child running `checkout`'s package (first on PYTHONPATH)."""
    env = dict(os.environ, PYTHONPATH=str(checkout), TF_CPP_MIN_LOG_LEVEL="2")
    env.pop("T2T_TEST_ROADS", None)
    return env


def timed(command, checkout):
    """`(seconds, peak resident MB, stdout, stderr)` of `command` (a script of `PEAK`'s) run to its end; the
    peak is the process's own high-water mark (VmHWM at its end), which a fork's `ru_maxrss` is not."""
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, cwd=checkout, env=child_env(checkout))
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError(f"{command} failed:\n{done.stderr[-3000:]}")
    peak = int(re.search(r"peak kB: (\d+)", done.stderr).group(1)) / 1024
    return seconds, peak, done.stdout, done.stderr


def served(checkout, export, lines):
    """`(seconds to the first answer, resident MB then, translations)` of `t2t-keras serve --ctranslate2`."""
    import httpx

    from tests.test_server import port_from_log

    start = time.perf_counter()
    process = subprocess.Popen([sys.executable, "-m", "t2t_keras", "serve", "--ctranslate2", str(export), "--port",
                                "0"], stderr=subprocess.PIPE, text=True, cwd=checkout, env=child_env(checkout))
    try:
        url = f"http://127.0.0.1:{port_from_log(process)}/v1/models/default:predict"
        while True:
            answer = httpx.post(url, json={"instances": lines}, timeout=120)
            if answer.status_code == 200:
                break
            time.sleep(0.02)  # 503 while the export loads
        seconds = time.perf_counter() - start
        status = pathlib.Path(f"/proc/{process.pid}/status").read_text()
        resident = int(re.search(r"VmRSS:\s+(\d+) kB", status).group(1)) / 1024
        return seconds, resident, [row["translations"] for row in answer.json()["predictions"]]
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        process.stderr.close()


def one_round(checkout, export, input_path, lines):
    """`{way: (seconds, MB, translations, tensorflow imported)}` for one checkout."""
    seconds, peak, out, err = timed([sys.executable, "-c", LIBRARY, str(export), str(input_path)], checkout)
    results = {"library": (seconds, peak, out.splitlines(), "tensorflow imported: True" in err)}
    seconds, peak, out, err = timed([sys.executable, "-c", COMMAND, "translate", "--ctranslate2", str(export),
                                     "--input", str(input_path)], checkout)
    results["translate"] = (seconds, peak, out.splitlines(), "tensorflow imported: True" in err)
    seconds, resident, texts = served(checkout, export, lines)
    results["serve"] = (seconds, resident, texts, None)
    return results


def tiny_export(directory):
    """The test suite's tiny run and its exports, built in a process of its own (this one stays small)."""
    subprocess.run([sys.executable, "-m", "tests.roads", str(directory)], check=True, cwd=REPO,
                   env=child_env(REPO), capture_output=True)
    return directory / "ctranslate2", directory / "corpus" / "test.en"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", required=True, help="a checkout of the commit to compare with")
    parser.add_argument("--export", help="a CTranslate2 export (default: the test suite's tiny run, exported)")
    parser.add_argument("--input", help="lines to translate (default: the toy corpus's test sources)")
    parser.add_argument("--lines", type=int, default=8, help="how many of them")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", default=str(REPO / "bench/results/ctranslate2-process.json"))
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        export, sentences = (pathlib.Path(args.export), None) if args.export else tiny_export(pathlib.Path(tmp))
        source = pathlib.Path(args.input) if args.input else sentences
        lines = source.read_text(encoding="utf-8").splitlines()[:args.lines]
        input_path = pathlib.Path(tmp) / "input.txt"
        input_path.write_text("\n".join(lines) + "\n", encoding="utf-8")
        checkouts = {"baseline": pathlib.Path(args.baseline).resolve(), "this": REPO}
        figures = {name: {} for name in checkouts}
        load = [os.getloadavg()[0]]
        for _ in range(args.repeats):
            for name, checkout in checkouts.items():
                for way, (seconds, megabytes, texts, tensorflow) in one_round(checkout, export, input_path,
                                                                                lines).items():
                    entry = figures[name].setdefault(way, {"seconds": [], "megabytes": [], "texts": texts,
                                                           "tensorflow_imported": tensorflow})
                    if entry["texts"] != texts:
                        raise RuntimeError(f"{name} {way}: translations differ between repeats")
                    entry["seconds"].append(round(seconds, 3))
                    entry["megabytes"].append(round(megabytes, 1))
        load.append(os.getloadavg()[0])
    for way in figures["this"]:
        if figures["this"][way]["texts"] != figures["baseline"][way]["texts"]:
            raise RuntimeError(f"{way}: the translations differ between the checkouts")
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=REPO).stdout
    baseline = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              cwd=checkouts["baseline"]).stdout
    report = {"machine": {"cpu": _cpu_name(), "cores": os.cpu_count(), "python": platform.python_version(),
                          "load_average_before_after": [round(v, 2) for v in load]},
              "commits": {"baseline": baseline.strip(), "this": commit.strip()}, "export": str(export),
              "lines": len(lines), "repeats": args.repeats, "figures": {}}
    for name in checkouts:
        report["figures"][name] = {
            way: {"median_seconds": statistics.median(entry["seconds"]), "seconds": entry["seconds"],
                  "median_megabytes": statistics.median(entry["megabytes"]), "megabytes": entry["megabytes"],
                  "tensorflow_imported": entry["tensorflow_imported"]}
            for way, entry in figures[name].items()}
    report["ratios"] = {way: {"seconds": round(report["figures"]["baseline"][way]["median_seconds"] /
                                               report["figures"]["this"][way]["median_seconds"], 2),
                              "megabytes": round(report["figures"]["baseline"][way]["median_megabytes"] /
                                                 report["figures"]["this"][way]["median_megabytes"], 2)}
                        for way in figures["this"]}
    pathlib.Path(args.out).write_text(json.dumps(report, indent=1) + "\n")
    for way, ratio in report["ratios"].items():
        old, new = report["figures"]["baseline"][way], report["figures"]["this"][way]
        print(f"{way}: {old['median_seconds']:.2f} s, {old['median_megabytes']:.0f} MB -> {new['median_seconds']:.2f} "
              f"s, {new['median_megabytes']:.0f} MB ({ratio['seconds']}x faster, {ratio['megabytes']}x less memory)")
    return 0


def _cpu_name():
    try:
        text = pathlib.Path("/proc/cpuinfo").read_text()
        return re.search(r"model name\s*:\s*(.+)", text).group(1)
    except (OSError, AttributeError):
        return platform.processor()


if __name__ == "__main__":
    sys.exit(main())
