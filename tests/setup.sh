# The set-up that tests/run and bench/checks/run share, sourced from the repository root: .venv with the package
# and its test extras (created once, brought up to date each time), Debian's chromium for the live page's browser
# test, apt's package lists for the checks that download the default corpus, TensorFlow's C++ logs from warnings
# up, and Python's stacks on a crash in native code.
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
.venv/bin/python -m pip install --quiet --disable-pip-version-check -e '.[test]'
bash scripts/install-browser.sh
bash scripts/apt-lists.sh
export TF_CPP_MIN_LOG_LEVEL=${TF_CPP_MIN_LOG_LEVEL:-2}
# A crash in native code (SIGSEGV, SIGABRT, ...) prints the Python stack of every thread of the process that died
# (a worker and the module it ran, or a child a test started) before the runner's line naming the module.
export PYTHONFAULTHANDLER=${PYTHONFAULTHANDLER:-1}
