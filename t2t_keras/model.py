"""The Transformer of "Attention Is All You Need" as a subclassed `keras.Model`."""

import dataclasses
from typing import Any, NamedTuple

import keras
from keras import ops

from t2t_keras import architecture
from t2t_keras.errors import ConfigError
from t2t_keras.layers import (
    AdaptiveSoftmax,
    Decoder,
    Encoder,
    LearnedPositionEmbedding,
    LogitsBias,
    SinusoidalPositionEncoding,
    TokenEmbedding,
    masks,
)
from t2t_keras.layers.arguments import constructor_arguments, store_arguments
from t2t_keras.layers.block import BLOCK_ARGUMENTS
from t2t_keras.layers.dense import Dense, project
from t2t_keras.layers.dropout import Dropout
from t2t_keras.special_ids import SpecialIds


class StepOutput(NamedTuple):
    """`Transformer.decode_step`: float32 logits of the new positions and the updated cache."""

    logits: Any  # (batch, step_len, vocab_size)
    cache: Any  # per decoder layer, {"self": {"key", "value"}, "cross": {"key", "value"}}
    cross_weights: Any  # per layer, (batch, heads, step_len, source_len)


@keras.saving.register_keras_serializable(package="t2t_keras")
class Transformer(keras.Model):
    """Encoder-decoder Transformer (§3), post-LN by default as in the paper.

    Names map to the paper as follows: `hidden_dim` = d_model,
    `intermediate_dim` = d_ff, `num_heads` = h, `num_layers` = N,
    `key_dim` = d_k, `value_dim` = d_v, `dropout` = P_drop. Label smoothing
    (ε_ls) belongs to the loss, not the model.

    Args:
        vocab_size: size of the shared (or target) vocabulary.
        hidden_dim, num_layers, num_heads, intermediate_dim: as above.
        key_dim, value_dim: per-head sizes; default hidden_dim / num_heads.
        num_decoder_layers: decoder depth when it differs from the encoder's.
        dropout: P_drop on embeddings + positions and on every sublayer output (§5.4).
        attention_dropout: dropout on attention weights (0 in the paper).
        activation_dropout: dropout inside the feed-forward network (0 in the paper).
        activation: feed-forward nonlinearity.
        position_encoding: "sinusoidal" (§3.5), "learned" (Table 3 row E) or
            "relative" (T5's relative position bias in every self-attention,
            nothing added to the embeddings: `relative_buckets`,
            `relative_max_distance`).
        max_length: longest sequence the model accepts (tokens, EOS included);
            sizes the learned position tables.
        tie_embeddings: "all" shares one matrix between source embedding,
            target embedding and pre-softmax projection (§3.4); "target" ties
            only the target embedding and the projection; "none" unties all.
        source_vocab_size: source vocabulary when `tie_embeddings` is not "all";
            defaults to `vocab_size`.
        normalize_first: pre-LN blocks and a final LayerNorm per stack.
        layer_norm_epsilon: LayerNorm epsilon.
        softmax: "full" (§3.4) or "adaptive" (`AdaptiveSoftmax`, Grave et al.,
            2017), which cannot be tied to the embedding: with it "all" ties
            only the source and target embeddings, and "target" is refused.
        adaptive_cutoffs: where the adaptive softmax's tail clusters start.
        scale_embeddings: multiply the embeddings by sqrt(d_model) (§3.4).
        position_sinusoid: the sinusoid's layout, "interleaved" (§3.5), "split"
            (Marian) or "fairseq" (`SinusoidalPositionEncoding`).
        position_offset: the sinusoid's index of position 0 (fairseq: 2).
        final_logits_bias: a trained bias added to the logits (Marian).
        relative_buckets, relative_max_distance: T5's relative position
            buckets (`RelativePositionBias`), with `position_encoding="relative"`.
        relative_bias_per_layer: with `position_encoding="relative"`, a table
            in every layer's self-attention (umT5) instead of one per stack
            shared by its layers (T5).
        normalization: "layer" (LayerNorm, §3.1) or "rms" (T5's RMS
            normalisation, `RMSNormalization`).
        gated_feed_forward: T5 v1.1's gated feed-forward network (`FeedForward`).
        use_bias: biases in the attention and feed-forward projections (T5: none).
        scale_attention: 1/sqrt(d_k) in attention (§3.2.1; T5: none).
        scale_decoder_output: multiply the decoder output by d_model^-0.5
            before the projection (T5 v1.0, whose projection is the tied embedding).
        special_ids: `SpecialIds` (or a mapping of its fields): the padding id
            is masked everywhere (`pad_id`); the others are the model's to
            expose (the tokenizer's and the searches' ids). Default: today's.

    Call arguments:
        inputs: `(source, target_in)`, integer `(batch, source_len)` and
            `(batch, target_len)`; target_in starts with BOS (teacher forcing).
        training: whether dropout is active.

    Returns:
        float32 logits `(batch, target_len, vocab_size)`.

    The parts, each with one return shape: `encode` (memory), `decode`
    (logits), `encode_with_attention` / `decode_with_attention` (the same with
    every layer's attention weights, for inspection), and `init_cache` +
    `decode_step` for incremental decoding (`decoding/`).

    References:
        Vaswani et al., 2017.
    """

    def __init__(self, vocab_size, hidden_dim=512, num_layers=6, num_heads=8, intermediate_dim=2048,
                 key_dim=None, value_dim=None, num_decoder_layers=None, dropout=0.1, attention_dropout=0.0,
                 activation_dropout=0.0, activation="relu", position_encoding="sinusoidal", max_length=1024,
                 tie_embeddings="all", source_vocab_size=None, normalize_first=False, layer_norm_epsilon=1e-6,
                 softmax="full", adaptive_cutoffs=None, scale_embeddings=True, position_sinusoid="interleaved",
                 position_offset=0, final_logits_bias=False, special_ids=None, relative_buckets=32,
                 relative_max_distance=128, relative_bias_per_layer=False, normalization="layer",
                 gated_feed_forward=False, use_bias=True, scale_attention=True, scale_decoder_output=False, **kwargs):
        super().__init__(**kwargs)
        architecture.check_choice("tie_embeddings", tie_embeddings, architecture.TIE_CHOICES)
        architecture.check_choice("position_encoding", position_encoding, architecture.POSITION_CHOICES)
        architecture.check_position_switches(position_encoding, position_sinusoid, position_offset, hidden_dim)
        architecture.check_tied_vocabularies(tie_embeddings, vocab_size, source_vocab_size)
        architecture.check_softmax(softmax, tie_embeddings)
        architecture.check_choice("normalization", normalization, architecture.NORMALIZATION_CHOICES)
        architecture.check_relative_switches(relative_buckets, relative_max_distance)
        architecture.check_per_layer_bias(position_encoding, relative_bias_per_layer)
        store_arguments(self, Transformer, locals())
        self.special_ids = SpecialIds.of(special_ids)
        self._make_embeddings()
        self._make_stacks()

    def _make_embeddings(self):
        policy = self.dtype_policy
        self.target_embedding = TokenEmbedding(self.vocab_size, self.hidden_dim, scale=self.scale_embeddings,
                                               dtype=policy, name="target_embedding")
        if self.tie_embeddings == "all":
            self.source_embedding = self.target_embedding
        else:
            self.source_embedding = TokenEmbedding(
                self.source_vocab_size or self.vocab_size, self.hidden_dim, scale=self.scale_embeddings, dtype=policy,
                name="source_embedding"
            )
        self.output_projection = None
        if self.softmax == "adaptive":
            self.output_projection = AdaptiveSoftmax(self.vocab_size, self.adaptive_cutoffs or (), dtype=policy,
                                                     name="adaptive_softmax")
        elif self.tie_embeddings == "none":
            self.output_projection = Dense(
                self.vocab_size, use_bias=False, dtype=policy, name="output_projection"
            )
        self.logits_bias = LogitsBias(self.vocab_size, dtype=policy, name="logits_bias") \
            if self.final_logits_bias else None
        if self.position_encoding == "learned":
            self.source_position = LearnedPositionEmbedding(self.max_length, dtype=policy, name="source_position")
            self.target_position = LearnedPositionEmbedding(self.max_length, dtype=policy, name="target_position")
        elif self.position_encoding == "relative":  # in the attention (the stacks' RelativePositionBias)
            self.source_position = self.target_position = None
        else:
            self.source_position = self.target_position = SinusoidalPositionEncoding(
                layout=self.position_sinusoid, offset=self.position_offset, dtype=policy, name="position")
        self.embedding_dropout = Dropout(self.dropout, dtype=policy, name="embedding_dropout")

    def _make_stacks(self):
        block_config = {name: getattr(self, name) for name in BLOCK_ARGUMENTS}  # the model's own values
        policy = self.dtype_policy
        relative = {"relative_buckets": self.relative_buckets if self.position_encoding == "relative" else 0,
                    "relative_max_distance": self.relative_max_distance,
                    "relative_bias_per_layer": self.relative_bias_per_layer}
        self.encoder = Encoder(self.num_layers, block_config, **relative, dtype=policy, name="encoder")
        decoder_layers = self.num_decoder_layers or self.num_layers
        self.decoder = Decoder(decoder_layers, block_config, **relative, dtype=policy, name="decoder")

    def build(self, input_shape=None):
        """Creates every weight; the shapes of the inputs do not matter."""
        shape = (None, None, self.hidden_dim)
        for layer in {id(x): x for x in (self.source_embedding, self.target_embedding)}.values():
            layer.build()
        for layer in {id(x): x for x in (self.source_position, self.target_position) if x is not None}.values():
            layer.build(shape)
        for layer in (self.output_projection, self.logits_bias):
            if layer is not None:
                layer.build(shape)
        self.encoder.build(shape)
        self.decoder.build(shape, shape)
        self.built = True

    @property
    def pad_id(self):
        """The padding id, masked everywhere (`special_ids.pad`)."""
        return self.special_ids.pad

    def source_mask(self, source):
        """`(batch, source_len)` boolean mask of real (non-padding) source tokens."""
        return masks.padding_mask(source, self.pad_id)

    def _embed(self, token_ids, embedding, position, start_index=0, training=None):
        x = embedding(token_ids)
        if position is not None:
            x = position(x, start_index=start_index)
        return self.embedding_dropout(x, training=training)

    def encode_with_attention(self, source, training=None):
        """`EncoderOutput(output, weights)` for source ids: the encoder output and every layer's weights."""
        x = self._embed(source, self.source_embedding, self.source_position, training=training)
        return self.encoder(x, self.source_mask(source), training=training)

    def encode(self, source, training=None):
        """Encoder output ("memory") `(batch, source_len, hidden_dim)` for source ids."""
        return self.encode_with_attention(source, training=training).output

    def project(self, hidden, output_ids=None, output_weights=None):
        """Pre-softmax projection to float32 logits, over the whole vocabulary or over `output_ids` only.

        Logits are cast to float32 so the softmax and the loss are computed in
        full precision under mixed-precision policies. With the adaptive
        softmax they are already log-probabilities, which the log-softmax of
        the loss and of the decoders leaves unchanged.

        `output_ids` int32 `(S,)` (a vocabulary shortlist, `decoding.shortlist`) gives logits `(..., S)`
        for those ids, in that order: only their rows of the embedding (or columns of the projection's
        kernel) are multiplied, `output_weights(output_ids)` when given (a search takes them once, not every
        step). A quantized projection and the adaptive softmax compute every logit and gather: still exact,
        not faster.
        """
        projection = self.output_projection
        if self.scale_decoder_output:
            hidden = hidden * ops.cast(self.hidden_dim ** -0.5, hidden.dtype)
        if output_ids is not None and output_weights is None:
            output_weights = self.output_weights(output_ids)
        if output_ids is not None and output_weights is not None:
            if projection is None:
                logits = self.target_embedding.project(hidden, rows=output_weights)
            else:
                logits = project(hidden, ops.cast(output_weights, hidden.dtype))
        elif projection is None:
            logits = self.target_embedding.project(hidden, output_ids)
        else:
            logits = projection(hidden)
            if output_ids is not None:
                logits = ops.take(logits, output_ids, axis=-1)
        logits = ops.cast(logits, "float32")
        return logits if self.logits_bias is None else self.logits_bias(logits, output_ids)

    def output_weights(self, output_ids):
        """The output projection's weights of the int32 `(S,)` `output_ids` alone, for `project`: the `(S,
        hidden_dim)` embedding rows (tied) or the `(hidden_dim, S)` kernel columns (a float `Dense`); None where
        `project` computes every logit and gathers (an int8 projection, the adaptive softmax)."""
        projection = self.output_projection
        if projection is None:
            rows = getattr(self.target_embedding, "rows", None)  # an int8 embedding has none
            return rows(output_ids) if rows is not None else None
        if isinstance(projection, keras.layers.Dense) and projection.quantization_mode is None:
            return ops.take(projection.kernel, output_ids, axis=1)
        return None

    def decode_with_attention(self, target_in, memory, source_mask=None, training=None):
        """`DecoderOutput(output, self_weights, cross_weights)` for `target_in` (teacher forcing),
        with `output` the float32 logits `(batch, target_len, vocab_size)`."""
        x = self._embed(target_in, self.target_embedding, self.target_position, training=training)
        out = self.decoder(x, memory, source_mask, training=training)
        return out._replace(output=self.project(out.output))

    def decode(self, target_in, memory, source_mask=None, training=None):
        """Float32 logits `(batch, target_len, vocab_size)` for `target_in` given the encoder output."""
        return self.decode_with_attention(target_in, memory, source_mask, training=training).output

    def init_cache(self, memory, max_length):
        """Decoder cache for up to `max_length` steps: self-attention slots and cross-attention keys/values.

        `max_length` None: a growing cache, whose self-attention keys/values each step appends
        (`decode_step(..., growing=True)`); its shape changes from step to step, so a loop over it needs relaxed
        shape invariants (`decoding.loops.search_loop`) and cannot be compiled with XLA, but a step reads and
        writes only the positions decoded so far.
        """
        return self.decoder.init_cache(memory, max_length)

    def decode_step(self, tokens, cache, step, source_mask=None, training=False, output_ids=None, growing=False,
                    output_weights=None):
        """Incremental decoding: logits for `tokens` `(batch, step_len)` at positions `step ...`.

        `cache` comes from `init_cache` (or the previous step) and already
        holds the encoder output's keys/values; `growing` for a cache from `init_cache(memory, None)`.
        Returns a `StepOutput` with the updated cache. `output_ids` `(S,)` restricts the logits to those ids
        (see `project`, which also takes their `output_weights`).
        """
        x = self._embed(tokens, self.target_embedding, self.target_position, step, training)
        hidden, _, cross_weights, cache = self.decoder.decode_step(x, cache, None if growing else step, source_mask,
                                                                   training=training)
        logits = self.project(hidden) if output_ids is None else self.project(hidden, output_ids, output_weights)
        return StepOutput(logits, cache, cross_weights)

    def call(self, inputs, training=None):
        source, target_in = inputs
        memory = self.encode(source, training=training)
        return self.decode(target_in, memory, self.source_mask(source), training=training)

    def get_config(self):
        config = super().get_config()
        config.update({name: getattr(self, name) for name in MODEL_ARGUMENTS})
        config["special_ids"] = self.special_ids.to_dict()
        return config

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        if "pad_id" in config:  # a model saved before special_ids held its padding id alone
            ids = SpecialIds.of(config.get("special_ids")).to_dict()
            config["special_ids"] = {**ids, "pad": config.pop("pad_id")}
        return cls(**config)


MODEL_ARGUMENTS = constructor_arguments(Transformer)


def build_transformer(model_config, dtype=None, name="transformer"):
    """A `Transformer` from a `config.ModelConfig`; `dtype` may be a mixed-precision policy name (None: the policy
    of `model.weights_dtype`)."""
    arguments = dataclasses.asdict(model_config)
    del arguments["weights_dtype"]  # the dtype policy's
    architecture = arguments.pop("architecture")
    if architecture != "encoder_decoder":
        raise ConfigError(f"model.architecture={architecture!r} is not the encoder-decoder Transformer: build it "
                          "with t2t_keras.build.build_model. Training it with `t2t-keras train` is not supported "
                          "yet; set model.architecture=encoder_decoder to train a translation model.")
    return Transformer(**arguments, dtype=model_config.dtype_policy_name if dtype is None else dtype, name=name)
