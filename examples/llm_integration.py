"""Launch the packaged example: `python -m saga_runtime.examples llm_integration`."""

import runpy

runpy.run_module("saga_runtime.examples.llm_integration", run_name="__main__", alter_sys=True)
