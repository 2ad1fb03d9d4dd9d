"""The data files a config names, and where each kind of config reads them from.

A config names its corpus by file paths: `data.train_files`, `data.dev_files`, `data.test_files`, and the same
keys of each `data.sources` entry. Where a relative path points depends on where the config came from:

    a run's config.yaml     relative to the run directory. A run writes the paths inside it that way
                            (RUN/distilled/train.src as `distilled/train.src`) and every other path absolute, so a
                            run directory that is copied or moved still finds its own files, and no path depends
                            on the directory a command started in (`for_run`, `in_run`).
    a config file           relative to the file's folder when the file is there (a run's config.yaml used as
                            `--config`), else relative to the current directory (`in_folder`).
    --set                   relative to the current directory.

Run directories written before this layout hold their paths as they were typed, relative to the directory
`train` started in: a relative path that is not in the run but is in the current directory is read from there.

    for_run({"train_files": ["runs/s/distilled/train.src", ...]}, "runs/s")   # {"train_files": ["distilled/..."]}
"""

import os

PATH_KEYS = ("train_files", "dev_files", "test_files")
# RUN/config.yaml: named here, where nothing imports TensorFlow (the CLI reads it before TensorFlow loads:
# switches/kernels.py), and taken from here by `runs.RunDirectory`.
RUN_CONFIG_FILE = "config.yaml"


def is_run_directory(path):
    """Whether `path` (a path, or a `runs.RunDirectory`) is a run directory: it holds the run's config.yaml. (An
    export is not; read before TensorFlow loads, by the switches, `open_artifact` and the server.)"""
    config = getattr(path, "config_path", None) or os.path.join(path, RUN_CONFIG_FILE)
    return os.path.exists(config)


def map_paths(data, change):
    """A copy of the data section `data` (a dict) with every file path it names replaced by `change(path)`."""
    data = dict(data)
    for key in PATH_KEYS:
        if isinstance(data.get(key), (list, tuple)):
            data[key] = [change(str(path)) for path in data[key]]
    if isinstance(data.get("sources"), (list, tuple)):
        data["sources"] = [map_paths(entry, change) if isinstance(entry, dict) else entry
                           for entry in data["sources"]]
    return data


def paths(data):
    """Every file path the data section `data` (a dict) names, in order."""
    named = []

    def keep(path):
        named.append(path)
        return path

    map_paths(data, keep)
    return named


def absolute(data):
    """`data` with its relative paths made absolute from the current directory (as `--set` means them)."""
    return map_paths(data, os.path.abspath)


def for_run(data, run_dir):
    """`data` as a run's config.yaml at `run_dir` holds it: paths inside the run relative to it, others absolute."""
    root = os.path.realpath(run_dir)

    def change(path):
        real = os.path.realpath(path)
        if real == root or real.startswith(root + os.sep):
            return os.path.relpath(real, root)
        return os.path.abspath(path)

    return map_paths(data, change)


def in_run(data, run_dir):
    """`data` as read from the config.yaml of the run at `run_dir`: relative paths absolute from the run, or from
    the current directory where the file is there and not in the run (runs written before `for_run`)."""
    return map_paths(data, lambda path: _anchored(path, run_dir, missing_in_folder=True))


def in_folder(data, folder):
    """`data` as read from a config file in `folder`: a relative path that exists there is made absolute from it,
    the others are read from the current directory."""
    return map_paths(data, lambda path: _anchored(path, folder, missing_in_folder=False))


def _anchored(path, folder, missing_in_folder):
    """`path` read from a config in `folder`. A relative path found in neither place is taken from `folder` when
    `missing_in_folder` (a run's own files), else left relative to the current directory."""
    if os.path.isabs(path):
        return path
    anchored = os.path.join(folder, path)
    if os.path.exists(anchored):
        return os.path.abspath(anchored)
    if os.path.exists(path):
        return os.path.abspath(path)
    return os.path.abspath(anchored) if missing_in_folder else path


def moved(old, new):
    """`[(old path, new path), ...]` where the data sections `old` and `new` (dicts) differ in file paths alone
    (the same number of files in the same places), None where they differ in anything else."""
    if map_paths(old, lambda path: "") != map_paths(new, lambda path: ""):
        return None
    return [(before, after) for before, after in zip(paths(old), paths(new)) if before != after]
