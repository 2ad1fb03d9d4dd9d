"""`t2t-keras serve` under load: 10,000 requests with 30% malformed, honest retrying crowds, an overload, SIGTERM.

    python bench/bench_serving_load.py                            # trains mini 3 minutes, exports, measures
    python bench/bench_serving_load.py --saved-model exports/x    # measures that export

Without `--saved-model` the bench trains the `mini` preset on the default corpus for `--train-minutes` in
`--work` and exports it (`t2t-keras train`, `t2t-keras export`); an export already there is used again.
It starts `t2t-keras serve` on 127.0.0.1 with its defaults (batches of 32 sentences, a queue of 2 s of work,
a deadline of 30 s, a drain of 20 s) and loads it from this process (`load_client.py`: raw HTTP/1.1 on asyncio,
keep-alive):

1. 10,000 requests from 200 concurrent clients, 30% of them malformed in seven ways (bad JSON, a number
   for a sentence, no "instances" or "inputs", an unknown field, a sentence over 2,000 characters, 65
   sentences, an unknown decoding parameter), the others valid (1 to 3 sentences); the server's RSS is
   read (/proc/PID/status: VmRSS, and VmHWM, its peak) after 1,000 and after 10,000 answers;
   with `--soak-seconds S`, 40 clients then keep the server translating (within the queue's bound) for S
   seconds, and its memory is read every 20 s;
   then, at each of `--concurrency` (50, 200 and 1,000 clients), `--retrying-requests` requests (at least 3 a
   client) of the same mix from honest clients, each sending a 503 again after its Retry-After, up to
   `--max-attempts` times: the valid requests' p50 and p99 latency (from the first attempt, retries included),
   the most retries any request needed, and the failures (a valid request still refused at its last attempt
   is one). Each crowd starts once the places the one before left in the server's line have been given up
   (phase 1's clients never retry); each takes about its valid sentences over the model's throughput;
2. the capacity (single-sentence requests from 64 clients for `--capacity-seconds`: answers a second),
   then an overload: requests arriving at `--overload` times that rate for `--overload-seconds`, each sent
   at its arrival (latency counts from the planned arrival);
3. 200 clients, SIGTERM after `--sigterm-after` s; a client stops sending once an answer says the server
   is shutting down (as a load balancer would take it out), and the bench waits for the process to exit.

A valid request may get 200 or 503, a malformed one 400. Anything else is a failure: another status, a
refused connection, a connection closed without an answer, a timeout (60 s). Latency p50/p99 counts every
answered request of a phase. The load average is sampled every second; the machine is described by lscpu.
Results: bench/results/serving_load.json and .md; `serving_10k_failures`, `serving_overload_p99_ms` (the p99 of the
valid requests with 200 clients retrying, retries included) and `serving_max_retries` (the most retries any
request needed, at any concurrency) are merged into bench/results/summary.json. `python -m tests.serving_simulation
--clients 1000` runs such a crowd against the server's admission alone on a virtual clock (no machine's speed
decides it), to compare with what this measures.
"""

import argparse
import asyncio
import datetime
import json
import os
import pathlib
import random
import re
import signal
import subprocess
import sys
import time
import urllib.request

from load_client import NO_ANSWER, REFUSED, TIMEOUT, LoadClient, Request, closed_loop, open_loop

from t2t_keras.files import write_text_atomic

ROOT = pathlib.Path(__file__).resolve().parents[1]
HOST = "127.0.0.1"
PREDICT = "/v1/models/default:predict"
SERVER = {"max_batch_size": 32, "max_queue_seconds": 2.0, "deadline_seconds": 30.0, "max_wait_ms": 10,
          "drain_seconds": 20.0}  # serve's defaults
