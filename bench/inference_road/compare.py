"""Lines equal between two `decode_every_road.sh` outputs, per road; exits 1 if any road differs.

    python bench/inference_road/compare.py OLD_OUT NEW_OUT
"""

import pathlib
import sys


def main(old, new):
    differ = 0
    print("| road | lines | equal |\n|---|---:|---:|")
    for path in sorted(pathlib.Path(old).glob("*.txt")):
        if path.name == "times.txt":
            continue
        a = path.read_text(encoding="utf-8").splitlines()
        other = pathlib.Path(new) / path.name
        b = other.read_text(encoding="utf-8").splitlines() if other.exists() else []
        equal = sum(x == y for x, y in zip(a, b))
        differ += equal != len(a) or len(a) != len(b)
        print(f"| {path.stem} | {len(a)} | {equal} |")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:3]))
