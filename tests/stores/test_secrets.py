"""Secret arguments, on every store: encrypted at rest, masked wherever they are shown, handed to the tool in clear."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import anyio
import pytest
from cryptography.fernet import Fernet
from pydantic import SecretStr

from saga_runtime import PlanValidationError, SagaExecutor, SagaStatus
from saga_runtime._planning import build_plan
from saga_runtime._records import SecretKeyring
from saga_runtime._storage import MemoryStore, SagaStore

from .conftest import Stores

# The tools, as source: the crash test's child process defines the very same ones.
TOOLS = textwrap.dedent(
    """
    import os
    from typing import Annotated, Any

    from pydantic import BaseModel, Field, SecretBytes, SecretStr

    from saga_runtime import Secret, StepContext, ToolRegistry

    registry = ToolRegistry()
    SEEN: list[dict[str, Any]] = []


    class Creds(BaseModel):
        user: str
        token: SecretStr


    @registry.tool
    class Refundable:
        async def execute(self, api_key: SecretStr, amount: int) -> int:
            return amount

        async def compensate(self, result: Any, ctx: StepContext) -> None:
            SEEN.append({"undo with": ctx.args["api_key"]})


    @registry.tool
    class Fail:
        async def execute(self) -> None:
            raise RuntimeError("the next step fails: everything before is undone")


    @registry.tool(approval=True)
    class GatedToken:
        async def execute(self, api_key: SecretStr, amount: int) -> int:
            SEEN.append({"api_key": api_key})
            return amount

        async def compensate(self, result: Any) -> None:
            return None


    @registry.tool
    class Token:
        async def execute(self, api_key: SecretStr, note: str = "") -> str:
            SEEN.append({"api_key": api_key})
            return note

        async def compensate(self, result: Any) -> None:
            return None


    @registry.tool
    class Login:
        async def execute(
            self,
            api_key: SecretStr,
            password: Annotated[str, Secret],
            creds: Creds,
            blob: SecretBytes,
            pin: str = Field(default="0", json_schema_extra={"secret": True}),
            note: str = "",
        ) -> dict[str, Any]:
            if os.environ.get("SECRETS_TEST_CRASH"):
                os._exit(3)  # the process dies mid-step: the step's outcome is unknown
            SEEN.append(
                {
                    "api_key": api_key,
                    "password": password,
                    "token": creds.token,
                    "blob": blob,
                    "pin": pin,
                }
            )
            return {"logged_in": creds.user, "note": note}

        async def compensate(self, result: Any) -> None:
            return None
    """
)
_namespace: dict[str, Any] = {"__name__": "secret_tools"}
exec(compile(TOOLS, "<secret tools>", "exec", dont_inherit=True), _namespace)  # without this module's __future__
registry = _namespace["registry"]
SEEN: list[dict[str, Any]] = _namespace["SEEN"]

PLAINTEXTS = {
    "api_key": "sk-LIVE-7f3a9c",
    "password": "hunter2-Pw-41b",
    "token": "tok-NESTED-9e2d",
    "blob": "blob-BYTES-5c1",
    "pin": "PIN-0042-zz",
}
KEY = Fernet.generate_key().decode()
OLD_KEY = Fernet.generate_key().decode()


def plan(*, secret_object: bool = True) -> list[dict[str, Any]]:
    """Return a one-step plan holding every kind of secret (the API key as a SecretStr object)."""
    api_key: Any = SecretStr(PLAINTEXTS["api_key"]) if secret_object else PLAINTEXTS["api_key"]
    args = {
        "api_key": api_key,
        "password": PLAINTEXTS["password"],
        "creds": {"user": "ann", "token": PLAINTEXTS["token"]},
        "blob": PLAINTEXTS["blob"],
        "pin": PLAINTEXTS["pin"],
        "note": "visible",
    }
    return [{"id": "login", "tool": "Login", "args": args}]


def assert_got_the_real_values() -> None:
    """Check the last call of the tool got every secret in clear, as the type it was declared with."""
    seen = SEEN[-1]
    assert isinstance(seen["api_key"], SecretStr)
    assert seen["api_key"].get_secret_value() == PLAINTEXTS["api_key"]
    assert type(seen["password"]) is str
    assert seen["password"] == PLAINTEXTS["password"]
    assert seen["token"].get_secret_value() == PLAINTEXTS["token"]
    assert seen["blob"].get_secret_value() == PLAINTEXTS["blob"].encode()
    assert seen["pin"] == PLAINTEXTS["pin"]


def assert_no_plaintext(text: str | bytes, where: str) -> None:
    """Check no secret's plaintext is in `text`."""
    data = text.encode() if isinstance(text, str) else text
    for name, plain in PLAINTEXTS.items():
        assert plain.encode() not in data, f"{name} in {where}"


