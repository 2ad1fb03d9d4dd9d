"""The special token ids, fixed for every vocabulary: padding, unknown, begin and end of sentence.

Tokenizers are trained with these ids (`data.tokenizer`), the model masks
`PAD_ID` (`Transformer.pad_id`), the decoders start from `BOS_ID` and stop at
`EOS_ID`, and exports map out-of-range ids to `UNK_ID`.
"""

PAD_ID = 0
UNK_ID = 1
BOS_ID = 2
EOS_ID = 3
