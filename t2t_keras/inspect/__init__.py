"""Inspecting attention: extraction, heatmaps, TensorBoard summaries during training, an HTML view."""

from t2t_keras.inspect.attention import KINDS, AttentionMaps, BatchAttention, extract_attention, extract_batch
from t2t_keras.inspect.html_view import render_html, write_html
from t2t_keras.inspect.inspect_run import InspectResult, inspect_run
from t2t_keras.inspect.summary import AttentionSummary, attention_statistics, write_attention_summaries

__all__ = [
    "KINDS",
    "AttentionMaps",
    "AttentionSummary",
    "BatchAttention",
    "InspectResult",
    "attention_statistics",
    "extract_attention",
    "extract_batch",
    "inspect_run",
    "render_html",
    "write_attention_summaries",
    "write_html",
]
