"""The special token ids: padding, unknown, begin and end of sentence, and where decoding starts.

Tokenizers trained here use the fixed ids below (`data.tokenizer`), and so do a
run's defaults. A model carries its own `SpecialIds` (`model.special_ids` in the
config, `Transformer.special_ids`), which its masks and the training loss read: an
imported checkpoint keeps the ids it was trained with (OPUS-MT pads with the last
id and ends sentences with 0). The decoders start from `BOS_ID` and stop at
`EOS_ID`, and exports map out-of-range ids to `UNK_ID`.
"""

import dataclasses

PAD_ID = 0
UNK_ID = 1
BOS_ID = 2
EOS_ID = 3


@dataclasses.dataclass(frozen=True)
class SpecialIds:
    """The special ids of one model, today's fixed ids by default."""

    pad: int = PAD_ID  # padding: masked in attention, weight 0 in the loss
    unk: int = UNK_ID  # a piece the vocabulary lacks
    bos: int = BOS_ID  # the tokenizer's beginning of sentence
    eos: int = EOS_ID  # end of sentence: appended to the source, the decoder's last output
    decoder_start: int = BOS_ID  # the decoder's first input (Marian: its pad id; M2M-100: its eos id)

    def __post_init__(self):
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"special_ids.{field.name} must be an integer >= 0. Received: {field.name}={value!r}")
        if len({self.pad, self.unk, self.eos}) < 3:
            raise ValueError(f"special_ids.pad, unk and eos must be three different ids. Received: pad={self.pad}, "
                             f"unk={self.unk}, eos={self.eos}")

    @classmethod
    def of(cls, value):
        """`value` as `SpecialIds`: itself, or a mapping of some of its fields (the others default); None: the
        defaults. Unknown names are a ValueError naming the allowed ones."""
        if value is None or isinstance(value, cls):
            return value or cls()
        if not isinstance(value, dict):
            raise ValueError(f"special_ids must be a mapping of {', '.join(FIELDS)}. Received: {value!r}")
        unknown = sorted(set(value) - set(FIELDS))
        if unknown:
            raise ValueError(f"special_ids has unknown keys {unknown}. Allowed: {', '.join(FIELDS)}.")
        return cls(**value)

    def to_dict(self):
        return dataclasses.asdict(self)


FIELDS = tuple(field.name for field in dataclasses.fields(SpecialIds))
