"""A cluster of worker processes on localhost for the multi-worker tests: ports no other process is handed, and
workers that never outwait a peer that failed."""

import pathlib
import random
import socket
import subprocess
import tempfile
import time

# Below the kernel's ephemeral range (`ip_local_port_range`): the kernel never hands these out on its own, to a
# `bind(port 0)` or to an outgoing connection, so nothing started meanwhile (a Beam pipeline's gRPC channels, a
# test server) takes a port between the moment it is chosen and the moment the worker binds it.
FALLBACK_EPHEMERAL_START = 32768
SPAN = 10_000
POLL_SECONDS = 0.2


def ephemeral_start():
    """The first port of the kernel's ephemeral range (Linux; elsewhere the usual 32768)."""
    try:
        return int(pathlib.Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return FALLBACK_EPHEMERAL_START


def cluster_ports(count, rng=None):
    """`count` distinct ports, free now, from the `SPAN` ports below the ephemeral range, drawn by `rng` (default:
    from the operating system's randomness, never from `random`'s shared state: a test process that seeded it, as
    `keras.utils.set_random_seed` does, would draw the same ports as another seeded the same way)."""
    rng = rng or random.SystemRandom()
    high = ephemeral_start()
    low = max(1024, high - SPAN)
    ports = []
    while len(ports) < count:
        port = rng.randrange(low, high)
        if port in ports:
            continue
        with socket.socket() as probe:
            try:
                probe.bind(("0.0.0.0", port))
            except OSError:
                continue
        ports.append(port)
    return ports


def run_workers(commands, envs, cwd, timeout):
    """Runs one process per command (with its env) and waits for all; returns `[(returncode, stdout, stderr)]`.

    A worker that fails leaves its peers waiting for it forever (a collective never completes): the others are
    killed at once, and all of them at `timeout` seconds, so a failure costs seconds and names its cause in the
    failed worker's stderr instead of a timeout's."""
    with tempfile.TemporaryDirectory() as folder:
        streams, processes = [], []
        for index, (command, env) in enumerate(zip(commands, envs)):
            out = open(pathlib.Path(folder, f"{index}.out"), "w+", encoding="utf-8")  # noqa: SIM115 - closed below
            err = open(pathlib.Path(folder, f"{index}.err"), "w+", encoding="utf-8")  # noqa: SIM115
            streams.append((out, err))
            processes.append(subprocess.Popen(command, stdout=out, stderr=err, text=True, cwd=cwd, env=env))
        deadline, why = time.monotonic() + timeout, ""
        try:
            while None in [process.poll() for process in processes] and not why:  # every one polled
                failed = [index for index, process in enumerate(processes) if process.returncode not in (None, 0)]
                if failed:
                    why = f"killed: worker {failed[0]} failed"
                elif time.monotonic() > deadline:
                    why = f"killed after the {timeout} s timeout"
                else:
                    time.sleep(POLL_SECONDS)
        finally:
            killed = set()
            for index, process in enumerate(processes):
                if process.poll() is None:
                    process.kill()
                    killed.add(index)
                process.wait()
        results = []
        for index, (process, (out, err)) in enumerate(zip(processes, streams)):
            out.seek(0)
            err.seek(0)
            note = f"\n({why or 'killed'})" if index in killed else ""
            results.append((process.returncode, out.read(), err.read() + note))
            out.close()
            err.close()
        return results
