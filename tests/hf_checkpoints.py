"""Small Hugging Face translation checkpoints in the real layout, made with transformers itself (nothing downloaded).

Random weights (every parameter and the logits bias drawn anew, so that LayerNorms and biases matter), SentencePiece
models trained by the `sentencepiece` package on lines written here, tokenizer files written by transformers' own
tokenizer classes (`MarianTokenizer`, `NllbTokenizer`), beside `save_pretrained`'s config.json and weights.
"""

import json
import pathlib
import shutil

import numpy as np
import sentencepiece as spm

from tests.helpers import ENGLISH, GERMAN

NLLB_CODES = ["eng_Latn", "deu_Latn", "fra_Latn"]
# Characters no SentencePiece model here has seen: they become the unknown piece.
UNKNOWN = ["€", "✓", "漢", "ß̈"]
# The sizes of the tests' checkpoints, and those of OPUS-MT's base models (opus-mt-en-de) for the benchmark.
TINY = dict(d_model=16, encoder_layers=2, decoder_layers=2, encoder_attention_heads=2, decoder_attention_heads=2,
            encoder_ffn_dim=32, decoder_ffn_dim=32)
BASE = dict(d_model=512, encoder_layers=6, decoder_layers=6, encoder_attention_heads=8, decoder_attention_heads=8,
            encoder_ffn_dim=2048, decoder_ffn_dim=2048)


def sentences(count, seed=0, tags=()):
    """`count` lines of both toy languages, some with characters outside the models, some with a `tags` prefix,
    some empty, some with extra spaces."""
    rng = np.random.default_rng(seed)
    words = ENGLISH + GERMAN
    lines = []
    for index in range(count):
        line = " ".join(words[i] for i in rng.integers(0, len(words), size=rng.integers(1, 10)))
        if index % 5 == 1:
            line += " " + UNKNOWN[index % len(UNKNOWN)] + "."
        if index % 7 == 2:
            line = "  " + line.replace(" ", "  ", 1) + " "
        if tags and index % 3 == 0:
            line = f"{tags[index % len(tags)]} {line}"
        lines.append("" if index % 17 == 5 else line)
    return lines


def train_sentencepiece(path, lines, vocab_size, model_type="unigram", **ids):
    """A SentencePiece model trained on `lines`, written to `path`."""
    text = pathlib.Path(path).with_suffix(".txt")
    text.write_text("\n".join(line for line in lines if line.strip()) + "\n", encoding="utf-8")
    spm.SentencePieceTrainer.train(input=str(text), model_prefix=str(pathlib.Path(path).with_suffix("")),
                                   vocab_size=vocab_size, model_type=model_type, minloglevel=2,
                                   character_coverage=1.0, **ids)
    model = pathlib.Path(path).with_suffix(".model")
    if model != pathlib.Path(path):
        shutil.move(model, path)
    return path


def _perturbed(model, seed):
    """Every parameter (and Marian's logits bias) drawn anew, so the checkpoint is no default initialisation."""
    import torch

    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.copy_(torch.randn(parameter.shape, generator=generator) * 0.3)
        if hasattr(model, "final_logits_bias"):
            model.final_logits_bias.copy_(torch.randn(model.final_logits_bias.shape, generator=generator))
    return model.eval()


def _marian_vocabulary(model_path, front, back):
    """Marian's vocab.json: the `front` tokens, the SentencePiece model's pieces, then the `back` tokens."""
    processor = spm.SentencePieceProcessor(model_file=str(model_path))
    vocabulary = {token: index for index, token in enumerate(front)}
    for piece in (processor.id_to_piece(i) for i in range(processor.get_piece_size())):
        vocabulary.setdefault(piece, len(vocabulary))
    for token in back:
        vocabulary.setdefault(token, len(vocabulary))
    return vocabulary


