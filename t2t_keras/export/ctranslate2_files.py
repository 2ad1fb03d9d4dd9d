"""The files of a CTranslate2 export besides CTranslate2's own (`model.bin`, `config.json`): what
`ctranslate2_export` writes and `artifacts.ctranslate2` reads, in a process without TensorFlow."""

METADATA_FILE = "t2t_keras.json"  # the decoding defaults, tokenizer kind, quality models: see ctranslate2_export
VMAP_FILE = "vmap.txt"  # the name CTranslate2 loads its vocabulary map from
TOKENIZER_FILE = "tokenizer.model"
PRETRAINED_TOKENIZER_FILE = "tokenizer.zip"  # an imported checkpoint's tokenizer archive
