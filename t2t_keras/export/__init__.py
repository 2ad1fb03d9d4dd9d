"""Export: a trained run as a SavedModel of its task (strings in, translations or continuations out), or CTranslate2.

* `translator_module`: the `tf.Module` a translation export saves (tokenizer + beam search in the graph, its
  signatures); `continuer_module`: the one an lm export saves (tokenizer + sampling).
* `saved_model`: `export_run` for every task, `export_translator` / `export_continuer`, written atomically;
  `quantization`: int8 Dense weights.
* `loaded`: `SavedModelTranslator`, translating (and scoring) from Python with an export; `continuer`:
  `SavedModelContinuer`, continuing prompts with an lm export.
* `opening`: `open_export(path)`, any of the above (and a CTranslate2 model) loaded once, as the object of its kind.
* `ctranslate2_converter`, `ctranslate2_export`, `ctranslate2_translator`: the CTranslate2 export and
  `CTranslate2Translator`, which has the same interface as `SavedModelTranslator`.

The HTTP server for every export is `t2t_keras.serving`.
"""