async def database_bytes(stores: Stores, kind: str, store: SagaStore) -> bytes:
    """Return everything the database holds for the store's sagas, read directly (files, or whole tables)."""
    if kind == "memory":
        assert isinstance(store, MemoryStore)
        return repr((store._sagas, store._steps)).encode()
    if kind == "sqlite":
        path = Path(stores.url(kind).removeprefix("sqlite:///"))
        return b"".join(file.read_bytes() for file in path.parent.glob(path.name + "*"))
    records: list[Any] = []
    async with store._transaction(begin=False) as tx:  # type: ignore[attr-defined]
        for table in ("sagas", "steps", "approvals"):
            records.extend(await tx.fetch(f"SELECT * FROM {table}"))
    return repr(records).encode()


def run_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run the real console script."""
    environment = {k: v for k, v in os.environ.items() if k != "SAGA_RUNTIME_DATABASE_URL"}
    environment.update({"NO_COLOR": "1", "COLUMNS": "200", **(env or {})})
    script = Path(sys.executable).with_name("saga-runtime")
    return subprocess.run(
        [str(script), *args], capture_output=True, text=True, env=environment, timeout=60, check=False
    )


async def test_a_secret_is_nowhere_in_plain_text(
    stores: Stores, store: SagaStore, kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The tool gets every secret in clear, as declared; the database, the export, the CLI, the result's repr and
    to_dict(), DEBUG logs and events hold none of them; the result shows them as "**********"."""
    caplog.set_level(logging.DEBUG, logger="saga_runtime")
    events: list[Any] = []
    executor = SagaExecutor(registry, store=store, secret_key=KEY, hooks=[events.append])
    result = await executor.run(plan(), saga_id="secret")
    assert result.ok, result.describe()
    assert_got_the_real_values()

    assert_no_plaintext(await database_bytes(stores, kind, store), "the database")
    assert_no_plaintext(json.dumps(await store.export_saga("secret")), "the export")
    assert_no_plaintext(repr(result) + json.dumps(result.to_dict()) + result.describe(), "the result")
    assert_no_plaintext(caplog.text, "the logs")
    assert_no_plaintext(repr(events), "the events")
    args = result.step("login").args
    assert args["api_key"] == args["password"] == args["pin"] == args["blob"] == "**********"
    assert args["creds"] == {"user": "ann", "token": "**********"}
    assert args["note"] == "visible"
    assert await store.verify_saga("secret")
    calls = len(SEEN)
    again = await executor.run(plan(), saga_id="secret")  # the same plan again: its stored result, no call
    assert again.status is SagaStatus.SUCCESS
    assert len(SEEN) == calls

    if kind != "memory":
        url = stores.url(kind)
        for command in (["show", "-v", "secret"], ["show", "--json", "secret"], ["export", "secret", "--json"]):
            ran = run_cli("--db", url, *command)
            assert ran.returncode == 0, ran.stderr
            assert_no_plaintext(ran.stdout + ran.stderr, " ".join(command))
        assert "**********" in run_cli("--db", url, "show", "-v", "secret").stdout


