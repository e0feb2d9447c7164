"""Prove your tools crash-safe: run a plan, kill its process at every crash point, recover it, check the records.

Tools survive a crash only if a re-run step passes its idempotency key on, and a compensation finds what to undo
by that key (or nothing). `check_crash_points` tests that with real process kills, against any store::

    from saga_runtime.testing import check_crash_points

    report = await check_crash_points(
        "myapp.tools:registry",                      # module:attribute of your ToolRegistry
        [
            {"id": "charge", "tool": "ChargeCard", "args": {"order_id": "A1", "amount_cents": 500}},
            {"id": "ship", "tool": "Ship", "args": {"address": "Atlantis"}},   # fails: the saga compensates
        ],
        url="postgresql://postgres@127.0.0.1/scratch",  # default: a temporary SQLite file
    )
    print(report)        # one line per crash point
    report.assert_ok()   # raise AssertionError listing every broken invariant

How it works:

1. A probe run in a child process, every tool wrapped to log each `execute` / `compensate` call (step id, key)
   to a ledger. Each call gives two crash points: **before** it, and **after** it (effect done, not recorded).
2. Per point, a fresh child runs the plan under its own saga id and kills itself there (SIGKILL), a few at a
   time (`concurrency`), with a short `lease_timeout`.
3. This process recovers (`SagaExecutor.recover()`, same wrapped tools) until all are finished or `time_limit`.
4. A `PointReport` per point holds the records at the crash (`at_crash`), the final result, the tool `calls`
   and the invariants broken (`problems`):

   - the saga ends terminal (SUCCESS, COMPENSATED or COMPENSATION_FAILED);
   - every call of a step used the step's recorded idempotency key;
   - a step recorded SUCCESS at the crash is never executed again;
   - a step recorded COMPENSATED at the crash is never compensated again;
   - a step of unknown outcome at the crash is re-run with its key, or compensated;
   - recovery executes (and compensates) a step at most once;
   - COMPENSATED undid every effect that returned; SUCCESS compensated nothing;
   - the saga's hash chain verifies.

Use a scratch database (recovery takes over every orphan there) and test doubles of the outside world: the
tools run for real. For compensation points, make the plan fail: bad arguments, or `fail_step=`.
"""

from saga_runtime.testing._harness import check_crash_points
from saga_runtime.testing._reports import CrashPoint, CrashReport, InjectedFailure, PointReport, ToolCall

__all__ = ["CrashPoint", "CrashReport", "InjectedFailure", "PointReport", "ToolCall", "check_crash_points"]
