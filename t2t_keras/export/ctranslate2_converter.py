"""A `ctranslate2.specs.TransformerSpec` holding the weights of a t2t_keras `Transformer`.

`TransformerConverter` fills a `ctranslate2.specs.TransformerSpec` from the
Keras layers' weights, as CTranslate2's own converters do for other toolkits:

* post-LN (the paper) is `pre_norm=False` without a final norm; pre-LN
  (`normalize_first`) is `pre_norm=True` with each stack's final LayerNorm;
* every sublayer's LayerNorm is the one of its `SublayerConnection`;
* query/key/value kernels are fused as CTranslate2 expects (QKV for
  self-attention, KV for cross-attention); Keras kernels `(in, out)` are
  transposed to CTranslate2's `(out, in)`;
* token embeddings are scaled by sqrt(d_model) or not (`scale_embeddings`), and
  positions are given as an explicit table: our interleaved sinusoid of §3.5
  (CTranslate2's built-in one is laid out [sin..., cos...]), Marian's and
  fairseq's layouts (from their offset) or the learned embeddings; the table has
  `max_length` rows, the model's limit;
* the logits bias (Marian's `final_logits_bias`) is the output projection's bias;
* tied embeddings are the same array in several places, which CTranslate2
  stores once (its `optimize` aliases equal variables); a source vocabulary of
  its own (`source_pieces`) is the encoder's;
* T5's switches are CTranslate2's T5 options: the relative position bias
  (`relative_attention_bias` of every self-attention: the stack's one table in
  every layer, or umT5's table of each layer, as its umT5 converter sets them), RMS
  normalisation (`rms_norm`), the gated feed-forward (`ffn_glu`), attention
  without 1/sqrt(d_k) (`queries_scale` 1) and the scaled tied output
  (`scale_outputs`), as its own T5 converter sets them;
* the special tokens are the model's own: an imported checkpoint's (`tokens`:
  CTranslate2's unk, bos, eos and decoder start token), its sources given with
  their end id and language code (`add_source_eos` False).
"""

import numpy as np

from t2t_keras.errors import T2TError

# Keras activation names -> CTranslate2's (keras' gelu is the exact, erf-based one).
ACTIVATIONS = {"relu": "RELU", "gelu": "GELU", "swish": "SWISH", "silu": "SWISH", "tanh": "Tanh",
               "sigmoid": "Sigmoid", "gelu_tanh": "GELUTanh"}


class UnsupportedModelError(T2TError):
    """The model uses something CTranslate2's Transformer cannot express."""


