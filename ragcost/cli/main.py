"""The `ragcost` command: a thin layer over the library. Errors are one line; --debug shows tracebacks."""

from __future__ import annotations

import os
import sys
from typing import Optional

import typer

from ragcost.errors import RagcostError

app = typer.Typer(add_completion=False, no_args_is_help=True, help="Cost-aware RAG pipelines: index, query, validate, report, plan.")
_STATE = {"debug": False}


@app.callback()
def _root(debug: bool = typer.Option(False, "--debug", help="show full tracebacks")) -> None:
    _STATE["debug"] = debug


def _register() -> None:
    from ragcost.cli import config_cmds, eval_cmd, index_cmd, query_cmd

    app.command("index")(index_cmd.index)
    app.command("query")(query_cmd.query)
    app.command("validate")(config_cmds.validate)
    app.command("schema")(config_cmds.schema)
    app.command("eval")(eval_cmd.eval_)
    from ragcost.cli.plan import plan
    from ragcost.cli.report import report

    app.command("report")(report)
    app.command("plan")(plan)


def main(argv: Optional[list[str]] = None) -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    _register()
    debug = "--debug" in (argv if argv is not None else sys.argv[1:])
    try:
        app(args=argv, standalone_mode=False, prog_name="ragcost")
        return 0
    except RagcostError as e:
        if debug:
            raise
        print(f"error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("interrupted; what was committed is kept, rerun to finish", file=sys.stderr)
        return 130
    except SystemExit as e:
        return int(e.code or 0)
    except Exception as e:
        # typer vendors its own click, so usage errors are recognised by shape, not by class.
        if type(e).__name__ == "Abort":
            print("interrupted; what was committed is kept, rerun to finish", file=sys.stderr)
            return 130
        fmt = getattr(e, "format_message", None)
        if callable(fmt) and hasattr(e, "exit_code"):
            if debug:
                raise
            ctx = getattr(e, "ctx", None)
            usage = " ".join(ctx.get_usage().split()) if ctx is not None else "ragcost --help"
            print(f"error: {fmt()} ({usage})", file=sys.stderr)
            return int(e.exit_code or 2)
        if debug:
            raise
        print(f"error: unexpected {type(e).__name__}: {e} (rerun with --debug for the traceback)", file=sys.stderr)
        return 1


def entry() -> None:
    sys.exit(main())


if __name__ == "__main__":
    entry()
