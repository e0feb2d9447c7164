"""Which tool arguments are secrets, found at registration; and what a refused secret's error says."""

from __future__ import annotations

from typing import Annotated, Any

import pytest
from cryptography.fernet import Fernet
from pydantic import BaseModel, Field, SecretStr

from saga_runtime import SagaExecutor, Secret, SecretKeyError, StepStatus, ToolRegistry
from saga_runtime._planning import build_plan
from saga_runtime._records import SecretKeyring

registry = ToolRegistry()


class Inner(BaseModel):
    name: str
    token: SecretStr


class Outer(BaseModel):
    inner: Inner
    items: list[Inner] = []
    marked: str = Field(default="", json_schema_extra={"secret": True})


@registry.tool
class Everything:
    async def execute(
        self,
        plain: str,
        optional: SecretStr | None = None,
        annotated: Annotated[str, Secret] = "",
        by_name: dict[str, SecretStr] | None = None,
        nested: Outer | None = None,
    ) -> str:
        return "done"


@registry.tool
class Nothing:
    async def execute(self, plain: str, nested: Inner | None = None) -> str:
        return plain


@registry.tool
class Numbered:
    async def execute(self, code: Annotated[int, Secret]) -> int:
        return code


def test_secret_paths_are_found_at_registration() -> None:
    """SecretStr (also optional), Annotated[..., Secret], a marked Field, mappings, lists and nested models count."""
    assert registry.get("Everything").secrets == {
        "optional": True,
        "annotated": True,
        "by_name": {"*": True},
        "nested": {"inner": {"token": True}, "items": {"*": {"token": True}}, "marked": True},
    }
    assert registry.get("Nothing").secrets == {"nested": {"token": True}}
    assert registry.get("Numbered").secrets == {"code": True}


@registry.tool
class Leak:
    async def execute(self) -> dict[str, Any]:
        return {"code": "not-a-number-SECRET"}


async def test_a_refused_secret_is_not_quoted_in_the_error() -> None:
    """A secret that fails validation when its step starts (given by a $ref) is not quoted in the recorded error."""
    executor = SagaExecutor(registry, secret_key=Fernet.generate_key())
    plan = [{"id": "leak", "tool": "Leak"}, {"id": "use", "tool": "Numbered", "args": {"code": {"$ref": "leak.code"}}}]
    result = await executor.run(plan)
    assert not result.ok
    use = result.step("use")
    assert use.status is StepStatus.FAILED
    assert use.error is not None
    assert "valid integer" in use.error
    assert "not-a-number-SECRET" not in use.error + (result.error or "")
    assert use.args == {"code": "**********"}


def test_a_malformed_key_is_refused_saying_what_a_key_is() -> None:
    """A secret key that is not a Fernet key is refused when the executor is made, saying how to make one."""
    with pytest.raises(SecretKeyError, match="generate_key"):
        SagaExecutor(registry, secret_key="not a key")


async def test_a_secret_given_by_a_ref_is_stored_encrypted() -> None:
    """A secret argument given by a $ref to an earlier result is encrypted before its step's record is written."""
    refs = ToolRegistry()

    @refs.tool
    class Issue:
        async def execute(self) -> dict[str, Any]:
            return {"token": "ISSUED-TOKEN-77"}

    @refs.tool
    class Use:
        async def execute(self, token: SecretStr) -> str:
            return "used " + str(len(token.get_secret_value()))

    executor = SagaExecutor(refs, secret_key=Fernet.generate_key())
    plan = [{"id": "issue", "tool": "Issue"}, {"id": "use", "tool": "Use", "args": {"token": {"$ref": "issue.token"}}}]
    result = await executor.run(plan, saga_id="refs")
    assert result.ok
    assert result.step("use").result == "used 15"
    stored = await executor.store.load_saga("refs")
    assert stored is not None
    use = stored[1][1]
    assert use.status is StepStatus.SUCCESS
    assert "$secret" in use.args["token"]
    assert "ISSUED-TOKEN-77" not in repr(use.args)


async def test_every_run_of_a_kept_plan_masks_its_secret_and_shows_plain_arguments() -> None:
    """A plan run again (its build kept) masks its secret in each result and shows plain arguments as they are."""
    executor = SagaExecutor(registry, secret_key=Fernet.generate_key())
    plan = [
        {"id": "a", "tool": "Numbered", "args": {"code": 7}},
        {"id": "b", "tool": "Nothing", "args": {"plain": "x"}},
    ]
    for _ in range(3):
        result = await executor.run(plan)
        assert result.ok
        assert [step.args for step in result.steps] == [{"code": "**********"}, {"plain": "x"}]


@pytest.mark.parametrize(
    ("args", "shown"),
    [({"plain": "x"}, True), ({"plain": "x", "nested": {"name": "n", "token": "t"}}, False)],
)
def test_a_plan_says_its_arguments_are_shown_as_is_only_when_nothing_would_be_masked(
    args: dict[str, Any], shown: bool
) -> None:
    """Plan.args_shown_as_is holds for scalar arguments only, and for its kept copies as for itself."""
    keyring = SecretKeyring(Fernet.generate_key())
    raw = [{"id": "a", "tool": "Nothing", "args": args}]
    assert build_plan(raw, registry, keyring=keyring).args_shown_as_is is shown
    assert build_plan(raw, registry, keyring=keyring).args_shown_as_is is shown  # (the kept build's copy)
    secret = build_plan([{"id": "s", "tool": "Numbered", "args": {"code": 1}}], registry, keyring=keyring)
    assert not secret.args_shown_as_is