def marian_checkpoint(directory, activation="swish", scale_embedding=True, separate=False, eos_first=True, seed=0,
                      sizes=TINY, made_up=0):
    """An OPUS-MT style checkpoint in `directory`: a shared vocabulary (or separate ones) in vocab.json, </s> at 0
    and <pad> last (or, `eos_first=False`, <pad> 0, <unk> 1 and </s> 3: a non-zero end id); `sizes` of
    MarianConfig, and `made_up` more tokens in the vocabulary (never made by the SentencePiece models)."""
    from transformers import GenerationConfig, MarianConfig, MarianMTModel, MarianTokenizer

    directory = pathlib.Path(directory)
    directory.mkdir(parents=True)
    work = directory.parent / f"{directory.name}-work"
    work.mkdir()
    lines = sentences(300, seed=seed + 1)
    source = train_sentencepiece(work / "source.spm", lines, 60)
    target = train_sentencepiece(work / "target.spm", lines, 50) if separate else source
    made = [f"▁madeup{i}" for i in range(made_up)]
    front, back = ((["</s>", "<unk>", ">>deu<<", ">>fra<<"], made + ["<pad>"]) if eos_first
                   else (["<pad>", "<unk>", ">>deu<<", "</s>"], made))
    vocabularies = [_marian_vocabulary(source, front, back)]
    paths = [work / "vocab.json"]
    if separate:
        vocabularies.append(_marian_vocabulary(target, front, back))
        paths.append(work / "target_vocab.json")
    for path, vocabulary in zip(paths, vocabularies):
        path.write_text(json.dumps(vocabulary), encoding="utf-8")
    tokenizer = MarianTokenizer(str(source), str(target), str(paths[0]),
                                target_vocab_file=str(paths[-1]) if separate else None, separate_vocabs=separate)
    tokenizer.save_pretrained(directory)
    pad, eos = vocabularies[0]["<pad>"], vocabularies[0]["</s>"]
    config = MarianConfig(vocab_size=len(vocabularies[0]), decoder_vocab_size=len(vocabularies[-1]), **sizes,
                          max_position_embeddings=64,
                          activation_function=activation, scale_embedding=scale_embedding, pad_token_id=pad,
                          eos_token_id=eos, decoder_start_token_id=pad, forced_eos_token_id=eos,
                          share_encoder_decoder_embeddings=not separate)
    _perturbed(MarianMTModel(config), seed).save_pretrained(directory)
    GenerationConfig(num_beams=3, max_length=64, decoder_start_token_id=pad, pad_token_id=pad, eos_token_id=eos,
                     forced_eos_token_id=eos, bad_words_ids=[[pad]]).save_pretrained(directory)
    return directory


def nllb_checkpoint(directory, seed=0):
    """An NLLB-style checkpoint: fairseq's ids, language codes as tokens, pre-LN, sentencepiece.bpe.model beside the
    tokenizer.json that `NllbTokenizer.save_pretrained` writes."""
    from transformers import M2M100Config, M2M100ForConditionalGeneration, NllbTokenizer

    directory = pathlib.Path(directory)
    work = directory.parent / f"{directory.name}-work"
    work.mkdir(parents=True)
    train_sentencepiece(work / "sentencepiece.bpe.model", sentences(300, seed=seed + 2), 70, model_type="bpe")
    tokenizer = NllbTokenizer.from_pretrained(work, src_lang=NLLB_CODES[0], tgt_lang=NLLB_CODES[1],
                                              extra_special_tokens=NLLB_CODES)
    tokenizer.save_pretrained(directory)
    shutil.copy(work / "sentencepiece.bpe.model", directory / "sentencepiece.bpe.model")
    config = M2M100Config(vocab_size=len(tokenizer) + 2, d_model=16, encoder_layers=2, decoder_layers=2,
                          encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=32, decoder_ffn_dim=32,
                          max_position_embeddings=64, activation_function="relu", scale_embedding=True,
                          encoder_layerdrop=0.05, decoder_layerdrop=0.05)
    _perturbed(M2M100ForConditionalGeneration(config), seed).save_pretrained(directory)
    return directory


def m2m100_checkpoint(directory, seed=0):
    """An M2M-100 checkpoint: fairseq's dictionary in vocab.json, sentencepiece.bpe.model, the language codes
    `__xx__` after the dictionary (written by `M2M100Tokenizer.save_pretrained`), 8 made-up words after them."""
    from transformers import M2M100Config, M2M100ForConditionalGeneration, M2M100Tokenizer

    directory = pathlib.Path(directory)
    work = directory.parent / f"{directory.name}-work"
    work.mkdir(parents=True)
    model = train_sentencepiece(work / "sentencepiece.bpe.model", sentences(300, seed=seed + 5), 70, model_type="bpe")
    processor = spm.SentencePieceProcessor(model_file=str(model))
    vocabulary = {"<s>": 0, "<pad>": 1, "</s>": 2, "<unk>": 3}
    for piece in (processor.id_to_piece(i) for i in range(3, processor.get_piece_size())):
        vocabulary.setdefault(piece, len(vocabulary))
    (work / "vocab.json").write_text(json.dumps(vocabulary), encoding="utf-8")
    tokenizer = M2M100Tokenizer(str(work / "vocab.json"), str(model), src_lang="en", tgt_lang="de")
    tokenizer.save_pretrained(directory)
    config = M2M100Config(vocab_size=len(vocabulary) + 100 + 8, d_model=16, encoder_layers=2, decoder_layers=1,
                          encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=32,
                          decoder_ffn_dim=32, max_position_embeddings=64, activation_function="gelu",
                          scale_embedding=False)
    _perturbed(M2M100ForConditionalGeneration(config), seed).save_pretrained(directory)
    return directory


def edit_json(path, **changes):
    """Changes keys of a JSON file in place (None removes the key)."""
    path = pathlib.Path(path)
    document = json.loads(path.read_text(encoding="utf-8"))
    for key, value in changes.items():
        if value is None:
            document.pop(key, None)
        else:
            document[key] = value
    path.write_text(json.dumps(document, indent=2), encoding="utf-8")
