"""A decoder-only causal language model: the Transformer's decoder blocks without cross-attention."""

import keras
from keras import ops

from t2t_keras.language_models.single_stack import SingleStackModel
from t2t_keras.layers import Decoder
from t2t_keras.model import StepOutput


@keras.saving.register_keras_serializable(package="t2t_keras")
class CausalLanguageModel(SingleStackModel):
    """p(x_t | x_<t) with N masked-self-attention + feed-forward blocks (a GPT-style decoder).

    The blocks are `DecoderBlock(use_cross_attention=False)`, so masking,
    caching and pre-/post-LN are those of the translation decoder. Arguments:
    see `SingleStackModel`.

    Call arguments:
        inputs: int `(batch, length)` ids starting with BOS, padded with `pad_id`.
        training: whether dropout is active.

    Returns:
        float32 logits `(batch, length, vocab_size)`: position t predicts token t + 1.

    Decoding interface (the one `decoding.greedy_decode` and `decoding.beam_search`
    use, so generation reuses them): `encode(prompt)` returns the prompt,
    `init_cache(prompt, max_length)` empty self-attention slots, and
    `decode_step(tokens, cache, step)` one cached step; prompts are fed as a
    forced prefix (`decoding.continue_prompts`).
    """

    def __init__(self, vocab_size, **kwargs):
        super().__init__(vocab_size, **kwargs)
        block_config = dict(self.block_config(), use_cross_attention=False)
        self.decoder = Decoder(self.num_layers, block_config, dtype=self.dtype_policy, name="decoder")

    def build(self, input_shape=None):
        """Creates every weight; the shapes of the inputs do not matter."""
        self.build_embeddings()
        self.decoder.build((None, None, self.hidden_dim))
        self.built = True

    def call(self, inputs, training=None):
        hidden = self.decoder(self.embed(inputs, training=training), training=training).output
        return self.project(hidden)

    def source_mask(self, prompt):
        return self.padding_mask(prompt)

    def encode(self, prompt, training=None):
        """Nothing to encode: the prompt is fed token by token as a forced prefix."""
        return prompt

    def init_cache(self, prompt, max_length):
        """Empty self-attention slots for `max_length` steps, one row per prompt."""
        return self.decoder.init_cache(None, max_length, batch_size=ops.shape(prompt)[0])

    def decode_step(self, tokens, cache, step, source_mask=None, training=False, growing=False):
        """Logits for `tokens` `(batch, step_len)` at positions `step ...`; returns a `StepOutput`. `growing`: a
        cache from `init_cache(prompt, None)` (see `Transformer.decode_step`)."""
        x = self.embed(tokens, step, training)
        hidden, _, cross_weights, cache = self.decoder.decode_step(x, cache, None if growing else step,
                                                                   training=training)
        return StepOutput(self.project(hidden), cache, cross_weights)
