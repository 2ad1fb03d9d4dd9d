"""Export: a trained model as a SavedModel that takes strings and returns translations.

* `translator_module`: the `tf.Module` an export saves (tokenizer + beam search in the graph, its signatures).
* `saved_model`: `export_run` / `export_translator`, written atomically; `quantization`: int8 Dense weights.
* `loaded`: `SavedModelTranslator`, translating (and scoring) from Python with an export.
* `ctranslate2_converter`, `ctranslate2_export`, `ctranslate2_translator`: the CTranslate2 export and
  `CTranslate2Translator`, which has the same interface as `SavedModelTranslator`.

The HTTP server for exports (and for CTranslate2 models) is `t2t_keras.serving`.
"""