class TransformerConverter:
    """Builds a `ctranslate2.specs.TransformerSpec` holding the weights of a `Transformer`.

    Args:
        model: a built `Transformer` (any dtype policy; weights are read as float32).
        pieces: the (target) vocabulary, piece strings in id order.
        source_pieces: the source vocabulary where it is not `pieces` (`model.source_vocab_size`).
        tokens: CTranslate2's config tokens (`unk_token`, `bos_token`, `eos_token`, `decoder_start_token`) where
            they are not its defaults; given, the sources come with their own end id (`add_source_eos` False).

    Raises:
        UnsupportedModelError: in the constructor, for a model CTranslate2 cannot express.
    """

    def __init__(self, model, pieces, source_pieces=None, tokens=None):
        self.model = model
        self.pieces = list(pieces)
        self.source_pieces = self.pieces if source_pieces is None else list(source_pieces)
        self.tokens = tokens
        self.head_dim = _check_supported(model, self.source_pieces is not self.pieces)

    def spec(self):
        """The filled, unvalidated spec."""
        common_spec, transformer_spec = _import_specs()
        model = self.model
        options = dict(pre_norm=model.normalize_first, no_final_norm=not model.normalize_first,
                       activation=getattr(common_spec.Activation, ACTIVATIONS[model.activation]),
                       relative_attention_bias=model.position_encoding == "relative",
                       ffn_glu=model.gated_feed_forward, rms_norm=model.normalization == "rms")
        if self.head_dim != model.hidden_dim // model.num_heads:
            options["head_dim"] = self.head_dim
        encoder = transformer_spec.TransformerEncoderSpec(model.encoder.num_layers, model.num_heads, **options)
        decoder = transformer_spec.TransformerDecoderSpec(model.decoder.num_layers, model.num_heads, **options)
        if not model.scale_embeddings:
            encoder.scale_embeddings = decoder.scale_embeddings = False
        if model.scale_decoder_output:
            decoder.scale_outputs = np.float32(model.hidden_dim ** -0.5)
        spec = transformer_spec.TransformerSpec(encoder, decoder)
        spec.config.add_source_eos = self.tokens is None  # our encoder input is pieces + EOS, as in training
        for name, token in (self.tokens or {}).items():
            setattr(spec.config, name, token)
        spec.config.layer_norm_epsilon = float(model.layer_norm_epsilon)
        spec.register_source_vocabulary(self.source_pieces)
        spec.register_target_vocabulary(self.pieces)
        self._set_encoder(spec.encoder)
        self._set_decoder(spec.decoder)
        return spec

    def _set_encoder(self, spec):
        model = self.model
        spec.embeddings[0].weight = _numpy(model.source_embedding.embeddings)
        if model.source_position is not None:
            spec.position_encodings.encodings = self._positions(model.source_position)
        for layer_spec, block, table in zip(spec.layer, model.encoder.blocks, model.encoder.relative_biases):
            _set_attention(layer_spec.self_attention, block.self_attention, block.self_attention_connection,
                           self_attention=True, relative=table)
            _set_feed_forward(layer_spec.ffn, block.feed_forward, block.feed_forward_connection)
        if model.encoder.final_norm is not None:
            _set_layer_norm(spec.layer_norm, model.encoder.final_norm)

    def _set_decoder(self, spec):
        model = self.model
        spec.embeddings.weight = _numpy(model.target_embedding.embeddings)
        if model.target_position is not None:
            spec.position_encodings.encodings = self._positions(model.target_position)
        for layer_spec, block, table in zip(spec.layer, model.decoder.blocks, model.decoder.relative_biases):
            _set_attention(layer_spec.self_attention, block.self_attention, block.self_attention_connection,
                           self_attention=True, relative=table)
            _set_attention(layer_spec.attention, block.cross_attention, block.cross_attention_connection,
                           self_attention=False)
            _set_feed_forward(layer_spec.ffn, block.feed_forward, block.feed_forward_connection)
        if model.decoder.final_norm is not None:
            _set_layer_norm(spec.layer_norm, model.decoder.final_norm)
        if model.output_projection is None:
            spec.projection.weight = _numpy(model.target_embedding.embeddings)  # tied: (vocab, d_model)
        else:
            spec.projection.weight = np.ascontiguousarray(_numpy(model.output_projection.kernel).T)
        if model.logits_bias is not None:
            spec.projection.bias = _numpy(model.logits_bias.bias)

    def _positions(self, layer):
        """`(max_length, d_model)` table added to position 0, 1, ...: learned rows or the §3.5 sinusoid."""
        if hasattr(layer, "embeddings"):
            return _numpy(layer.embeddings)
        table = layer.encoding(self.model.max_length, self.model.hidden_dim)
        return np.asarray(table, dtype=np.float32)


def _import_specs():
    try:
        from ctranslate2.specs import common_spec, transformer_spec
    except ImportError:
        raise T2TError("Exporting to CTranslate2 needs the ctranslate2 package: pip install ctranslate2==4.8.5.") \
            from None
    return common_spec, transformer_spec


