"""The input side (§5.1): sentence pairs from a corpus to length-bucketed batches of token ids.

    sources      the configured corpus of a split: a prepared corpus, text files, TSV or TFDS
    libreoffice  the default corpus, the English-German LibreOffice help, prepared and cached
    debian_descriptions  Debian package descriptions, English-German, paired by md5 and split by package
    apt_translations  the archive's Translation-<lang> indexes, fetched by apt into a scratch directory, read
    help_html    paragraphs with their ids from the help pages' HTML
    corpus       a prepared parallel corpus on disk (split files and metadata), written atomically
    text_files   strict reading of parallel text and TSV files, line-accurate errors
    tfds_source  TensorFlow Datasets translation corpora
    tokenizers   the tokenizers of data.tokenizer (bpe, unigram, wordpiece) behind one interface
    tokenizer    the shared SentencePiece vocabulary (BPE or unigram), trained in Python, applied in-graph
    wordpiece    the shared WordPiece vocabulary, learned by TF-Text's tool, applied in-graph
    batching     tokenization, length filtering and token-budget length buckets in tf.data
    pair_stream  the pairs of text or TSV files one at a time, for corpora too large to hold
    prepare      one-off preparation of a training corpus into shuffled, tokenized shards
    shards       the shard files: token ids and lengths in NumPy files
    manifest     what a preparation was made from (checksums), its shards and counts
    batch_plan   each epoch's batches of prepared shards as a pure function of their lengths
    prepared     training batches from prepared shards, with exact resume by seeking
"""
