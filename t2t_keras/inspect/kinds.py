"""The three kinds of attention of §3.2.3, in the order they are shown, and their titles: what the views, the
summaries and the server's attention endpoint name, without the model that computes them."""

KINDS = ("encoder", "decoder_self", "cross")
KIND_TITLES = {
    "encoder": "encoder self-attention",
    "decoder_self": "decoder self-attention",
    "cross": "encoder-decoder attention",
}