SENTENCES = [
    "Click the Print button.", "Choose Format - Character.", "Select the cells that you want to merge.",
    "The dialog shows the current settings.", "Enter the name of the new style.",
    "You can also drag the file into the document.", "Press Enter to insert a new paragraph.",
    "This command is only available if the document contains a table.", "Specifies the line spacing.",
    "To delete a bookmark, select it and click Delete.", "Opens the Find & Replace dialog.",
    "Choose View - Toolbars - Drawing.", "The chart is updated automatically when the data change.",
    "Sets the options for printing the current document.", "Select a color from the list.",
    "Double-click the object to edit it.", "The selected text is copied to the clipboard.",
    "Inserts a new row above the selected row.", "Use this command to save the document under a new name.",
    "Shows or hides the ruler.",
]
MALFORMED = {  # kind -> body; each gets a 400
    "bad json": b'{"instances": ["Click the Print button."',
    "wrong type": json.dumps({"instances": ["Click here.", 7]}).encode(),
    "missing field": json.dumps({"params": {"beam_size": 1}}).encode(),
    "unknown field": json.dumps({"instance": ["Click here."]}).encode(),
    "sentence too long": json.dumps({"instances": ["word " * 401]}).encode(),
    "too many sentences": json.dumps({"instances": ["Click here."] * 65}).encode(),
    "unknown param": json.dumps({"instances": ["Click here."], "params": {"beam": 2}}).encode(),
}
EXPECTED = {"valid": {"200", "503"}, **{kind: {"400"} for kind in MALFORMED}}
ANSWERED = dict(EXPECTED, valid={"200"})  # an honest client that retries gets its translation
SHUTTING_DOWN = "shutting down"  # in the error of a 503 while draining


def valid_request(rng, max_sentences=3):
    count = rng.randint(1, max_sentences)
    return Request("valid", PREDICT, json.dumps({"instances": rng.sample(SENTENCES, count)}).encode())


def mixed_requests(count, malformed_share=0.3, seed=0):
    """`count` requests, `malformed_share` of them malformed (the kinds in turn), in a random order."""
    rng, kinds = random.Random(seed), list(MALFORMED)
    malformed = round(count * malformed_share)
    requests = [Request(kinds[i % len(kinds)], PREDICT, MALFORMED[kinds[i % len(kinds)]]) for i in range(malformed)]
    requests += [valid_request(rng) for _ in range(count - malformed)]
    rng.shuffle(requests)
    return requests


def single_sentences(seed):
    rng = random.Random(seed)
    while True:
        yield valid_request(rng, max_sentences=1)


class ServerProcess:
    """`t2t-keras serve --saved-model EXPORT --port 0`, its log in a file (so it never blocks on a pipe)."""

    def __init__(self, export, log_path):
        self.log_path = log_path
        self.log = open(log_path, "w")
        command = [sys.executable, "-m", "t2t_keras", "serve", "--saved-model", str(export), "--port", "0"]
        self.started = time.monotonic()
        self.process = subprocess.Popen(command, cwd=ROOT, stdout=self.log, stderr=subprocess.STDOUT,
                                        env=dict(os.environ, PYTHONPATH=str(ROOT), TF_CPP_MIN_LOG_LEVEL="2"))
        self.port = self._port()
        self.listening_s = time.monotonic() - self.started

    def _port(self, timeout=300):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self.process.poll() is None:
            match = re.search(r"Uvicorn running on http://127\.0\.0\.1:(\d+)", self.log_path.read_text())
            if match:
                return int(match.group(1))
            time.sleep(0.05)
        raise RuntimeError(f"the server did not start; its log: {self.log_path}")

    async def wait_ready(self, timeout=300):
        """Seconds from the start until GET /healthz answers 200, and how /healthz answered meanwhile."""
        client, seen, deadline = LoadClient(HOST, self.port), {}, time.monotonic() + timeout
        while time.monotonic() < deadline:
            outcome = await client.send(Request("health", "/healthz", b""))
            seen[outcome.status] = seen.get(outcome.status, 0) + 1
            if outcome.status == "200":
                client.close()
                return time.monotonic() - self.started, seen
            await asyncio.sleep(0.05)
        raise RuntimeError(f"the server did not become ready; its log: {self.log_path}")

    def memory_mb(self):
        """VmRSS (now) and VmHWM (peak) of the server process, in MB."""
        status = pathlib.Path(f"/proc/{self.process.pid}/status").read_text()
        return {name: round(int(re.search(rf"{name}:\s+(\d+) kB", status).group(1)) / 1024, 1)
                for name in ("VmRSS", "VmHWM")}

    def close(self):
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()
        self.log.close()


