"""`saga-runtime mcp`: the tools of a registry served as an MCP server, every call a step of a saga."""

from __future__ import annotations

from typing import Annotated

import typer

from saga_runtime._cli._common import PROG, ExitCode, _error, _execute, _registry, _stderr, app
from saga_runtime._cli._options import ToolsOption, store_options
from saga_runtime._executor import SagaExecutor
from saga_runtime._storage import SagaStore


@app.command("mcp")
@store_options
def mcp_command(
    ctx: typer.Context,
    tools: ToolsOption,
    http: Annotated[
        int | None, typer.Option("--http", min=1, max=65535, help="Serve streamable HTTP on this port (not stdio).")
    ] = None,
    host: Annotated[str, typer.Option("--host", help="The address --http listens on.")] = "127.0.0.1",
    executor_id: Annotated[str | None, typer.Option("--executor-id", help="This server's executor id.")] = None,
    lease_timeout: Annotated[
        float, typer.Option("--lease-timeout", min=0.1, help="Seconds unrenewed before recovery takes a saga over.")
    ] = 30.0,
) -> None:
    """Serve your tools over MCP (stdio, or --http PORT): each call a saga step, saga_commit and saga_rollback."""
    registry = _registry(tools)
    try:
        from saga_runtime.integrations.mcp import saga_mcp_server
    except ImportError as exc:
        _error(str(exc), ExitCode.STORE)

    async def work(store: SagaStore) -> ExitCode:
        executor = SagaExecutor(registry, store=store, executor_id=executor_id, lease_timeout=lease_timeout)
        server = saga_mcp_server(executor)
        try:
            if http is None:
                await server.run_stdio_async()  # stdout is the protocol's: nothing else is printed there
            else:
                # Where clients connect (the SDK's default path, in 1.x and 2.x); stdout stays clean as with stdio.
                path = getattr(getattr(server, "settings", None), "streamable_http_path", "/mcp")
                where = f"[{host}]" if ":" in host else host
                _stderr().print(f"{PROG} mcp: serving over streamable HTTP at http://{where}:{http}{path}")
                await server.run_streamable_http_async(host=host, port=http)
        finally:
            await executor.aclose()  # the tools' lifespan, if a call entered it
        return ExitCode.OK

    _execute(ctx, work, create=True)
