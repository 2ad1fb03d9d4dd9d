"""The token strings a CTranslate2 export reads and writes, from text and back, for either kind of tokenizer.

* A run's SentencePiece model (`tokenizer.model`), applied with the `sentencepiece` package: a source is its
  pieces (CTranslate2 appends the end token, `add_source_eos`), PAD and BOS are never generated.
* An imported checkpoint's tokenizer archive (`tokenizer.zip`, `data.pretrained_tokenizer`): a source is the ids
  its Hugging Face tokenizer makes (NLLB: the source language's code, the pieces, the end id), as token strings
  of its vocabulary; a multilingual model's translation starts with the target language's code
  (`target_prefix`); its padding token (and its decoder start token, unless that is its end token) is never
  generated.

Both give `Sources` (the token rows, their lengths as the model reads them, which were cut, the target prefix)
and texts from generated token rows.
"""

from typing import NamedTuple

EOS_PIECE = "</s>"


class Sources(NamedTuple):
    """A batch of lines as CTranslate2 takes them."""

    tokens: list  # per line, its source tokens (empty: a line without pieces)
    lengths: list  # per line, its length as the model reads it, the end included
    truncated: list  # per line, whether it was cut to the model's length
    target_prefix: list  # tokens every translation starts with (a multilingual model's target language)


class SentencePieceTokens:
    """A run's SentencePiece model (see the module docstring)."""

    never_generated = [["<pad>"], ["<s>"]]
    languages = False

    def __init__(self, path, max_length):
        import sentencepiece

        self.processor = sentencepiece.SentencePieceProcessor(model_file=str(path))
        self.max_length = max_length

    def sources(self, lines, request=None):
        pieces = self.processor.encode(lines, out_type=str) if lines else []
        longest = self.max_length - 1
        kept = [p[:longest] for p in pieces]
        return Sources(kept, [len(p) + 1 for p in kept], [len(p) > longest for p in pieces], [])

    def texts(self, hypotheses):
        return [self.processor.decode_pieces([t for t in tokens if t != EOS_PIECE]) for tokens in hypotheses]

    def encode(self, sentences):
        """Token rows of `sentences` for forced decoding (pieces; CTranslate2 adds the end token)."""
        return self.processor.encode(sentences, out_type=str) if sentences else []


class PretrainedTokens:
    """An imported checkpoint's tokenizer archive (see the module docstring)."""

    def __init__(self, path, max_length):
        from t2t_keras.data.pretrained_tokenizer import PretrainedTokenizer
        from t2t_keras.decoding.layout import is_multilingual

        self.tokenizer = PretrainedTokenizer.load(path)
        self.ids = self.tokenizer.special_ids
        self.source_pieces, self.target_pieces = self.tokenizer.pieces("source"), self.tokenizer.pieces("target")
        self.target_ids = {piece: index for index, piece in enumerate(self.target_pieces)}
        self.max_length, self.path = max_length, path
        self.languages = is_multilingual(self.tokenizer)
        never = {self.ids.pad} | ({self.ids.decoder_start} if self.ids.decoder_start != self.ids.eos else set())
        self.never_generated = [[self.target_pieces[i]] for i in sorted(never)]

    def sources(self, lines, request):
        from t2t_keras.decoding.layout import layout_of, source_pieces

        layout = layout_of(self.tokenizer, self.ids, request.src_lang, request.tgt_lang,
                           f"the export's tokenizer ({self.path}, manifest.json \"languages\")")
        pieces = source_pieces(self.tokenizer, lines).to_list() if lines else []
        rows = [layout.source(ids, self.max_length) for ids in pieces]
        tokens = [[self.source_pieces[i] for i in row] if ids else [] for (row, _), ids in zip(rows, pieces)]
        return Sources(tokens, [len(row) for row, _ in rows], [cut for _, cut in rows],
                       [self.target_pieces[i] for i in layout.target_prefix])

    def texts(self, hypotheses):
        if not hypotheses:
            return []
        import tensorflow as tf

        unknown = self.ids.unk
        ids = [[self.target_ids.get(token, unknown) for token in tokens] or [self.ids.eos] for tokens in hypotheses]
        ragged = tf.ragged.constant(ids, dtype=tf.int32)
        return [text.decode("utf-8") for text in self.tokenizer.detokenize(ragged).numpy()]
