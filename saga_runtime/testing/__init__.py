"""Prove your tools crash-safe: run a plan, kill its process at every crash point, recover it, check the records.

A saga survives a crash only if its tools cooperate: a step re-run after a crash must pass its idempotency key on
to the outside world, and a compensation must find what to undo by that key (and tolerate "nothing to undo").
`check_crash_points` tests exactly that, with real process kills, against any store::

    from saga_runtime.testing import check_crash_points

    report = await check_crash_points(
        "myapp.tools:registry",                      # module:attribute of your ToolRegistry
        [
            {"id": "charge", "tool": "ChargeCard", "args": {"order_id": "A1", "amount_cents": 500}},
            {"id": "ship", "tool": "Ship", "args": {"address": "Atlantis"}},   # fails: the saga compensates
        ],
        url="postgresql://postgres@127.0.0.1/scratch",  # default: a temporary SQLite file
    )
    print(report)        # one line per crash point: where it was killed, how the saga ended, what the tools did
    report.assert_ok()   # raise AssertionError listing every broken invariant

How it works:

1. A probe run: the plan runs once in a child process (`python -m saga_runtime.testing`) with no crash. The
   harness wraps every tool of the registry so that each call of `execute` and `compensate` is appended, with
   its step id and idempotency key, to a ledger file (fsync'ed line by line). The calls of the probe give the
   crash points, two per call: **before** it (no effect yet) and **after** it returned or raised (the effect
   happened, the engine has not recorded the outcome yet). Calls of `compensate` give the points "during
   compensation".
2. For each crash point, a fresh child runs the plan under its own saga id and kills itself with SIGKILL at that
   point (`os._exit` where there is no SIGKILL). Children run a few at a time (`concurrency`), with a short
   `lease_timeout` so their sagas can be taken over soon.
3. The harness reads what each dead process left in the store, then recovers: `SagaExecutor.recover()`, in this
   process, with the same wrapped registry, until every saga is finished (or `time_limit` runs out).
4. A `PointReport` per point holds the records at the crash (`at_crash`), the final result, every tool call of
   the saga (`calls`, from the ledger) and the invariants it broke (`problems`):

   - the saga ends terminal (SUCCESS, COMPENSATED or COMPENSATION_FAILED);
   - every call of a step used the step's recorded idempotency key;
   - a step recorded SUCCESS at the crash is never executed again;
   - a step recorded COMPENSATED at the crash is never compensated again;
   - a step whose outcome was unknown at the crash (recorded started, no outcome) is re-run with its key, or
     compensated;
   - recovery executes (and compensates) a step at most once;
   - a saga that ended COMPENSATED has undone every effect (each `execute` that returned is followed by a
     `compensate` that returned, for tools that can compensate); a saga that ended SUCCESS compensated nothing;
   - the saga's hash chain verifies.

Point it at a scratch database: recovery takes over every saga there whose owner is gone. The tools run for real
(in the children and in this process), so give them a test double of the outside world, not production. A plan
must fail somewhere for the compensation points to exist: use arguments your tool refuses, or `fail_step=` to
make one step fail without calling its tool.
"""

from saga_runtime.testing._harness import check_crash_points
from saga_runtime.testing._reports import CrashPoint, CrashReport, InjectedFailure, PointReport, ToolCall

__all__ = ["CrashPoint", "CrashReport", "InjectedFailure", "PointReport", "ToolCall", "check_crash_points"]
