"""Launch the packaged example: `python -m saga_runtime.examples refund_approval`."""

import runpy

runpy.run_module("saga_runtime.examples.refund_approval", run_name="__main__", alter_sys=True)
