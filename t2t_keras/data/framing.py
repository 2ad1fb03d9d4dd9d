"""How a sentence pair becomes the model's three sequences, with the model's own special ids.

    source     = source pieces + [eos]
    target_in  = [decoder_start] + target pieces      (the decoder's input, shifted right: §3.1)
    target_out = target pieces + [eos]                 (the labels)

padded with `pad`, which weighs 0 in the loss. The ids are the model's (`model.special_ids`): the package's
fixed ones for a run trained here (pad 0, eos 3, decoder start = bos 2), a checkpoint's own for an imported
run (OPUS-MT pads with its last id, ends with 0 and starts from the pad id; NLLB starts from its eos).

The pieces are a tokenizer's `tokenize` for the tokenizers trained here. An imported checkpoint's tokenizer
(`PretrainedTokenizer`) numbers each side with its own files and puts the side's fixed prefix first (NLLB: the
language code); its `tokenize_pieces` gives that without the end of sentence its `tokenize` appends, so the
three sequences are those transformers trains with: `input_ids = tokenizer(source)`,
`labels = tokenizer(text_target=target)`, `decoder_input_ids = shift_tokens_right(labels, pad, decoder_start)`.
"""

from typing import NamedTuple

from t2t_keras.special_ids import SpecialIds


class Framing(NamedTuple):
    """The ids a pair's sequences are framed and padded with (see the module docstring)."""

    pad: int
    eos: int
    decoder_start: int

    @classmethod
    def of(cls, special_ids=None):
        """The framing of a model's `SpecialIds` (or a mapping of its fields; None: the package's fixed ids)."""
        ids = SpecialIds.of(special_ids)
        return cls(ids.pad, ids.eos, ids.decoder_start)


def piece_functions(tokenizer):
    """`(source, target)`: each maps a string tensor (a scalar, or `(batch,)`) to the int32 pieces of that side
    that the framing wraps (ragged for a batch)."""
    pieces = getattr(tokenizer, "tokenize_pieces", None)
    if pieces is None:  # the tokenizers trained here: one vocabulary, no ids of their own around the pieces
        return tokenizer.tokenize, tokenizer.tokenize
    return pieces, lambda strings: pieces(strings, target=True)
