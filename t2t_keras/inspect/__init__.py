"""Inspecting attention: extraction, heatmaps, TensorBoard summaries during training, an HTML view.

* `kinds`: the three kinds of attention (§3.2.3) and their titles;
* `attention`: `extract_attention` / `extract_batch`, the maps of every layer and head (`AttentionMaps`);
* `heads`, `heatmaps`, `attention_lines`: statistics of the heads and their images (the paper's Figures 3-5);
  `html_view`: the HTML page of a sentence's maps;
* `summary`: `AttentionSummary`, the TensorBoard summaries written during training;
* `inspect_run`: what `t2t-keras inspect` writes for a run; `quality_plot`: a run's quality curve drawn.

The package imports nothing itself: a server of a CTranslate2 export takes `kinds` and `html_view` in a process
without TensorFlow, which `attention` and `summary` import.
"""
