"""`saga-runtime purge`, `hold`, `unhold`, `holds` and `verify --file`, run for real against a SQLite file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from .test_cli import cli, one_line_error, populate, run_sync


@pytest.fixture
def db(tmp_path: Path) -> str:
    """Return a SQLite URL of this test alone holding ok-1, comp-1, dyn-1 and cfail-1."""
    url = f"sqlite:///{tmp_path / 'sagas.db'}"
    run_sync(lambda: populate(url))
    return url


def test_purge_dry_run_lists_what_would_go_and_changes_nothing(db: str) -> None:
    """`purge --dry-run --json` names the finished SUCCESS and COMPENSATED sagas, oldest first, and keeps them."""
    ran = cli("purge", "--older-than", "0s", "--dry-run", "--json", db=db)
    assert ran.code == 0, ran.err
    report = ran.json()
    assert report == {"count": 3, "saga_ids": ["ok-1", "comp-1", "dyn-1"], "archived_to": None, "dry_run": True}
    shown = cli("show", "ok-1", "--json", db=db)
    assert shown.code == 0, shown.err
    assert len(shown.json()["steps"]) == 2


@pytest.mark.timeout(240)  # ten runs of the console script, on a busy machine
def test_purge_with_archive_and_a_hold_then_verify_the_archive(db: str, tmp_path: Path) -> None:
    """A held saga stays; the others go to the archive, which `verify --file` checks (exit 4 once one is forged)."""
    archive = tmp_path / "sagas.jsonl"
    held = cli("hold", "ok-1", "--reason", "dispute 2026-117", db=db)
    assert held.code == 0, held.err
    listed = cli("holds", "--json", db=db)
    assert [(h["saga_id"], h["reason"]) for h in listed.json()] == [("ok-1", "dispute 2026-117")]

    ran = cli("purge", "--older-than", "0s", "--archive", str(archive), "--json", db=db)
    assert ran.code == 0, ran.err
    assert ran.json()["saga_ids"] == ["comp-1", "dyn-1"]
    assert ran.json()["archived_to"] == str(archive)
    tomb = cli("show", "comp-1", "--json", db=db).json()
    assert tomb["steps"] == []
    assert tomb["purged_at"]

    checked = cli("verify", "--file", str(archive))
    assert checked.code == 0, checked.err
    assert "2 of 2 saga(s) intact" in checked.out
    lines = archive.read_text().splitlines()
    forged = json.loads(lines[0])
    forged["steps"][0]["args"] = {"amount": 1}
    archive.write_text(json.dumps(forged) + "\n" + lines[1] + "\n")
    broken = cli("verify", "--file", str(archive), "--json")
    assert broken.code == 4
    assert [v["ok"] for v in broken.json()] == [False, True]

    released = cli("unhold", "ok-1", db=db)
    assert released.code == 0, released.err
    assert "released" in released.out
    assert cli("purge", "--older-than", "0s", "--json", db=db).json()["saga_ids"] == ["ok-1"]


@pytest.mark.timeout(120)  # three runs of the console script, on a busy machine
def test_verify_file_names_a_torn_line_and_checks_the_rest(db: str, tmp_path: Path) -> None:
    """`verify --file` reports an unreadable line by its number, verifies every other saga, and exits 4."""
    archive = tmp_path / "sagas.jsonl"
    assert cli("purge", "--older-than", "0s", "--archive", str(archive), db=db).code == 0
    lines = archive.read_text().splitlines()
    archive.write_text("\n".join([lines[0], lines[1][: len(lines[1]) // 2] + lines[2], lines[2]]) + "\n")
    ran = cli("verify", "--file", str(archive), "--json")
    assert ran.code == 4, ran.err
    verdicts = ran.json()
    assert [(v["line"], v["saga_id"], v["ok"]) for v in verdicts] == [
        (1, "ok-1", True),
        (2, None, False),
        (3, "dyn-1", True),
    ]
    assert "torn or edited" in verdicts[1]["problems"][0]
    plain = cli("verify", "--file", str(archive))
    assert plain.code == 4
    assert "line 2: not a readable saga export" in plain.out
    assert "2 of 3 saga(s) intact" in plain.out


def test_verify_file_reads_a_single_export(db: str, tmp_path: Path) -> None:
    """`verify --file` also checks the file `export` writes (one indented document)."""
    target = tmp_path / "ok-1.json"
    exported = cli("export", "ok-1", "--output", str(target), db=db)
    assert exported.code == 0, exported.err
    ran = cli("verify", "--file", str(target))
    assert ran.code == 0, ran.err
    assert "1 of 1 saga(s) intact" in ran.out


@pytest.mark.timeout(120)  # two runs of the console script, on a busy machine
@pytest.mark.parametrize(
    ("args", "code", "text"),
    [
        (("purge", "--older-than", "-1d"), 2, "older-than takes an age like 90s"),
        (("purge", "--older-than", "1d", "--status", "RUNNING"), 2, "only terminal"),
        (("purge", "--older-than", "1d", "--archive", "no-such-dir/a.jsonl"), 2, "cannot be written"),
        (("hold", "nope", "--reason", "x"), 1, "no saga 'nope'"),
        (("verify",), 2, "not both"),
        (("verify", "ok-1", "--file", "x.jsonl"), 2, "not both"),
    ],
)
def test_bad_input_gets_one_clear_line_and_changes_nothing(
    db: str, tmp_path: Path, args: tuple[str, ...], code: int, text: str
) -> None:
    """Bad ages, statuses, archive paths, unknown ids and verify's arguments: one error line, the right exit code."""
    ran = cli(*args, db=db, cwd=tmp_path)
    assert ran.code == code, ran.err
    assert text in one_line_error(ran)
    after = cli("purge", "--older-than", "0s", "--dry-run", "--json", db=db)
    assert after.json()["count"] == 3