class LoadAverage:
    """The 1-minute load average, sampled every second while a phase runs."""

    def __init__(self):
        self.samples = {}
        self._phase = None

    async def run(self):
        while True:
            if self._phase is not None:
                self.samples.setdefault(self._phase, []).append(os.getloadavg()[0])
            await asyncio.sleep(1.0)

    def phase(self, name):
        self._phase = name

    def summary(self):
        return {name: {"min": round(min(v), 2), "mean": round(sum(v) / len(v), 2), "max": round(max(v), 2)}
                for name, v in self.samples.items()}


def percentile(values, share):
    values = sorted(values)
    return values[min(len(values) - 1, int(share * len(values)))] if values else None


def phase_summary(outcomes, seconds, expected=EXPECTED):
    """Counts of each status (also by kind), failures, and p50/p99 ms of the answered requests."""
    statuses, by_kind, failures = {}, {}, []
    for outcome in outcomes:
        statuses[outcome.status] = statuses.get(outcome.status, 0) + 1
        kind = by_kind.setdefault(outcome.kind, {})
        kind[outcome.status] = kind.get(outcome.status, 0) + 1
        if outcome.status not in expected[outcome.kind]:
            failures.append(f"{outcome.kind}: {outcome.status} {outcome.error[:120]}")
    answered = [o for o in outcomes if o.status not in (REFUSED, NO_ANSWER, TIMEOUT)]
    latency = {f"p{p}_ms": _ms(percentile([o.seconds for o in answered], p / 100)) for p in (50, 99)}
    for status in ("200", "503"):
        times = [o.seconds for o in answered if o.status == status]
        latency.update({f"p50_ms_{status}": _ms(percentile(times, 0.5)),
                        f"p99_ms_{status}": _ms(percentile(times, 0.99))})
    return {"requests": len(outcomes), "seconds": round(seconds, 1),
            "requests_per_s": round(len(outcomes) / seconds, 1),
            "statuses": statuses, "by_kind": by_kind, "failures": len(failures), "failure_examples": failures[:10],
            **latency}


def _ms(seconds):
    return None if seconds is None else round(seconds * 1000, 1)


def finished(client, outcomes, seconds, expected=EXPECTED):
    """The phase's summary, with the client's retries on connections the server had closed while idle."""
    client.close()
    return dict(phase_summary(outcomes, seconds, expected), retried_on_stale_connection=client.retried)


async def phase_malformed(server, memory, count=10_000, concurrency=200):
    """Phase 1; the server's memory after 1,000 and after `count` answers."""
    def on_outcome(outcomes):
        if len(outcomes) == 1000:
            memory["after_1000"] = server.memory_mb()

    client, start = LoadClient(HOST, server.port), time.monotonic()
    outcomes = await closed_loop(client, mixed_requests(count), concurrency, on_outcome=on_outcome)
    memory[f"after_{count}"] = server.memory_mb()
    return finished(client, outcomes, time.monotonic() - start)


