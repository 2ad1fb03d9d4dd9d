"""Export: a trained model as a SavedModel that takes strings and returns translations.

* `translator_module`: the `tf.Module` an export saves (tokenizer + beam search in the graph, its signatures).
* `saved_model`: `export_run` / `export_translator`, written atomically.
* `loaded`: `SavedModelTranslator`, translating from Python with an export.

The HTTP server for exports is `t2t_keras.serving`.
"""
