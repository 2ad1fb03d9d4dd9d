"""t2t_keras: the Transformer of "Attention Is All You Need" (Vaswani et al., 2017) in Keras 3."""

__version__ = "0.1.0"

import sys  # noqa: E402

from t2t_keras.backends import check_backend_installed, requested_backend  # noqa: E402

if "keras" not in sys.modules:  # once Keras is imported, its backend is installed
    check_backend_installed(requested_backend())
