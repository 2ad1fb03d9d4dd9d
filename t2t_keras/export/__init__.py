"""Export and serving.

* `translator_module`: the `tf.Module` an export saves (tokenizer + beam search in the graph, its signatures).
* `saved_model`: `export_run` / `export_translator`, written atomically.
* `loaded`: `SavedModelTranslator`, translating from Python with an export.
* `rest_api`, `batcher`, `server`: the TF-Serving-compatible REST server (`serve`, `create_app`).
* `attention_api`, `live_page`: the server's attention endpoint and its page to try a model (`page/`).
"""
