"""Pretrained translation checkpoints (OPUS-MT / Marian, M2M-100, NLLB) imported as run directories."""
