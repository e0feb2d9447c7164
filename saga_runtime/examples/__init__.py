"""Runnable examples, shipped with the package: `python -m saga_runtime.examples` lists them.

`python -m saga_runtime.examples order` runs one. Each runs offline (no network, no API key) and prints what
happened; those that keep sagas use `$SAGA_RUNTIME_DATABASE_URL`, else `sqlite:///sagas.db` in the current
directory, or a temporary file.
"""
