"""Launch the packaged example: `python -m saga_runtime.examples console_store`.

Its registry and `fill` are re-exported, so `--tools examples/console_store.py:registry` keeps working.
"""

from saga_runtime.examples.console_store import effects, fill, main, registry

__all__ = ["effects", "fill", "registry"]

if __name__ == "__main__":
    main()
