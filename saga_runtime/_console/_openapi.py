"""The OpenAPI 3.1 description of the console's JSON API, written by hand to say exactly what each route takes."""

from __future__ import annotations

from typing import Any

from saga_runtime._console._service import ACTIONS, QUEUE_ACTIONS
from saga_runtime._records import END_REASONS, ApprovalRequest, QueueInfo, SagaResult, SagaStatus, SagaSummary

__all__ = ["openapi"]


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def _json(schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


_ERROR = _json(_ref("Error"), "refused: the body's `error` says why")


def _schemas() -> dict[str, Any]:
    """Return the component schemas: the records' own pydantic schemas, plus what the console adds to them."""
    schemas: dict[str, Any] = {}
    for model in (SagaSummary, SagaResult, ApprovalRequest, QueueInfo):
        schema = model.model_json_schema(mode="serialization", ref_template="#/components/schemas/{model}")
        schemas.update(schema.pop("$defs", {}))
        schemas[model.__name__] = schema
    schemas["Saga"] = {
        "allOf": [
            _ref("SagaResult"),
            {
                "type": "object",
                "properties": {
                    "verified": {
                        "type": "object",
                        "properties": {
                            "ok": {"type": "boolean"},
                            "signed": {"type": "boolean"},
                            "problems": {"type": "array", "items": {"type": "string"}},
                        },
                    }
                },
            },
        ],
        "description": "A saga's record (secret arguments shown as `**********`) and whether its hash chain verifies.",
    }
    schemas["Action"] = {
        "type": "object",
        "required": ["saga_id"],
        "properties": {
            "saga_id": {"type": "string"},
            "step_id": {"type": "string", "description": "approve and reject: the waiting step"},
            "by": {"type": "string", "description": "approve and reject: who decides (recorded); cancel: who asks"},
            "note": {"type": "string", "description": "approve, reject and cancel: why (recorded)"},
            "args_digest": {"type": "string", "description": "approve: the request's digest, binding the decision"},
        },
    }
    schemas["Queue"] = {
        "allOf": [
            _ref("QueueInfo"),
            {"type": "object", "properties": {"state": {"enum": ["active", "paused", "draining", "drained"]}}},
        ],
        "description": "A queue: its sagas by state, paused or draining (drained: nothing of it runs), its limits.",
    }
    schemas["Error"] = {"type": "object", "required": ["error"], "properties": {"error": {"type": "string"}}}
    return schemas


def openapi() -> dict[str, Any]:
    """Return the OpenAPI document of /api/."""
    page = [
        {"name": "status", "in": "query", "schema": {"type": "string", "enum": [s.value for s in SagaStatus]}},
        {
            "name": "reason",
            "in": "query",
            "schema": {"type": "string", "enum": list(END_REASONS)},
            "description": "only sagas that ended for this reason (SagaResult.end_reason)",
        },
        {"name": "q", "in": "query", "schema": {"type": "string"}, "description": "a part of the saga id"},
        {"name": "limit", "in": "query", "schema": {"type": "integer", "minimum": 1, "maximum": 500, "default": 50}},
        {"name": "offset", "in": "query", "schema": {"type": "integer", "minimum": 0, "default": 0}},
    ]
    sagas_page = {
        "type": "object",
        "properties": {
            "sagas": {"type": "array", "items": _ref("SagaSummary")},
            "more": {"type": "boolean"},
            "limit": {"type": "integer"},
            "offset": {"type": "integer"},
        },
    }
    saga_id = {"name": "saga_id", "in": "path", "required": True, "schema": {"type": "string"}}
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "saga_runtime console API",
            "version": "1",
            "description": "The sagas of one store. With a UI token set, every call needs `Authorization: Bearer "
            "<token>`; actions always need a JSON body.",
        },
        "components": {
            "schemas": _schemas(),
            "securitySchemes": {"token": {"type": "http", "scheme": "bearer"}},
        },
        "security": [{"token": []}],
        "paths": {
            "/api/sagas": {
                "get": {
                    "summary": "List sagas, newest first",
                    "parameters": page,
                    "responses": {"200": _json(sagas_page, "a page of sagas"), "400": _ERROR, "401": _ERROR},
                }
            },
            "/api/sagas/{saga_id}": {
                "get": {
                    "summary": "A saga's record and whether it verifies",
                    "parameters": [saga_id],
                    "responses": {"200": _json(_ref("Saga"), "the saga"), "401": _ERROR, "404": _ERROR},
                }
            },
            "/api/follow/{saga_id}": {
                "get": {
                    "summary": "A saga's events and stream values as Server-Sent Events, while it runs",
                    "description": "Each entry the saga published is a message whose id is its number (1, 2, ...) "
                    "and whose data is JSON: kind (event, stream, stream_closed), key or name, value, and a stream "
                    "value's offset. A `status` event tells the saga's status; an `end` event ends the stream once "
                    "it is terminal (or unknown: missing). Send `Last-Event-ID` (or `?after=N`) to get only the "
                    "entries after the N you have. A response lasts at most 25 s; EventSource reconnects.",
                    "parameters": [
                        saga_id,
                        {"name": "after", "in": "query", "required": False, "schema": {"type": "integer"}},
                    ],
                    "responses": {
                        "200": {
                            "description": "the stream",
                            "content": {"text/event-stream": {"schema": {"type": "string"}}},
                        },
                        "401": _ERROR,
                    },
                }
            },
            "/api/approvals": {
                "get": {
                    "summary": "Steps waiting for a decision, oldest first",
                    "responses": {
                        "200": _json(
                            {
                                "type": "object",
                                "properties": {"approvals": {"type": "array", "items": _ref("ApprovalRequest")}},
                            },
                            "the pending requests",
                        ),
                        "401": _ERROR,
                    },
                }
            },
            "/api/actions/{action}": {
                "post": {
                    "summary": "Approve, reject, retry a compensation, unpark, or cancel",
                    "parameters": [
                        {
                            "name": "action",
                            "in": "path",
                            "required": True,
                            "schema": {"type": "string", "enum": list(ACTIONS)},
                        }
                    ],
                    "requestBody": {"required": True, "content": {"application/json": {"schema": _ref("Action")}}},
                    "responses": {
                        "200": _json(
                            {"type": "object", "properties": {"message": {"type": "string"}, "saga": _ref("Saga")}},
                            "done: what happened, and the saga after it (none for unpark)",
                        ),
                        **dict.fromkeys(("400", "401", "403", "404", "409", "415", "503"), _ERROR),
                    },
                }
            },
            "/api/queues": {
                "get": {
                    "summary": "The queues: sagas queued, running and waiting, state and limits",
                    "responses": {
                        "200": _json(
                            {"type": "object", "properties": {"queues": {"type": "array", "items": _ref("Queue")}}},
                            "every queue, by name",
                        ),
                        "401": _ERROR,
                    },
                }
            },
            "/api/queue-actions/{action}": {
                "post": {
                    "summary": "Pause, resume or drain a queue (stored: every worker obeys)",
                    "parameters": [
                        {
                            "name": "action",
                            "in": "path",
                            "required": True,
                            "schema": {"type": "string", "enum": list(QUEUE_ACTIONS)},
                        }
                    ],
                    "requestBody": {
                        "required": True,
                        "content": {
                            "application/json": {
                                "schema": {
                                    "type": "object",
                                    "required": ["queue"],
                                    "properties": {"queue": {"type": "string"}},
                                }
                            }
                        },
                    },
                    "responses": {
                        "200": _json(
                            {"type": "object", "properties": {"message": {"type": "string"}, "queue": _ref("Queue")}},
                            "done: what happened, and the queue after it",
                        ),
                        **dict.fromkeys(("400", "401", "403", "404", "415", "503"), _ERROR),
                    },
                }
            },
        },
    }
