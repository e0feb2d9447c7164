"""The `saga-runtime` command line: a front door that inspects and operates a saga store.

Nothing imports this package; the console script calls `main()`. Its libraries (typer, rich) come with the `cli`
extra, so they are imported only here, when the command runs.
"""

from __future__ import annotations

import sys

__all__ = ["main"]

INSTALL_HINT = "pip install 'saga-runtime[cli]'"
# The exit code of a setup problem (a missing extra or driver, a bad store URL): see _common.ExitCode.
_SETUP_ERROR = 3


def main() -> None:
    """Run the `saga-runtime` command; without the `cli` extra, say how to install it and exit 3."""
    try:
        import rich  # noqa: F401  (only checking that the extra is installed)
        import typer  # noqa: F401
    except ImportError as exc:
        missing = exc.name or "typer"
        print(
            f"saga-runtime: the command line needs {missing}, which is not installed: run {INSTALL_HINT}",
            file=sys.stderr,
        )
        raise SystemExit(_SETUP_ERROR) from None
    from saga_runtime._cli._app import run

    run()
