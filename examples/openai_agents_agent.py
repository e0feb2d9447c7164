"""Launch the packaged example: `python -m saga_runtime.examples openai_agents_agent`."""

import runpy

runpy.run_module("saga_runtime.examples.openai_agents_agent", run_name="__main__", alter_sys=True)
