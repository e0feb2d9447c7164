"""Launch the packaged example: `python -m saga_runtime.examples agent_loop`."""

import runpy

runpy.run_module("saga_runtime.examples.agent_loop", run_name="__main__", alter_sys=True)
