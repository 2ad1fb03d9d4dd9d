"""Translation quality: sacreBLEU, chrF and the paper's tokenized BLEU; the retrieval baseline."""
