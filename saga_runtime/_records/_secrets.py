"""Secret arguments at rest: encrypted in the records, masked wherever people or logs read them.

A secret is stored as `{"$secret": "<key id>:<Fernet token>"}` (`cryptography`, the `secrets` extra). The key
id (8 hex digits of the key's SHA-256) lets keys rotate: the newest key encrypts, older ones still decrypt.

`conceal` encrypts before anything is stored, `reveal` opens only for the tool, `mask_secrets` shows `MASK`
to people. The tools layer finds the `SecretPaths`; this module only walks them.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from saga_runtime._exceptions import SecretKeyError
from saga_runtime._records._rows import StepRow

__all__ = [
    "ENVELOPE",
    "KEY_ENV",
    "MASK",
    "SecretKeyring",
    "SecretPaths",
    "conceal",
    "has_envelope",
    "is_envelope",
    "mask_secrets",
    "open_args",
    "reveal",
]

ENVELOPE = "$secret"
MASK = "**********"
KEY_ENV = "SAGA_RUNTIME_SECRET_KEY"
HOW_TO_SET = (
    "pass SagaExecutor(..., secret_key=KEY) or set the environment variable SAGA_RUNTIME_SECRET_KEY; make a key "
    'with: python -c "from cryptography.fernet import Fernet; print(Fernet.generate_key().decode())"'
)

#: Argument name -> True (secret) or the paths inside it; "*" is every item of a list or mapping.
SecretPaths = Mapping[str, Any]


def is_envelope(value: Any) -> bool:
    """Tell whether a JSON value is an encrypted secret."""
    return type(value) is dict and len(value) == 1 and type(value.get(ENVELOPE)) is str


def mask_secrets(value: Any) -> Any:
    """Return a JSON value with every secret shown as `MASK` (the same object if none)."""
    kind = type(value)
    if kind is dict:
        if is_envelope(value):
            return MASK
        for item in value.values():
            if type(item) is dict or type(item) is list:
                break
        else:
            return value  # scalars only, the common case
        masked = {key: mask_secrets(item) for key, item in value.items()}
        return value if all(masked[key] is item for key, item in value.items()) else masked
    if kind is list:
        items = [mask_secrets(item) for item in value]
        return value if all(new is old for new, old in zip(items, value, strict=True)) else items
    return value


def has_envelope(value: Any) -> bool:
    """Tell whether a JSON value holds an encrypted secret anywhere."""
    return mask_secrets(value) is not value


def _fernet_module() -> Any:
    try:
        from cryptography import fernet
    except ImportError:  # pragma: no cover - the tests install the extra
        raise SecretKeyError("secret arguments need the cryptography package: install saga-runtime[secrets]") from None
    return fernet


def _key_list(keys: str | bytes | Sequence[str | bytes]) -> list[bytes]:
    if isinstance(keys, str | bytes):
        text = keys.decode() if isinstance(keys, bytes) else keys
        return [part.strip().encode() for part in text.split(",") if part.strip()]
    return [key if isinstance(key, bytes) else str(key).encode() for key in keys]


class SecretKeyring:
    """The secret keys: the first encrypts, each decrypts what it encrypted."""

    __slots__ = ("_by_id", "_fernet", "_newest")

    def __init__(self, keys: str | bytes | Sequence[str | bytes]) -> None:
        fernet = _fernet_module()
        self._fernet = fernet
        self._by_id: dict[str, Any] = {}
        listed = _key_list(keys)
        if not listed:
            raise SecretKeyError(f"the secret key is empty; {HOW_TO_SET}")
        for position, key in enumerate(listed):
            try:
                raw = base64.urlsafe_b64decode(key)
                cipher = fernet.Fernet(key)
            except (ValueError, binascii.Error):
                raise SecretKeyError(
                    f"secret key #{position + 1} is not a URL-safe base64 text of 32 bytes (as Fernet.generate_key() "
                    f"gives); {HOW_TO_SET}"
                ) from None
            self._by_id.setdefault(hashlib.sha256(raw).hexdigest()[:8], cipher)
        self._newest = next(iter(self._by_id))

    @classmethod
    def configured(cls, keys: str | bytes | Sequence[str | bytes] | None) -> SecretKeyring | None:
        """Return the keyring of `keys` (comma-separated or a list, newest first), or None."""
        if keys is None or (isinstance(keys, str | bytes) and not keys.strip()):
            return None
        return cls(keys)

    @property
    def key_ids(self) -> list[str]:
        """Return the ids of the keys, newest first."""
        return list(self._by_id)

    def encrypt(self, value: Any) -> dict[str, str]:
        """Return the envelope of a JSON value, encrypted with the newest key."""
        text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
        token = self._by_id[self._newest].encrypt(text.encode()).decode()
        return {ENVELOPE: f"{self._newest}:{token}"}

    def decrypt(self, envelope: Mapping[str, str]) -> Any:
        """Return an envelope's value; raise `SecretKeyError` if no key opens it."""
        key_id, _, token = envelope[ENVELOPE].partition(":")
        cipher = self._by_id.get(key_id)
        if cipher is None:
            raise SecretKeyError(
                f"a secret was encrypted with key {key_id!r}, which is not among this executor's keys "
                f"({', '.join(self._by_id)}); list the old key after the new one (newest first) to read it"
            )
        try:
            return json.loads(cipher.decrypt(token.encode()))
        except self._fernet.InvalidToken:
            raise SecretKeyError(f"a secret encrypted with key {key_id!r} does not decrypt (altered?)") from None