async def phase_retrying(server, concurrency, count, max_attempts):
    """`count` requests of the mix from `concurrency` honest clients that send a 503 again after its Retry-After.

    It starts once the places the previous phase's clients left in the server's line of refused requests have
    been given up (a crowd of its own, not the aftermath of the one before), and says how long that took.
    """
    settled = await empty_line(server)
    client, start = LoadClient(HOST, server.port), time.monotonic()
    outcomes = await closed_loop(client, mixed_requests(count, seed=concurrency), concurrency,
                                 max_attempts=max_attempts)
    summary = finished(client, outcomes, time.monotonic() - start, ANSWERED)
    valid = [o for o in outcomes if o.kind == "valid"]
    retries = [o.retries for o in valid]
    batching = (await asyncio.to_thread(statz, server.port))["batching"]
    answered_per_s = sum(o.status == "200" for o in valid) / summary["seconds"]
    summary.update(concurrency=concurrency, max_retries=max(retries), p99_retries=percentile(retries, 0.99),
                   waited_for_empty_line_s=settled,
                   gave_up=sum(o.status == "503" for o in valid),
                   queue_sentences=batching["max_queue"], sentences_per_s=batching["sentences_per_second"],
                   queue_drain_ms=_ms(batching["max_queue"] / (batching["sentences_per_second"] or float("nan"))),
                   little_mean_ms=_ms(concurrency / answered_per_s))  # every client always waits on one request
    return summary


async def empty_line(server, timeout=60.0):
    """Seconds until no refused request keeps a place in the server's line (/statz), `timeout` at most."""
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        if (await asyncio.to_thread(statz, server.port))["batching"]["waiting_their_turn"] == 0:
            break
        await asyncio.sleep(0.5)
    return round(time.monotonic() - start, 1)


async def phase_capacity(server, seconds, concurrency=2 * SERVER["max_batch_size"]):
    """Answers a second of single-sentence requests from clients that keep the batches full."""
    client, start = LoadClient(HOST, server.port), time.monotonic()
    outcomes = await closed_loop(client, single_sentences(1), concurrency,
                                 stop=lambda: time.monotonic() - start > seconds)
    summary = finished(client, outcomes, time.monotonic() - start)
    summary["capacity_per_s"] = round(summary["statuses"].get("200", 0) / summary["seconds"], 1)
    return summary


async def phase_overload(server, capacity, factor, seconds):
    client, requests = LoadClient(HOST, server.port), single_sentences(2)
    outcomes, lateness = await open_loop(client, lambda _: next(requests), factor * capacity, seconds)
    summary = finished(client, outcomes, seconds)
    summary.update(offered_per_s=round(factor * capacity, 1), latest_start_lag_ms=_ms(lateness))
    return summary


async def phase_sigterm(server, memory, after, concurrency=200):
    """Phase 3: load, SIGTERM, clients stop once told the server is shutting down; the process's exit."""
    client, draining, facts = LoadClient(HOST, server.port), [], {}

    def on_outcome(outcomes):
        if outcomes[-1].status == "503" and SHUTTING_DOWN in outcomes[-1].error:
            draining.append(True)

    async def terminate():
        await asyncio.sleep(after)
        memory["before_sigterm"] = server.memory_mb()
        facts["statz"] = await asyncio.to_thread(statz, server.port)
        facts["sigterm_at"] = time.monotonic()
        server.process.send_signal(signal.SIGTERM)

    start = time.monotonic()
    stop = lambda: bool(draining) or server.process.poll() is not None or time.monotonic() - start > 120  # noqa: E731
    outcomes, _ = await asyncio.gather(closed_loop(client, single_sentences(3), concurrency, stop=stop,
                                                   on_outcome=on_outcome), terminate())
    exit_code = await asyncio.to_thread(server.process.wait, SERVER["drain_seconds"] + 60)
    exited_after = time.monotonic() - facts["sigterm_at"]
    summary = finished(client, outcomes, time.monotonic() - start)
    after_signal = phase_summary([o for o in outcomes if o.started >= facts["sigterm_at"]], 1.0)["statuses"]
    answered_after = [o.status for o in outcomes if o.started + o.seconds >= facts["sigterm_at"]]
    summary.update(exit_code=exit_code, exit_after_sigterm_s=round(exited_after, 2),
                   in_flight_at_sigterm=facts["statz"]["requests"]["in_flight_requests"],
                   statz_at_sigterm=facts["statz"],
                   statuses_sent_after_sigterm=after_signal, answered_200_after_sigterm=answered_after.count("200"),
                   refused_503_draining=sum(1 for o in outcomes if o.status == "503" and SHUTTING_DOWN in o.error),
                   refused_503_queue_full=sum(1 for o in outcomes if o.status == "503" and "max_queue" in o.error))
    return summary


