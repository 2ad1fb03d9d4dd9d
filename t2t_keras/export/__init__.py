"""Export: a trained run as a SavedModel of its task (strings in, translations or continuations out), or CTranslate2.

* `translator_module`: the `tf.Module` a translation export saves (tokenizer + beam search in the graph, its
  signatures); `continuer_module`: the one an lm export saves (tokenizer + sampling).
* `saved_model`: `export_run` for every task, `export_translator` / `export_continuer`, written atomically;
  `quantization`: int8 Dense weights.
* `search_table`: the searches an in-graph module holds, by beam size (`SearchTable`), for every module above and
  `litert_module`.
* `ctranslate2_converter`, `ctranslate2_export`: the CTranslate2 export; `litert_export`: the LiteRT file.
* `formats`: `export_format`, what `t2t-keras export` calls: one run in one of the three formats.

Writing is here; reading what was written (a SavedModel, a CTranslate2 directory, a LiteRT file) is
`t2t_keras.artifacts`, and the HTTP server for every export is `t2t_keras.serving`.
"""
