"""Launch the packaged example: `python -m saga_runtime.examples pydantic_ai_agent`."""

import runpy

runpy.run_module("saga_runtime.examples.pydantic_ai_agent", run_name="__main__", alter_sys=True)