async def phase_soak(server, seconds, every=20.0, concurrency=40):
    """Translating within the queue's bound for `seconds` (no 503s): the server's memory every `every` s."""
    client, start, samples = LoadClient(HOST, server.port), time.monotonic(), []
    rng = random.Random(4)

    async def sample():
        while time.monotonic() - start < seconds:
            await asyncio.sleep(every)
            translated = (await asyncio.to_thread(statz, server.port))["batching"]["sentences"]
            samples.append({"seconds": round(time.monotonic() - start), "sentences_translated": translated,
                            **server.memory_mb()})

    outcomes, _ = await asyncio.gather(
        closed_loop(client, iter(lambda: valid_request(rng), None), concurrency,
                    stop=lambda: time.monotonic() - start > seconds), sample())
    return dict(finished(client, outcomes, time.monotonic() - start), memory_mb=samples)


def statz(port):
    with urllib.request.urlopen(f"http://{HOST}:{port}/statz", timeout=10) as answer:
        return json.loads(answer.read())


async def measure(export, args, work):
    """The three phases against one server process; returns the results."""
    server, load = ServerProcess(export, work / "serve.log"), LoadAverage()
    sampler = asyncio.ensure_future(load.run())
    memory, phases = {}, {}
    try:
        load.phase("start")
        ready_s, health = await server.wait_ready()
        memory["ready"] = server.memory_mb()
        load.phase("malformed_10k")
        phases["malformed_10k"] = await phase_malformed(server, memory, args.malformed_requests)
        if args.soak_seconds > 0:
            load.phase("soak")
            phases["soak"] = await phase_soak(server, args.soak_seconds)
        for concurrency in args.concurrency:
            load.phase(f"retrying_{concurrency}")
            phases[f"retrying_{concurrency}"] = await phase_retrying(
                server, concurrency, max(args.retrying_requests, 3 * concurrency), args.max_attempts)
        load.phase("capacity")
        phases["capacity"] = await phase_capacity(server, args.capacity_seconds)
        load.phase("overload")
        phases["overload"] = await phase_overload(server, phases["capacity"]["capacity_per_s"], args.overload,
                                                  args.overload_seconds)
        memory["after_overload"] = server.memory_mb()
        load.phase("sigterm")
        phases["sigterm"] = await phase_sigterm(server, memory, args.sigterm_after)
    finally:
        sampler.cancel()
        server.close()
    return {"server": dict(SERVER, listening_s=round(server.listening_s, 1), ready_s=round(ready_s, 1),
                           healthz_while_loading=health),
            "phases": phases, "memory_mb": memory, "load_average": load.summary()}


def make_export(work, minutes):
    """`mini` trained `minutes` on the default corpus and exported, in `work` (an export already there is kept)."""
    export = work / "export"
    if (export / "saved_model.pb").exists():
        print(f"using the export in {export}", flush=True)
        return export
    # Fused elementwise ops compile for every new batch shape: in a run of minutes they cost more than they save.
    for command in (["train", "--config", "mini", "--run-dir", work / "run", "--minutes", str(minutes),
                     "--set", "training.fuse_elementwise=false"],
                    ["export", "--run-dir", work / "run", "--out", export]):
        print("t2t-keras", *command, flush=True)
        subprocess.run([sys.executable, "-m", "t2t_keras", *map(str, command)], cwd=ROOT, check=True,
                       env=dict(os.environ, PYTHONPATH=str(ROOT)))
    return export


