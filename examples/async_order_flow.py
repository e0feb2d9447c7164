"""Launch the packaged example: `python -m saga_runtime.examples async_order`."""

import runpy

runpy.run_module("saga_runtime.examples.async_order", run_name="__main__", alter_sys=True)
