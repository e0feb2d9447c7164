"""List the examples, or run one: `python -m saga_runtime.examples [NAME]`."""

from __future__ import annotations

import ast
import runpy
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def examples() -> dict[str, str]:
    """Return each example's name and the first line of its docstring."""
    found = {}
    for path in sorted(HERE.glob("*.py")):
        if not path.name.startswith("_"):
            doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
            found[path.stem] = doc.splitlines()[0] if doc else ""
    return found


def main(argv: list[str]) -> int:
    """Run the example named in argv, or list them all."""
    known = examples()
    if not argv or argv[0] in ("-h", "--help"):
        width = max(map(len, known))
        sys.stdout.write("python -m saga_runtime.examples NAME runs one of:\n\n")
        sys.stdout.writelines(f"  {name:<{width}}  {summary}\n" for name, summary in known.items())
        return 0
    name = argv[0]
    if name not in known:
        sys.stderr.write(f"no example {name!r}; the examples are: {', '.join(known)}\n")
        return 2
    sys.argv = [f"saga_runtime.examples.{name}", *argv[1:]]
    runpy.run_module(f"saga_runtime.examples.{name}", run_name="__main__", alter_sys=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
