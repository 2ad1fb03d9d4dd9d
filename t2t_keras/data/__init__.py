"""Parallel corpora: download, preparation, caching and reading."""
