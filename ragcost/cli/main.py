"""The `ragcost` command: a thin layer over the library. Errors are one line; --debug shows tracebacks."""

from __future__ import annotations

import os
import sys
from typing import Callable, Optional

import typer

from ragcost.errors import RagcostError

app = typer.Typer(add_completion=False, no_args_is_help=True, help="Cost-aware RAG pipelines: index, query, validate, report, plan.")
_STATE = {"debug": False, "registered": False}


@app.callback()
def _root(debug: bool = typer.Option(False, "--debug", help="show full tracebacks")) -> None:
    _STATE["debug"] = debug


def _register() -> None:
    """Add the commands to ``app``, once per process: ``main`` is also called in-process (the tests, a script), and
    registering again on each call appended a second copy of every command, so each call built a larger CLI."""
    if _STATE["registered"]:
        return
    from ragcost.cli import config_cmds, eval_cmd, index_cmd, query_cmd, tune_cmd

    app.command("index")(index_cmd.index)
    app.command("query")(query_cmd.query)
    app.command("validate")(config_cmds.validate)
    app.command("schema")(config_cmds.schema)
    app.command("eval")(eval_cmd.eval_)
    app.command("tune")(tune_cmd.tune)
    from ragcost.cli.plan import plan
    from ragcost.cli.report import report

    app.command("report")(report)
    app.command("plan")(plan)
    from ragcost.cli import cache_cmd
    from ragcost.cli.serve_cmd import serve

    app.add_typer(cache_cmd.app, name="cache")
    from ragcost.cli import judgments_cmd

    app.add_typer(judgments_cmd.app, name="judgments")
    app.command("serve")(serve)
    from ragcost.cli.backends_cmd import backends

    app.command("backends")(backends)
    _link_docs()
    _STATE["registered"] = True


# Each command's --help ends with the docs page of its task (tests/docs/test_site.py checks they exist).
DOCS_PAGES = {
    "index": "tasks/pipelines.md", "query": "tasks/pipelines.md", "validate": "concepts/data-safety.md",
    "schema": "reference/yaml.md", "eval": "tasks/eval-and-tune.md", "tune": "tasks/eval-and-tune.md",
    "report": "tasks/report.md", "plan": "tasks/planning.md", "cache": "tasks/cache.md", "serve": "tasks/serving.md",
    "judgments": "tasks/eval-and-tune.md",
}


def _link_docs() -> None:
    def epilog(name: str) -> str:
        return f"Docs: docs/{DOCS_PAGES.get(name, 'reference/cli.md')}"

    for info in app.registered_commands:
        info.epilog = info.epilog or epilog(info.name or "")
    for group in app.registered_groups:
        group.epilog = group.epilog or epilog(group.name or "")
        for info in group.typer_instance.registered_commands:
            info.epilog = info.epilog or epilog(group.name or "")


_INTERRUPTED = "interrupted; what was committed is kept, rerun to finish"


def _say(message: str) -> None:
    """Print ``error: <message>`` as one terminal-safe line on stderr."""
    from ragcost.cli.text import terminal_safe
    from ragcost.urls import hide_passwords

    print(f"error: {terminal_safe(hide_passwords(message), one_line=True)}", file=sys.stderr)


def _one_line_warnings(previous: Callable[..., None]) -> Callable[..., None]:
    """ragcost's own warnings as one ``warning: <message>`` line on stderr, like its errors; others go to ``previous``."""

    def show(message, category, filename, lineno, file=None, line=None) -> None:
        if f"{os.sep}ragcost{os.sep}" not in str(filename):
            previous(message, category, filename, lineno, file, line)
            return
        from ragcost.cli.text import terminal_safe
        from ragcost.urls import hide_passwords

        print(f"warning: {terminal_safe(hide_passwords(message), one_line=True)}", file=file or sys.stderr)

    return show


