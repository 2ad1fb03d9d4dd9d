"""The `t2t-keras` command line: parse arguments, load the config, call the library."""

import argparse
import json
import logging
import os
import sys

from t2t_keras.errors import T2TError


def _add_config_args(parser):
    parser.add_argument("--config", default="base", help="preset name (configs/NAME.yaml) or a YAML file")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="SECTION.KEY=VALUE",
                        help="override one config value, e.g. --set model.hidden_dim=256 (repeatable)")


def _load(args, **model_fields):
    from t2t_keras.config import load_config, replace

    config = load_config(args.config, args.overrides)
    model_fields = {k: v for k, v in model_fields.items() if v is not None}
    return replace(config, model=model_fields) if model_fields else config


def cmd_describe(args):
    from t2t_keras.describe import describe, format_description

    info = describe(_load(args, vocab_size=args.vocab_size), args.sequence_length)
    print(json.dumps(info) if args.json else format_description(info))
    return 0


def cmd_train(args):
    from t2t_keras.training.trainer import train

    result = train(_load(args), args.run_dir, minutes=args.minutes)
    print(f"trained {result.run_dir} from step {result.start_step} to {result.final_step} "
          f"in {result.seconds / 60:.1f} min")
    return 0


def cmd_average(args):
    from t2t_keras.training.averaging import average_run

    print(average_run(args.run_dir, args.last))
    return 0


def build_parser():
    parser = argparse.ArgumentParser(prog="t2t-keras", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)

    p = commands.add_parser("describe", help="print the architecture, parameter count and training FLOPs")
    _add_config_args(p)
    p.add_argument("--vocab-size", type=int, help="vocabulary size (default: the config's model.vocab_size)")
    p.add_argument("--sequence-length", type=int, default=32, help="sequence length for the FLOP count")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(handler=cmd_describe)

    p = commands.add_parser("train", help="train a model, or continue the run in --run-dir")
    _add_config_args(p)
    p.add_argument("--run-dir", required=True, help="directory for config, vocabulary, checkpoints and logs")
    p.add_argument("--minutes", type=float, help="stop after this many minutes of training")
    p.set_defaults(handler=cmd_train)

    p = commands.add_parser("average", help="average the last checkpoints of a run (section 6.1)")
    p.add_argument("--run-dir", required=True)
    p.add_argument("--last", type=int, help="how many checkpoints (default: training.average_last)")
    p.set_defaults(handler=cmd_average)
    return parser


def main(argv=None):
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # keep TensorFlow's start-up chatter off the terminal
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        return args.handler(args)
    except T2TError as error:
        print(f"t2t-keras {args.command}: error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
