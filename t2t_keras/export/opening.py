"""One way to open an export: a SavedModel of any task, a CTranslate2 directory or a LiteRT file, loaded once.

    exported = open_export("exports/base")        # SavedModelTranslator, SavedModelContinuer, CTranslate2Translator
                                                  # or, for a .tflite file, LiteRTTranslator
    exported.task                                 # "translation" or "lm"
"""

import pathlib

from t2t_keras.errors import T2TError

CTRANSLATE2_MODEL = "model.bin"  # what a CTranslate2 model directory holds
LITERT_SUFFIX = ".tflite"  # a LiteRT export is one file


def open_export(path, batch_size=32):
    """The loaded export at `path`, as the object of its kind (see the module docstring)."""
    path = pathlib.Path(path)
    if path.is_file() or path.suffix == LITERT_SUFFIX:
        from t2t_keras.export.litert_translator import LiteRTTranslator

        return LiteRTTranslator(path)
    if (path / CTRANSLATE2_MODEL).exists():
        from t2t_keras.export.ctranslate2_translator import CTranslate2Translator

        return CTranslate2Translator(path, batch_size=batch_size)
    if not (path / "saved_model.pb").exists():
        raise T2TError(f"{path} is neither a SavedModel (no saved_model.pb) nor a CTranslate2 model "
                       f"(no {CTRANSLATE2_MODEL}), and not a LiteRT file: give what `t2t-keras export --out` wrote.")
    from t2t_keras.export.loaded import SavedModelTranslator, load_saved_model

    loaded = load_saved_model(path)
    if "continue" in loaded.signatures:
        from t2t_keras.export.continuer import SavedModelContinuer

        return SavedModelContinuer(path, batch_size=batch_size, loaded=loaded)
    return SavedModelTranslator(path, batch_size=batch_size, loaded=loaded)