async def test_a_plan_with_a_secret_and_no_key_is_refused(store: SagaStore, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without a key, a plan holding a secret is refused before anything is stored, saying how to set one."""
    monkeypatch.delenv("SAGA_RUNTIME_SECRET_KEY", raising=False)
    executor = SagaExecutor(registry, store=store)
    with pytest.raises(PlanValidationError) as caught:
        await executor.run(plan(), saga_id="nokey")
    assert "SAGA_RUNTIME_SECRET_KEY" in str(caught.value)
    assert "secret_key=" in str(caught.value)
    assert_no_plaintext(str(caught.value), "the error")
    assert await store.load_saga("nokey") is None


async def test_the_key_comes_from_the_environment_and_a_rotated_key_reads_old_records(
    store: SagaStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SAGA_RUNTIME_SECRET_KEY configures the key (a dynamic saga's calls too); after rotation (the new key first,
    the old one after it) a record encrypted with the old key still opens, and new secrets use the new key."""
    monkeypatch.setenv("SAGA_RUNTIME_SECRET_KEY", OLD_KEY)
    async with SagaExecutor(registry, store=store).saga(saga_id="old") as saga:
        await saga.call("Login", **plan()[0]["args"])
    assert_got_the_real_values()
    old = await store.load_saga("old")
    assert old is not None
    assert_no_plaintext(repr(old), "the dynamic saga's record")

    monkeypatch.setenv("SAGA_RUNTIME_SECRET_KEY", f"{KEY},{OLD_KEY}")
    rotated = SagaExecutor(registry, store=store)
    result = await rotated.run(plan(), saga_id="new")
    assert result.ok
    new = await store.load_saga("new")
    assert new is not None
    old_id = old[1][0].args["api_key"]["$secret"].split(":")[0]
    new_id = new[1][0].args["api_key"]["$secret"].split(":")[0]
    assert old_id != new_id
    # What recovery does with a stored record: its plan, built again, opens every secret with the rotated ring.
    recorded = [[{"id": "login", "tool": "Login", "args": old[1][0].args}]]
    kwargs = build_plan(recorded, registry, keyring=SecretKeyring([KEY, OLD_KEY])).steps[0].kwargs
    assert kwargs is not None
    assert kwargs["api_key"].get_secret_value() == PLAINTEXTS["api_key"]
    assert kwargs["creds"].token.get_secret_value() == PLAINTEXTS["token"]
    with pytest.raises(PlanValidationError, match="list the old key after the new one"):
        build_plan(recorded, registry, keyring=SecretKeyring(KEY))


CHILD = """
import asyncio, sys
from saga_runtime import SagaExecutor, open_store
exec(sys.argv[1], globals())

async def main() -> None:
    async with open_store(sys.argv[2]) as store:
        executor = SagaExecutor(registry, store=store, lease_timeout=0.5, secret_key=sys.argv[3])
        await executor.run(__import__("json").loads(sys.argv[4]), saga_id="crashed")

asyncio.run(main())
"""


async def test_recovery_on_another_executor_with_the_key_hands_the_tool_the_secret(
    stores: Stores, sql_kind: str
) -> None:
    """A process dies mid-step; another executor holding the key recovers the saga and its tool gets the secrets."""
    store = await stores.open(sql_kind, wipe=True)
    url = stores.url(sql_kind)
    document = json.dumps(plan(secret_object=False))
    environment = {**os.environ, "SECRETS_TEST_CRASH": "1"}
    with anyio.fail_after(60):
        child = await anyio.run_process(
            [sys.executable, "-c", CHILD, TOOLS, url, OLD_KEY, document], env=environment, check=False
        )
    assert child.returncode == 3, child.stderr.decode()
    assert_no_plaintext(await database_bytes(stores, sql_kind, store), "the database after the crash")
    await anyio.sleep(0.6)  # the dead executor's lease runs out
    SEEN.clear()
    # Another executor, its keys rotated since (the old key listed after the new one).
    (result,) = await SagaExecutor(registry, store=store, secret_key=[KEY, OLD_KEY]).recover()
    assert result.ok, result.describe()
    stored = await store.get_saga("crashed")
    assert stored is not None
    assert stored.status is SagaStatus.SUCCESS, stored.describe()
    assert_got_the_real_values()
    assert_no_plaintext(await database_bytes(stores, sql_kind, store), "the database after recovery")
    assert await store.verify_saga("crashed")


async def test_a_secret_given_as_a_plain_string_in_a_plain_plan_is_stored_encrypted(
    stores: Stores, store: SagaStore, kind: str
) -> None:
    """A plan of scalar arguments only (build_plan's one-walk path) still encrypts a secret given as a str."""
    executor = SagaExecutor(registry, store=store, secret_key=KEY)
    steps = [{"id": "token", "tool": "Token", "args": {"api_key": PLAINTEXTS["api_key"], "note": "visible"}}]
    result = await executor.run(steps, saga_id="plain-secret")
    assert result.ok, result.describe()
    assert SEEN[-1]["api_key"].get_secret_value() == PLAINTEXTS["api_key"]
    assert result.step("token").args == {"api_key": "**********", "note": "visible"}
    assert_no_plaintext(await database_bytes(stores, kind, store), "the database")


async def test_an_approval_request_never_holds_or_shows_a_secret(stores: Stores, store: SagaStore, kind: str) -> None:
    """A gated call's request shows its secret as "**********" (result, pending_approvals), the database holds it
    encrypted only, and once approved the tool gets the real value."""
    executor = SagaExecutor(registry, store=store, secret_key=KEY)
    steps = [{"id": "gated", "tool": "GatedToken", "args": {"api_key": PLAINTEXTS["api_key"], "amount": 3}}]
    waiting = await executor.run(steps, saga_id="gated-secret")
    assert waiting.status is SagaStatus.WAITING
    (request,) = await executor.pending_approvals()
    assert request.args == {"api_key": "**********", "amount": 3}
    assert waiting.pending_approvals[0].args == {"api_key": "**********", "amount": 3}
    assert_no_plaintext(repr(waiting) + json.dumps(waiting.to_dict(), default=str), "the result")
    assert_no_plaintext(await database_bytes(stores, kind, store), "the database")
    shown = json.dumps(request.args, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    assert request.args_digest == hashlib.sha256(shown.encode()).hexdigest()  # computable from what is shown
    done = await executor.approve("gated-secret", "gated", by="alice", args_digest=request.args_digest)
    assert done.status is SagaStatus.SUCCESS
    assert SEEN[-1]["api_key"].get_secret_value() == PLAINTEXTS["api_key"]


async def test_a_compensation_reads_its_secret_from_ctx_args(stores: Stores, store: SagaStore, kind: str) -> None:
    """ctx.args holds a secret in clear for the tool (a refund needing the API key can make it), never the envelope."""
    executor = SagaExecutor(registry, store=store, secret_key=KEY)
    steps = [
        {"id": "pay", "tool": "Refundable", "args": {"api_key": PLAINTEXTS["api_key"], "amount": 3}},
        {"id": "fail", "tool": "Fail"},
    ]
    result = await executor.run(steps, saga_id="undo-secret")
    assert result.status is SagaStatus.COMPENSATED, result.describe()
    assert {"undo with": PLAINTEXTS["api_key"]} in SEEN


async def test_an_approval_by_an_executor_without_the_key_is_recorded_and_left_to_one_with_it(
    stores: Stores, store: SagaStore, kind: str
) -> None:
    """approve() on an executor that cannot open the saga's secrets records the decision and returns the saga
    WAITING (no error saying nothing was stored); a worker holding the key then goes on with it."""
    steps = [{"id": "gated", "tool": "GatedToken", "args": {"api_key": PLAINTEXTS["api_key"], "amount": 4}}]
    waiting = await SagaExecutor(registry, store=store, secret_key=KEY).run(steps, saga_id="keyless")
    assert waiting.status is SagaStatus.WAITING
    keyless = await SagaExecutor(registry, store=store).approve("keyless", "gated", by="alice")
    assert keyless.status is SagaStatus.WAITING
    assert keyless.approvals[0].decision == "approved"
    (done,) = await SagaExecutor(registry, store=store, secret_key=KEY).recover()
    assert done.status is SagaStatus.SUCCESS
    assert SEEN[-1]["api_key"].get_secret_value() == PLAINTEXTS["api_key"]