def _check_supported(model, source_vocabulary=False):
    """The per-head size, after checking CTranslate2 can express `model` (with a `source_vocabulary` of its own or
    not)."""
    from t2t_keras.model import Transformer

    if not isinstance(model, Transformer):
        raise UnsupportedModelError(f"Expected a t2t_keras Transformer, got {type(model).__name__}.")
    if model.activation not in ACTIVATIONS:
        raise UnsupportedModelError(
            f"CTranslate2 has no feed-forward activation {model.activation!r}: it supports "
            f"{sorted(ACTIVATIONS)}. Train with model.activation set to one of them.")
    key_dim = model.key_dim or model.hidden_dim // model.num_heads
    value_dim = model.value_dim or key_dim
    if key_dim != value_dim:
        raise UnsupportedModelError(
            f"CTranslate2 uses one size per attention head, but this model has key_dim={key_dim} and "
            f"value_dim={value_dim}: train with equal key_dim and value_dim (or leave both unset).")
    if model.source_vocab_size not in (None, model.vocab_size) and not source_vocabulary:
        raise UnsupportedModelError(
            f"The model's source vocabulary ({model.source_vocab_size}) differs from its target vocabulary "
            f"({model.vocab_size}), but the run has one shared SentencePiece model: export a model trained "
            "with one vocabulary.")
    if any(weight.dtype == "int8" for weight in model.weights):
        raise UnsupportedModelError("The model already has int8 weights (Model.quantize): convert the float32 "
                                    "model and choose CTranslate2's own quantization instead.")
    if not model.built:
        raise UnsupportedModelError("The model is not built: call model.build() or load trained weights first.")
    return key_dim


def _set_attention(spec, attention, connection, self_attention, relative=None):
    """Fused projections and the sublayer's LayerNorm (applied before or after, as `pre_norm` says); `relative`:
    the `RelativePositionBias` this self-attention adds (the stack's one table, or the layer's own)."""
    query, key, value = (_linear(d) for d in (attention.query_dense, attention.key_dense, attention.value_dense))
    if self_attention:
        _fill_linear(spec.linear[0], *_fuse(query, key, value))
    else:
        _fill_linear(spec.linear[0], *query)
        _fill_linear(spec.linear[1], *_fuse(key, value))
    _fill_linear(spec.linear[-1], *_linear(attention.output_dense))
    _set_layer_norm(spec.layer_norm, connection.layer_norm)
    if not attention.scale:
        spec.queries_scale = np.float32(1.0)
    if relative is not None:
        spec.relative_attention_bias = _numpy(relative.embeddings)
        spec.relative_attention_max_distance = np.int32(relative.max_distance)


def _set_feed_forward(spec, feed_forward, connection):
    _fill_linear(spec.linear_0, *_linear(feed_forward.inner))
    if feed_forward.gate is not None:
        _fill_linear(spec.linear_0_noact, *_linear(feed_forward.gate))
    _fill_linear(spec.linear_1, *_linear(feed_forward.outer))
    _set_layer_norm(spec.layer_norm, connection.layer_norm)


def _set_layer_norm(spec, layer_norm):
    if hasattr(layer_norm, "gamma"):
        spec.gamma = _numpy(layer_norm.gamma)
        spec.beta = _numpy(layer_norm.beta)
    else:  # RMSNormalization: a scale alone
        spec.gamma = _numpy(layer_norm.scale)


def _linear(dense):
    """(weight `(out, in)`, bias or None) of a Keras Dense layer."""
    bias = _numpy(dense.bias) if dense.use_bias else None
    return _numpy(dense.kernel).T, bias


def _fuse(*linears):
    weights = np.concatenate([w for w, _ in linears], axis=0)
    biases = None if linears[0][1] is None else np.concatenate([b for _, b in linears], axis=0)
    return weights, biases


def _fill_linear(spec, weight, bias):
    spec.weight = np.ascontiguousarray(weight)
    if bias is not None:
        spec.bias = bias


def _numpy(variable):
    return np.ascontiguousarray(np.asarray(variable.numpy(), dtype=np.float32))
