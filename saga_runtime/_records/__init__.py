"""Records: the rows stores persist and the models users read. Imports nothing above itself."""

from saga_runtime._records._chain import (
    VerifyResult,
    chain_head,
    extend_head,
    identity_hash,
    seal,
    seal_all,
    verify_rows,
)
from saga_runtime._records._export import EXPORT_FORMAT, EXPORT_VERSION, export_rows, import_rows
from saga_runtime._records._models import (
    SagaResult,
    SagaSummary,
    StepRecord,
    result_from_rows,
    summary_from_rows,
)
from saga_runtime._records._rows import (
    SagaKind,
    SagaRow,
    SagaStatus,
    StepRow,
    StepStatus,
    canonical_json,
    idempotency_key,
    now,
    plan_groups,
    plan_joins,
    step_succeeded,
    to_json_value,
)

__all__ = [
    "EXPORT_FORMAT",
    "EXPORT_VERSION",
    "SagaKind",
    "SagaResult",
    "SagaRow",
    "SagaStatus",
    "SagaSummary",
    "StepRecord",
    "StepRow",
    "StepStatus",
    "VerifyResult",
    "canonical_json",
    "chain_head",
    "export_rows",
    "extend_head",
    "idempotency_key",
    "identity_hash",
    "import_rows",
    "now",
    "plan_groups",
    "plan_joins",
    "result_from_rows",
    "seal",
    "seal_all",
    "step_succeeded",
    "summary_from_rows",
    "to_json_value",
    "verify_rows",
]
