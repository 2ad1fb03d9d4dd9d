"""The Translation-<lang> indexes of a Debian archive: fetched by apt into a scratch lists directory, read.

The archive publishes package descriptions per language as
``dists/<suite>/<component>/i18n/Translation-<lang>``; each stanza names a
package, the ``Description-md5`` of its English description and the
description in that language. apt fetches them when ``Acquire::Languages``
names the language; :func:`apt_update_command` points it at a lists
directory of our own, so the system's lists, caches and locks are left alone
and root is not needed. apt keeps the files as the archive serves them or
recompressed (lz4 here); :func:`read_index` reads each form.
"""

import bz2
import gzip
import hashlib
import logging
import lzma
import pathlib
import re
import shutil
import subprocess
import typing

from t2t_keras.errors import DataError

logger = logging.getLogger(__name__)

# A list file apt writes: <mirror>_dists_<suite>_<component>_i18n_Translation-<lang>[.<compression>]
INDEX_NAME = re.compile(
    r"^(?P<prefix>.+)_dists_(?P<suite>.+)_(?P<component>[^_]+)_i18n_Translation-(?P<lang>[A-Za-z_]+)"
    r"(?P<compression>\.(?:gz|xz|bz2|lzma|lz4|zst))?$"
)
_DECOMPRESS = {".gz": gzip.decompress, ".xz": lzma.decompress, ".lzma": lzma.decompress, ".bz2": bz2.decompress}
RELEASE_FIELDS = ("Origin", "Suite", "Codename", "Version", "Date")


class Entry(typing.NamedTuple):
    """One stanza of a Translation index: package, md5 of its English description, the description."""

    package: str
    md5: str
    description: str  # the field's value: the short description, then the long one's lines


class IndexFile(typing.NamedTuple):
    """A Translation index apt stored, with what its name says."""

    path: pathlib.Path
    suite: str
    component: str
    lang: str


def apt_update_command(lists_dir, languages) -> list[str]:
    """``apt-get update`` fetching only the Translation indexes of ``languages`` into ``lists_dir``."""
    lists_dir = pathlib.Path(lists_dir)
    return [
        "apt-get", "update",
        "-o", f"Acquire::Languages={','.join(languages)}",
        "-o", f"Dir::State::Lists={lists_dir}",
        "-o", f"Dir::Cache={_apt_cache_dir(lists_dir)}",
        "-o", "Acquire::IndexTargets::deb::Packages::DefaultEnabled=false",
        "-o", "Acquire::IndexTargets::deb-src::Sources::DefaultEnabled=false",
    ]


def update_lists(lists_dir, languages) -> None:
    """Run :func:`apt_update_command`; the system's own lists and caches are left alone.

    Without apt, indexes already in ``lists_dir`` (fetched elsewhere and
    copied there) are used as they are.
    """
    command = apt_update_command(lists_dir, languages)
    if shutil.which("apt-get") is None:
        if _has_indexes(lists_dir, languages):
            logger.warning("apt-get is missing: using the indexes already in %s", lists_dir)
            return
        raise DataError(
            "The Translation indexes of the Debian archive are fetched with apt, which this system lacks. "
            f"On a Debian or Ubuntu machine run `{' '.join(command)}`, then copy that directory to {lists_dir} here."
        )
    for directory in (pathlib.Path(lists_dir) / "partial", _apt_cache_dir(lists_dir)):
        directory.mkdir(parents=True, exist_ok=True)  # apt refuses to start without lists/partial
    logger.info("Fetching the Translation-%s indexes with apt-get update", ", Translation-".join(languages))
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=1800)
    except (OSError, subprocess.TimeoutExpired) as error:
        raise DataError(f"`{' '.join(command)}` failed: {error}") from error
    if done.returncode != 0:
        tail = "\n".join(done.stderr.strip().splitlines()[-5:])
        raise DataError(f"`{' '.join(command)}` failed (exit {done.returncode}):\n{tail}")


def _apt_cache_dir(lists_dir) -> pathlib.Path:
    """apt's scratch ``Dir::Cache``, beside the lists directory."""
    lists_dir = pathlib.Path(lists_dir)
    return lists_dir.parent / f"{lists_dir.name}-cache"


