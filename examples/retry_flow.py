"""Launch the packaged example: `python -m saga_runtime.examples retry`."""

import runpy

runpy.run_module("saga_runtime.examples.retry", run_name="__main__", alter_sys=True)
