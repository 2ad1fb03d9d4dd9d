"""A retrieval baseline: translate a sentence with the target side of the most similar training source.

It measures how much of the test set can be answered by lookup, the bar any
trained model must clearly beat on a corpus with repeated phrasings such as
software documentation. Similarity is the cosine of TF-IDF vectors of
lower-cased words and bigrams.
"""

import collections
import math
import re

import numpy as np
from scipy import sparse

_WORD = re.compile(r"\w+", re.UNICODE)


def _features(text):
    words = _WORD.findall(text.lower())
    return words + [f"{a} {b}" for a, b in zip(words, words[1:])]


class RetrievalBaseline:
    """Nearest training source by TF-IDF cosine; returns its target."""

    def __init__(self, train_pairs):
        self.targets = [target for _, target in train_pairs]
        documents = [_features(source) for source, _ in train_pairs]
        frequency = collections.Counter(f for doc in documents for f in set(doc))
        self.vocabulary = {f: i for i, f in enumerate(frequency)}
        self.idf = np.array([math.log(len(documents) / frequency[f]) + 1.0 for f in self.vocabulary])
        self.matrix = self._vectors(documents)  # (train, features), rows L2-normalised

    def _vectors(self, documents):
        rows, cols, values = [], [], []
        for row, doc in enumerate(documents):
            for feature, count in collections.Counter(doc).items():
                column = self.vocabulary.get(feature)
                if column is not None:
                    rows.append(row)
                    cols.append(column)
                    values.append(count * self.idf[column])
        matrix = sparse.csr_matrix((values, (rows, cols)), shape=(len(documents), len(self.vocabulary)))
        norms = np.sqrt(matrix.multiply(matrix).sum(axis=1)).A1
        return sparse.diags(1.0 / np.maximum(norms, 1e-12)) @ matrix

    def nearest_targets(self, sources, batch_size=512):
        """The training target whose source is most similar to each of `sources`."""
        outputs = []
        for start in range(0, len(sources), batch_size):
            queries = self._vectors([_features(s) for s in sources[start:start + batch_size]])
            similarity = (queries @ self.matrix.T).toarray()
            outputs.extend(self.targets[i] for i in similarity.argmax(axis=1))
        return outputs
