"""Launch the packaged example: `python -m saga_runtime.examples hedged_quote`."""

import runpy

runpy.run_module("saga_runtime.examples.hedged_quote", run_name="__main__", alter_sys=True)
