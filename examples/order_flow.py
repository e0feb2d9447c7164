"""Launch the packaged example: `python -m saga_runtime.examples order`."""

import runpy

runpy.run_module("saga_runtime.examples.order", run_name="__main__", alter_sys=True)
