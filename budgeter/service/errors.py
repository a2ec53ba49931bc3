"""The one table from domain errors to gRPC status codes, and rich error details.

Every error carries ``google.rpc.ErrorInfo{reason, domain="budgeter", metadata}``; an
INVALID_ARGUMENT also carries ``google.rpc.BadRequest`` naming the field. Anything that is not a
``BudgeterError`` is INTERNAL with a generic message and a log line with the exception's type and
stack only (no internals leak to the caller, no message bodies reach the log).
"""

from __future__ import annotations

import grpc
from google.protobuf import any_pb2
from google.rpc import code_pb2, error_details_pb2, status_pb2
from grpc_status import rpc_status

from budgeter import errors as e
from budgeter.service.auth import Unauthenticated
from budgeter.sessions.logs import log_internal

DOMAIN = "budgeter"

TABLE: tuple[tuple[type[e.BudgeterError], grpc.StatusCode], ...] = (
    (Unauthenticated, grpc.StatusCode.UNAUTHENTICATED),
    (e.InvalidInput, grpc.StatusCode.INVALID_ARGUMENT),
    (e.NotFound, grpc.StatusCode.NOT_FOUND),
    (e.AlreadyExists, grpc.StatusCode.ALREADY_EXISTS),
    (e.EtagMismatch, grpc.StatusCode.ABORTED),
    (e.QuotaExceeded, grpc.StatusCode.RESOURCE_EXHAUSTED),
    (e.StoreUnavailable, grpc.StatusCode.UNAVAILABLE),
    (e.PinnedOverBudget, grpc.StatusCode.FAILED_PRECONDITION),
    (e.TemplateError, grpc.StatusCode.FAILED_PRECONDITION),
    (e.TokenizerLoadError, grpc.StatusCode.FAILED_PRECONDITION),
    (e.MissingExtra, grpc.StatusCode.FAILED_PRECONDITION),
)


def code_for(exc: BaseException) -> grpc.StatusCode:
    for cls, code in TABLE:
        if isinstance(exc, cls):
            return code
    return grpc.StatusCode.INTERNAL


def to_status(exc: BaseException) -> grpc.Status:
    if isinstance(exc, e.BudgeterError):
        code, message, reason, metadata = code_for(exc), exc.message, exc.reason, exc.metadata
    else:
        log_internal(exc)
        code, message, reason, metadata = (grpc.StatusCode.INTERNAL, "internal error", "INTERNAL", {})
    details = [_pack(error_details_pb2.ErrorInfo(reason=reason, domain=DOMAIN, metadata=metadata))]
    field = getattr(exc, "field", "")
    if code == grpc.StatusCode.INVALID_ARGUMENT and field:
        violation = error_details_pb2.BadRequest.FieldViolation(field=field, description=message)
        details.append(_pack(error_details_pb2.BadRequest(field_violations=[violation])))
    status = status_pb2.Status(code=getattr(code_pb2, code.name), message=message, details=details)
    return rpc_status.to_status(status)


def _pack(msg: object) -> any_pb2.Any:
    out = any_pb2.Any()
    out.Pack(msg)
    return out


