"""The manifest of a prepared corpus (``manifest.json``): what was prepared from what, and how far.

It records the corpus files with their sizes and sha256 checksums, the
tokenizer (file, kind, size, checksum), the preparation settings, every
written shard with its pair and token counts, and the pairs read, kept and
dropped (empty or over-long). It is rewritten atomically after every window
of shards, with ``complete`` false until the last one: an interrupted
preparation resumes from it. A corpus file whose size or checksum differs
from the manifest's is refused, never mixed with shards of the old one.
"""

import json
import pathlib

from t2t_keras.checksums import file_sha256
from t2t_keras.errors import DataError
from t2t_keras.files import write_text_atomic

MANIFEST_FILE = "manifest.json"
FORMAT = "t2t_keras prepared corpus"
VERSION = 1


def file_fingerprint(path) -> dict:
    """``{"path", "size", "sha256"}`` of ``path``, read in 1 MiB chunks."""
    path = pathlib.Path(path)
    if not path.is_file():
        raise DataError(f"{path} does not exist: check data.train_files.")
    return {"path": str(path.resolve()), "size": path.stat().st_size, "sha256": file_sha256(path)}


def read_manifest(directory):
    """The manifest of ``directory`` as a dict, or None when there is none."""
    path = pathlib.Path(directory) / MANIFEST_FILE
    if not path.exists():
        return None
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as error:
        raise DataError(f"{path} is not valid JSON ({error}): prepare into a new directory, "
                        "or pass overwrite=True to prepare again.") from None
    if manifest.get("format") != FORMAT or manifest.get("version") != VERSION:
        raise DataError(f"{path} is not a version-{VERSION} manifest of a prepared corpus: prepare into a new "
                        "directory, or pass overwrite=True to prepare again.")
    return manifest


def load_complete_manifest(directory) -> dict:
    """The manifest of a finished preparation in ``directory``, or a DataError saying what to do."""
    manifest = read_manifest(directory)
    if manifest is None:
        raise DataError(f"{directory} holds no {MANIFEST_FILE}: prepare the corpus there first (prepare_corpus).")
    if not manifest["complete"]:
        raise DataError(f"The preparation in {directory} was interrupted after {len(manifest['shards'])} shards: "
                        "run prepare_corpus again with the same arguments to finish it.")
    return manifest


def write_manifest(directory, manifest: dict) -> None:
    """Writes ``manifest`` to ``directory/manifest.json`` atomically."""
    write_text_atomic(pathlib.Path(directory) / MANIFEST_FILE, json.dumps(manifest, indent=1, sort_keys=True) + "\n")


def check_same_corpus(directory, recorded: list, current: list) -> bool:
    """Raises DataError naming the first corpus file that differs from the one the shards were prepared from;
    returns whether the files moved: the same sizes and checksums read from other paths."""
    def content(entries):
        return [{key: value for key, value in entry.items() if key != "path"} for entry in entries]

    if content(recorded) == content(current):
        return [entry["path"] for entry in recorded] != [entry["path"] for entry in current]
    if [entry["path"] for entry in recorded] != [entry["path"] for entry in current]:
        raise DataError(
            f"{directory} was prepared from {[e['path'] for e in recorded]}, not from "
            f"{[e['path'] for e in current]}: prepare into a new directory, or pass overwrite=True to replace it."
        )
    for old, new in zip(recorded, current):
        for key in ("size", "sha256"):
            if old[key] != new[key]:
                raise DataError(
                    f"{new['path']} changed after {directory} was prepared from it ({key} {old[key]} then, "
                    f"{new[key]} now): its shards would mix two versions of the corpus. Prepare into a new "
                    "directory, or pass overwrite=True to prepare this one again."
                )


def check_same_settings(directory, recorded: dict, current: dict) -> None:
    """Raises DataError when the preparation settings differ from those the shards were written with."""
    changed = {key: (recorded.get(key), value) for key, value in current.items() if recorded.get(key) != value}
    if changed:
        listed = ", ".join(f"{key}={old!r} then, {new!r} now" for key, (old, new) in sorted(changed.items()))
        raise DataError(f"{directory} was prepared with other settings ({listed}): prepare into a new directory, "
                        "or pass overwrite=True to prepare this one again.")
