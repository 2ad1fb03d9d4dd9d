"""`python -m t2t_keras` runs the command-line interface."""

from t2t_keras.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
