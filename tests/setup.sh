# The set-up that tests/run and bench/checks/run share, sourced from the repository root: .venv with the package
# and its test extras (created once, brought up to date each time), Debian's chromium for the live page's browser
# test, apt's package lists for the checks that download the default corpus, and TensorFlow's C++ logs from
# warnings up.
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
.venv/bin/python -m pip install --quiet --disable-pip-version-check -e '.[test]'
bash scripts/install-browser.sh
bash scripts/apt-lists.sh
export TF_CPP_MIN_LOG_LEVEL=${TF_CPP_MIN_LOG_LEVEL:-2}