def _has_indexes(lists_dir, languages) -> bool:
    try:
        find_index_files(lists_dir, languages)
    except DataError:
        return False
    return True


def find_index_files(lists_dir, languages) -> dict[str, list[IndexFile]]:
    """The Translation indexes of ``languages`` in ``lists_dir``, by language.

    Raises:
      DataError: a language has none; the message gives the command that fetches them.
    """
    found = {lang: [] for lang in languages}
    lists_dir = pathlib.Path(lists_dir)
    for path in sorted(lists_dir.glob("*_i18n_Translation-*")) if lists_dir.is_dir() else ():
        match = INDEX_NAME.match(path.name)
        if match and match["lang"] in found and path.is_file():
            found[match["lang"]].append(IndexFile(path, match["suite"], match["component"], match["lang"]))
    missing = [lang for lang, files in found.items() if not files]
    if missing:
        raise DataError(
            f"No Translation-{' or Translation-'.join(missing)} index in {lists_dir}. Fetch them with "
            f"`{' '.join(apt_update_command(lists_dir, languages))}` (no root needed), or check that the system's "
            "apt sources name a Debian archive."
        )
    return found


def read_index(path) -> str:
    """The text of an index apt stored: plain, or compressed as apt may keep it (gz, xz, bz2, lz4, zst).

    Python reads gz, xz and bz2 itself; lz4 and zst go through apt's own
    ``apt-helper cat-file``, which reads every format apt writes.
    """
    path = pathlib.Path(path)
    match = INDEX_NAME.match(path.name)
    compression = match["compression"] if match else None
    if not compression:
        return path.read_text(encoding="utf-8")
    if compression in _DECOMPRESS:
        return _DECOMPRESS[compression](path.read_bytes()).decode("utf-8")
    helper = "/usr/lib/apt/apt-helper"
    try:
        done = subprocess.run([helper, "cat-file", str(path)], capture_output=True, timeout=600, check=True)
    except (OSError, subprocess.SubprocessError) as error:
        raise DataError(f"Cannot decompress {path} ({compression}) with `{helper} cat-file`: {error}") from error
    return done.stdout.decode("utf-8")


def parse_index(text, lang) -> list[Entry]:
    """The stanzas of a Translation index (deb822): ``Package``, ``Description-md5``, ``Description-<lang>``.

    The description keeps its first line (the short description) and the
    continuation lines with their first space removed, joined by newlines.
    """
    entries = []
    for block in re.split(r"\n[ \t]*\n", text.replace("\r\n", "\n")):
        fields, name = {}, None
        for line in block.split("\n"):
            if line[:1] in (" ", "\t") and name is not None:
                fields[name].append(line[1:])
            elif ":" in line:
                name, value = line.split(":", 1)
                fields[name] = [value.strip()]
        description = fields.get(f"Description-{lang}")
        if description is not None and "Package" in fields and "Description-md5" in fields:
            entries.append(Entry(fields["Package"][0], fields["Description-md5"][0], "\n".join(description)))
    return entries


def release_info(index_file: IndexFile) -> dict:
    """The ``dists/`` name and component of an index, and its release's fields (from its InRelease file)."""
    prefix = INDEX_NAME.match(index_file.path.name)["prefix"]
    info = {"dists": index_file.suite, "component": index_file.component}
    for name in (f"{prefix}_dists_{index_file.suite}_InRelease", f"{prefix}_dists_{index_file.suite}_Release"):
        path = index_file.path.with_name(name)
        if path.is_file():
            text = path.read_text(encoding="utf-8", errors="replace")
            for field in RELEASE_FIELDS:
                found = re.search(rf"^{field}: *(.*)$", text, re.MULTILINE)
                if found:
                    info[field.lower()] = found.group(1).strip()
            break
    return info


def file_info(index_file: IndexFile) -> dict:
    """Name, language, suite, component, size and sha256 of an index file."""
    data = index_file.path.read_bytes()
    return {"file": index_file.path.name, "lang": index_file.lang, "suite": index_file.suite,
            "component": index_file.component, "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