def reveal(value: Any, keyring: SecretKeyring | None) -> Any:
    """Return a JSON value with every envelope opened (the same object if none)."""
    kind = type(value)
    if kind is dict:
        if is_envelope(value):
            if keyring is None:
                raise SecretKeyError(
                    f"the arguments hold an encrypted secret and this executor has no key; {HOW_TO_SET}"
                )
            return keyring.decrypt(value)
        opened = {key: reveal(item, keyring) for key, item in value.items()}
        return value if all(opened[key] is item for key, item in value.items()) else opened
    if kind is list:
        items = [reveal(item, keyring) for item in value]
        return value if all(new is old for new, old in zip(items, value, strict=True)) else items
    return value


def conceal(
    args: Mapping[str, Any], paths: SecretPaths, keyring: SecretKeyring | None, *, what: str, mask: bool = False
) -> Any:
    """Return `args` with every plain secret encrypted (None stays None).

    Without a key, raise `SecretKeyError` naming `what`, or with `mask` put `MASK` instead.
    """
    if not paths:
        return args
    return _conceal(args, paths, keyring, what, (), mask)


def open_args(row: StepRow, paths: SecretPaths, keyring: SecretKeyring | None) -> Any:
    """Return a step's arguments with secrets in clear, for the tool.

    A clear secret in the row (from a `$ref`) is encrypted there first, or masked if there is no key (and
    `SecretKeyError` raised), so it is never stored.
    """
    if not paths:
        return row.args
    what = f"step {row.step_id!r} ({row.tool_name})"
    try:
        row.args = conceal(row.args, paths, keyring, what=what)
    except SecretKeyError:
        row.args = conceal(row.args, paths, keyring, what=what, mask=True)
        raise
    return reveal(row.args, keyring)


def _conceal(value: Any, paths: Any, keyring: SecretKeyring | None, what: str, at: tuple[str, ...], mask: bool) -> Any:
    if value is None or is_envelope(value):
        return value
    if paths is True:
        if keyring is None:
            if mask:
                return MASK
            raise SecretKeyError(
                f"{what}: argument {'.'.join(at)!r} is a secret, and this executor has no key to encrypt it; "
                f"{HOW_TO_SET}"
            )
        return keyring.encrypt(value)
    if type(value) is list and "*" in paths:
        return [_conceal(item, paths["*"], keyring, what, (*at, str(i)), mask) for i, item in enumerate(value)]
    if type(value) is dict:
        out = dict(value)
        names: Iterable[str] = value if "*" in paths else (name for name in paths if name in value)
        for name in names:
            out[name] = _conceal(value[name], paths.get(name, paths.get("*")), keyring, what, (*at, name), mask)
        return out
    return value
