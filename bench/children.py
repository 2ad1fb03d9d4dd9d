"""Child processes of the benchmark harnesses that end with their harness.

A harness stopped by SIGTERM (`kill`, `pkill`, a CI timeout) dies at once under Python's default handler and leaves
its running `t2t-keras train` behind, which then shares the cores with whatever is measured next. `run` turns SIGTERM
into SystemExit while the child runs, so that `subprocess.run` kills and reaps the child before the harness exits
(with status 143, as a process stopped by SIGTERM); Ctrl+C does the same by default.

    from bench.children import run
    run([sys.executable, "-m", "t2t_keras", "train", ...], check=True)
"""

import signal
import subprocess
import sys


def run(command, **kwargs):
    """`subprocess.run(command, **kwargs)`, whose child is killed if this process receives SIGTERM meanwhile."""
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    try:
        return subprocess.run(command, **kwargs)
    finally:
        signal.signal(signal.SIGTERM, previous)
