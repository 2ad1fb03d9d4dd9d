"""The sha256 of an export's files, recorded when it is written and checked when it is loaded.

    EXPORT/assets.extra/export.sha256.json
                                          every file of the SavedModel but the inspection files beside it
                                          (saved_model.pb, fingerprint.pb, variables/*, assets/*)

`export_translator` and `export_continuer` record it inside the staged directory, so an export is renamed into
place with its record. `load_saved_model` (translate --saved-model, serve, evaluate of an export) checks it
first: a damaged variables file is named with both checksums instead of failing inside TensorFlow's reader, or
worse, loading. An export written before the record existed loads unchecked.
"""

import pathlib

from t2t_keras.checksums import record_files, verify_files
from t2t_keras.runs import INSPECTION_DIR
from t2t_keras.switches.kernels import export_record

RECORD = pathlib.Path(INSPECTION_DIR) / "export.sha256.json"


def record_export(export_dir):
    """Records the sha256 of every file of the export at `export_dir` outside its inspection files in `RECORD`."""
    export_dir = pathlib.Path(export_dir)
    paths = [path for path in sorted(export_dir.rglob("*"))
             if path.is_file() and INSPECTION_DIR not in path.relative_to(export_dir).parts]
    record_files(export_dir / RECORD, paths)


def verify_export(export_dir):
    """Checks the files of the export at `export_dir` against `RECORD` (`CorruptFileError` naming a damaged one,
    and the command that exports it again); returns False for an export without the record."""
    export_dir = pathlib.Path(export_dir)
    run = (export_record(export_dir) or {}).get("run")
    again = f"t2t-keras export --run-dir {run} --out {export_dir} --overwrite" if run else "t2t-keras export " \
        "--overwrite, from its run"
    return verify_files(export_dir / RECORD, f"Copy the export again from where it came from, or export it again "
                        f"({again}).")