def machine():
    lscpu = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    model = re.search(r"Model name:\s+(.+)", lscpu)
    return {"cpu": model.group(1).strip() if model else "unknown", "cores": os.cpu_count(),
            "python": sys.version.split()[0]}


def commit():
    return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                          text=True).stdout.strip()


def report(results):
    """The markdown page of the results."""
    phases = results["phases"]
    lines = ["# `t2t-keras serve` under load", "",
             f"{results['date']}, commit {results['commit']}, {results['machine']['cpu']}, "
             f"{results['machine']['cores']} cores; export {results['export']}. "
             "`python bench/bench_serving_load.py` (its docstring says how each phase runs).", "",
             "| phase | requests | req/s | 200 | 400 | 503 | failures | p50 ms | p99 ms | load avg (1 min) |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for name, phase in phases.items():
        s, load = phase["statuses"], results["load_average"].get(name, {})
        lines.append(f"| {name} | {phase['requests']:,} | {phase['requests_per_s']:,} | {s.get('200', 0):,} | "
                     f"{s.get('400', 0):,} | {s.get('503', 0):,} | {phase['failures']} | {phase['p50_ms']} | "
                     f"{phase['p99_ms']} | {load.get('min')}-{load.get('max')} |")
    lines += retrying_table(phases)
    server, memory, overload, sigterm = results["server"], results["memory_mb"], phases["overload"], phases["sigterm"]
    lines += ["", f"Server: batches of {server['max_batch_size']} sentences, a queue of "
              f"{server['max_queue_seconds']:g} s of work, a deadline of {server['deadline_seconds']:g} s, a drain of "
              f"{server['drain_seconds']:g} s; listening {server['listening_s']} s after the start, "
              f"ready {server['ready_s']} s after it (/healthz meanwhile: {server['healthz_while_loading']}).",
              f"Capacity: {phases['capacity']['capacity_per_s']} single-sentence requests/s. Overload (open loop, no "
              f"retries): offered {overload['offered_per_s']}/s; p50/p99 of its 200s {overload['p50_ms_200']}/"
              f"{overload['p99_ms_200']} ms, of its 503s {overload['p50_ms_503']}/{overload['p99_ms_503']} ms.",
              f"SIGTERM: {sigterm['in_flight_at_sigterm']} requests accepted and unanswered, "
              f"{sigterm['answered_200_after_sigterm']} answers 200 after it; {sigterm['refused_503_draining']} "
              f"answered 503 while draining, {sigterm['refused_503_queue_full']} 503 for a full queue (before it); "
              f"exit code {sigterm['exit_code']} after {sigterm['exit_after_sigterm_s']} s.",
              "Server memory (MB, VmRSS / VmHWM): " + ", ".join(
                  f"{name} {value['VmRSS']} / {value['VmHWM']}" for name, value in memory.items()) + "."]
    if "soak" in phases:
        lines.append("Soak (sentences translated: VmRSS / VmHWM MB): " + ", ".join(
            f"{m['sentences_translated']:,}: {m['VmRSS']} / {m['VmHWM']}" for m in phases["soak"]["memory_mb"]) + ".")
    lines.append("")
    return "\n".join(lines)


def retrying_table(phases):
    """The honest retrying crowds: latency of the valid requests from their first attempt, retries, drain time."""
    crowds = [phase for name, phase in phases.items() if name.startswith("retrying_")]
    if not crowds:
        return []
    lines = ["", "Honest clients, each sending a 503 again after its Retry-After (valid requests; latency from the "
             "first attempt, retries included; the queue's drain time is its bound over the measured throughput; "
             "clients / answers a second is the mean latency Little's law sets when every client always waits on "
             "a request):", "",
             "| clients | valid | answered | gave up | p50 ms | p99 ms | most retries | p99 retries | queue drain ms | "
             "clients / answers a second, ms |", "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for phase in crowds:
        valid = phase["by_kind"].get("valid", {})
        lines.append(f"| {phase['concurrency']:,} | {sum(valid.values()):,} | {valid.get('200', 0):,} | "
                     f"{phase['gave_up']} | {phase['p50_ms_200']} | {phase['p99_ms_200']} | {phase['max_retries']} | "
                     f"{phase['p99_retries']} | {phase['queue_drain_ms']} | {phase['little_mean_ms']} |")
    return lines


def headline(results):
    """The figures merged into summary.json."""
    phases = results["phases"]
    crowds = [phase for name, phase in phases.items() if name.startswith("retrying_")]
    return {"serving_10k_failures": phases["malformed_10k"]["failures"],
            "serving_overload_p99_ms": phases["retrying_200"]["p99_ms_200"] if "retrying_200" in phases else None,
            "serving_max_retries": max(phase["max_retries"] for phase in crowds) if crowds else None}


def update_summary(path, results):
    """Merges the headline figures into summary.json, keeping its other keys; written atomically."""
    summary = json.loads(path.read_text()) if path.exists() else {}
    summary.update(results["summary"])
    summary.setdefault("detail", {})["serving_load"] = (
        f"bench/results/serving_load.md: {results['machine']['cpu']}, {results['date']}")
    write_text_atomic(path, json.dumps(summary, indent=1) + "\n")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--saved-model", help="an export to serve (default: train and export mini in --work)")
    parser.add_argument("--work", default="/tmp/t2t-serving-load", help="where the run, export and log go")
    parser.add_argument("--train-minutes", type=float, default=3.0)
    parser.add_argument("--malformed-requests", type=int, default=10_000,
                        help="requests of phase 1 (default 10,000; fewer for a quick check of the bench itself)")
    parser.add_argument("--soak-seconds", type=float, default=0.0,
                        help="after phase 1, translate this long within the queue's bound, reading the server's "
                             "memory every 20 s (e.g. 300; default: no soak)")
    parser.add_argument("--concurrency", type=lambda text: [int(n) for n in text.split(",")], default=[50, 200, 1000],
                        help="honest retrying clients at once, one phase each (default 50,200,1000)")
    parser.add_argument("--retrying-requests", type=int, default=10_000,
                        help="requests in each retrying phase (at least 3 a client; default 10,000, as phase 1)")
    parser.add_argument("--max-attempts", type=int, default=30, help="an honest client gives up after this many 503s")
    parser.add_argument("--capacity-seconds", type=float, default=10.0)
    parser.add_argument("--overload", type=float, default=4.0, help="the overload's rate, in times the capacity")
    parser.add_argument("--overload-seconds", type=float, default=15.0)
    parser.add_argument("--sigterm-after", type=float, default=3.0, help="seconds of load before the SIGTERM")
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "serving_load"),
                        help="writes OUT.json and OUT.md")
    parser.add_argument("--summary", default=str(ROOT / "bench" / "results" / "summary.json"),
                        help="summary.json to merge the headline figures into ('' for none)")
    args = parser.parse_args(argv)
    work = pathlib.Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    export = pathlib.Path(args.saved_model) if args.saved_model else make_export(work, args.train_minutes)
    results = {"date": datetime.date.today().isoformat(), "commit": commit(), "machine": machine(),
               "export": str(export), "trained_minutes": None if args.saved_model else args.train_minutes,
               "load_average_at_start": os.getloadavg(), **asyncio.run(measure(export, args, work))}
    results["summary"] = headline(results)
    write_text_atomic(args.out + ".json", json.dumps(results, indent=1) + "\n")
    write_text_atomic(args.out + ".md", report(results))
    if args.summary:
        update_summary(pathlib.Path(args.summary), results)
    print(report(results))
    failures = [phase["failures"] for name, phase in results["phases"].items() if name != "overload"]
    return 0 if not any(failures) else 1


if __name__ == "__main__":
    sys.exit(main())