def user_input_error(e: BaseException) -> Optional[str]:
    """A one-line message for an exception caused by the user's input or environment, or None for a bug."""
    if isinstance(e, UnicodeDecodeError):
        return f"a file or argument is not valid UTF-8 (byte 0x{e.object[e.start]:02x} at offset {e.start}); save it as UTF-8"
    if isinstance(e, UnicodeEncodeError):
        bad = e.object[e.start:e.end]
        what = "a lone surrogate" if any(0xD800 <= ord(c) <= 0xDFFF for c in bad) else "a character"
        return f"the text holds {what} ({bad.encode('unicode_escape').decode()}) that cannot be encoded as {e.encoding}; pass valid UTF-8 text"
    if isinstance(e, OSError):
        from ragcost.atomic import disk_error

        full = disk_error(e)  # a full or read-only disk: "check the permissions" would send the user the wrong way
        if full is not None:
            return full
    if isinstance(e, OSError) and (e.filename or e.strerror):
        where = f": {e.filename}" if e.filename else ""
        return f"{e.strerror or type(e).__name__}{where}; check the path and its permissions"
    if isinstance(e, RecursionError):
        return "the input is nested too deeply to process; flatten it"
    if isinstance(e, MemoryError):
        return "out of memory; use smaller inputs or batches"
    if type(e).__module__.startswith("sqlalchemy"):
        # Never the SQL or its parameters (they can hold document text): the driver's first line only.
        orig = getattr(e, "orig", None) or e
        return f"the database refused the operation ({type(orig).__name__}: {_first_line(orig)}); rerun with --debug for details"
    return None


def _first_line(e: BaseException, limit: int = 200) -> str:
    line = (str(e).strip().splitlines() or [""])[0]
    return line if len(line) <= limit else line[: limit - 1] + "…"


def main(argv: Optional[list[str]] = None) -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    _register()
    debug = "--debug" in (argv if argv is not None else sys.argv[1:])
    import warnings

    previous = warnings.showwarning
    warnings.showwarning = _one_line_warnings(previous)
    try:
        return _run(argv, debug)
    finally:
        warnings.showwarning = previous


def _run(argv: Optional[list[str]], debug: bool) -> int:
    try:
        # standalone_mode=False: typer *returns* the exit code of Exit, and 130 for Ctrl-C.
        rc = app(args=argv, standalone_mode=False, prog_name="ragcost")
        if rc == 130:
            print(_INTERRUPTED, file=sys.stderr)
        return rc if isinstance(rc, int) else 0
    except RagcostError as e:
        if debug:
            raise
        _say(str(e))
        return 1
    except KeyboardInterrupt:
        print(_INTERRUPTED, file=sys.stderr)
        return 130
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except Exception as e:
        # typer vendors its own click, so usage errors are recognised by shape, not by class.
        if type(e).__name__ == "Abort":
            print(_INTERRUPTED, file=sys.stderr)
            return 130
        fmt = getattr(e, "format_message", None)
        if callable(fmt) and hasattr(e, "exit_code"):
            if debug:
                raise
            ctx = getattr(e, "ctx", None)
            usage = " ".join(ctx.get_usage().split()) if ctx is not None else "ragcost --help"
            _say(f"{fmt()} ({usage})")
            return int(e.exit_code or 2)
        if debug:
            raise
        known = user_input_error(e)
        if known is not None:
            _say(known)
        else:
            _say(f"unexpected {type(e).__name__}: {_first_line(e)} (rerun with --debug for the traceback)")
        return 1


def entry() -> None:
    from ragcost import process

    process.own(exit_now=True)  # the command's process: a batch or a server holds its instance from start to exit
    exit_now(main())


def exit_now(code: int) -> None:
    """Exit as Python's own exit does, less its teardown of every imported module.

    Once a command has returned (and closed what it opened), Python's exit runs three things with
    effects: it waits for non-daemon threads (and concurrent.futures' pools), runs the atexit handlers
    (logging, Ray, multiprocessing) and flushes stdout/stderr. Then it tears down every module; with
    torch and sentence-transformers imported that took 1.4-2.3 s (measured with the 2-core machine busy)
    after the last line printed and after the ledger's last write, so it was time the
    instance was held that no figure could include. Here the three effects run in that order and the
    process ends at once (``os._exit``) with the command's code."""
    import atexit
    import threading

    shutdown = getattr(threading, "_shutdown", None)  # what Python's exit calls first (CPython 3.8+)
    if shutdown is not None:
        shutdown()
    atexit._run_exitfuncs()
    from ragcost import process

    process.run_last()  # what must end with the process (a batch's or a server's lifetime row), last
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a reader that left (a closed pipe) or a stream already closed
            pass
    os._exit(code)


if __name__ == "__main__":
    entry()
