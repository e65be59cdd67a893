"""JSON-RPC 2.0 over lines: parsing, parameter checking, response objects, error codes.

Nothing from a request is ever evaluated or unpickled: a line is decoded as strict UTF-8, parsed
with :func:`json.loads` (no NaN/Infinity), and checked field by field.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from specd.requests import CompletionRequest
from specd.schema import json_types, setting

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603  # the model failed while serving the request
REQUEST_CANCELLED = -32800  # cancelled, superseded by a newer request of the session, or disconnected
PAYLOAD_TOO_LARGE = -32001
SHUTTING_DOWN = -32002
PERMISSION_DENIED = -32003

METHODS = ("complete", "warm", "cancel", "stats", "health", "shutdown")
NOTIFY_OK = ("cancel", "shutdown")  # methods that may be sent without an id
RequestId = str | int | None


class RpcError(Exception):
    def __init__(self, code: int, message: str, data: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.data = data

    def to_json(self) -> dict[str, Any]:
        err: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.data is not None:
            err["data"] = self.data
        return err


def invalid_params(field: str, message: str) -> RpcError:
    return RpcError(INVALID_PARAMS, f"invalid params: {field}: {message}", {"field": field})


@dataclass(frozen=True)
class Message:
    method: str
    params: dict[str, Any]
    id: RequestId
    has_id: bool  # False: a notification, never answered


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def parse_message(line: bytes) -> Message:
    """One request line → Message; raises RpcError (parse error / invalid request / unknown
    method). When the error concerns a request whose id could be read, ``RpcError.data`` is left
    alone and the caller gets the id from :func:`salvage_id`."""
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError as e:
        raise RpcError(PARSE_ERROR, f"parse error: invalid UTF-8 at byte {e.start}")
    try:
        obj = json.loads(text, parse_constant=_reject_constant)
    except (ValueError, RecursionError) as e:
        raise RpcError(PARSE_ERROR, f"parse error: {str(e)[:200]}")
    if isinstance(obj, list):
        raise RpcError(INVALID_REQUEST, "invalid request: batches are not supported")
    if not isinstance(obj, dict):
        raise RpcError(INVALID_REQUEST, "invalid request: expected a JSON object")
    if obj.get("jsonrpc") != "2.0":
        raise RpcError(INVALID_REQUEST, 'invalid request: "jsonrpc" must be "2.0"')
    has_id = "id" in obj
    rid = obj.get("id")
    if isinstance(rid, bool) or not isinstance(rid, (str, int, type(None))):
        raise RpcError(INVALID_REQUEST, "invalid request: id must be a string, an integer or null")
    method = obj.get("method")
    if not isinstance(method, str):
        raise RpcError(INVALID_REQUEST, 'invalid request: "method" must be a string')
    extra = set(obj) - {"jsonrpc", "id", "method", "params"}
    if extra:
        raise RpcError(INVALID_REQUEST, f"invalid request: unknown member {sorted(extra)[0]!r}")
    if method not in METHODS:
        raise RpcError(METHOD_NOT_FOUND, f"method not found: {method[:100]!r}; methods: {', '.join(METHODS)}")
    if not has_id and method not in NOTIFY_OK:
        raise RpcError(INVALID_REQUEST, f"invalid request: {method} needs an id")
    params = obj.get("params", {})
    if params is None:
        params = {}
    if not isinstance(params, dict):
        raise RpcError(INVALID_PARAMS, "invalid params: params must be an object", {"field": "params"})
    return Message(method, params, rid, has_id)


def salvage_id(line: bytes) -> RequestId:
    """The id of a request that failed validation, when it can be read; else None."""
    try:
        obj = json.loads(line.decode("utf-8"), parse_constant=_reject_constant)
    except (ValueError, RecursionError):
        return None
    rid = obj.get("id") if isinstance(obj, dict) else None
    return rid if isinstance(rid, (str, int)) and not isinstance(rid, bool) else None


# -- complete ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class DeliveryOptions:
    """The ``complete`` parameters that are about the daemon's delivery, not the completion."""

    stream: bool = setting(False, help="send complete/delta notifications as text is verified")
    session: str | None = setting(None, help="a newer request of the same session supersedes this one")


# every field of the request, and the delivery options: derived, so a new request field is a
# parameter at once
_REQUEST_TYPES = json_types(CompletionRequest)
_COMPLETE_TYPES = {**_REQUEST_TYPES, **json_types(DeliveryOptions)}
MAX_SESSION_CHARS = 256
MAX_STOPS = 16
_TYPE_NAMES = {str: "a string", int: "an integer", float: "a number", bool: "a boolean",
               list: "a list", type(None): "null"}


@dataclass(frozen=True)
class CompleteParams:
    request: CompletionRequest
    stream: bool
    session: str | None


def parse_complete(params: dict[str, Any]) -> CompleteParams:
    """``complete``'s parameters, each of its JSON type (ranges are the request's own
    :meth:`~specd.requests.CompletionRequest.validate`); raises RpcError naming the parameter."""
    for name, value in params.items():
        if name not in _COMPLETE_TYPES:
            raise invalid_params(name[:100], f"unknown parameter; known: {', '.join(_COMPLETE_TYPES)}")
        types = _COMPLETE_TYPES[name]
        if not isinstance(value, types) or (isinstance(value, bool) and bool not in types):
            want = " or ".join(_TYPE_NAMES[t] for t in types)
            raise invalid_params(name, f"must be {want}, got {type(value).__name__}")
    if "prefix" not in params:
        raise invalid_params("prefix", "required")
    stop = params.get("stop", [])
    stop = [stop] if isinstance(stop, str) else stop
    if not all(isinstance(s, str) and s for s in stop) or len(stop) > MAX_STOPS:
        raise invalid_params("stop", f"must be at most {MAX_STOPS} non-empty strings")
    for name, value in params.items():
        if name != "stop":
            _check_text(name, value)
    for s in stop:
        _check_text("stop", s)
    if isinstance(params.get("seed"), int) and not 0 <= params["seed"] < 2**63:
        raise invalid_params("seed", "must be in 0..2**63-1")
    session = params.get("session")
    if session is not None and not 0 < len(session) <= MAX_SESSION_CHARS:
        raise invalid_params("session", f"must be 1..{MAX_SESSION_CHARS} characters")
    fields = {k: v for k, v in params.items() if k in _REQUEST_TYPES and k != "stop"}
    request = CompletionRequest(stop=tuple(stop), **fields)
    return CompleteParams(request, bool(params.get("stream", False)), session)


WARM_PARAMS = ("prefix", "suffix", "session")  # the ``complete`` params that shape the prompt


def parse_warm(params: dict[str, Any]) -> CompleteParams:
    """``warm``'s parameters: those of ``complete`` that shape the prompt, checked alike."""
    for name in params:
        if name not in WARM_PARAMS:
            raise invalid_params(name[:100], f"unknown parameter; warm takes: {', '.join(WARM_PARAMS)}")
    return parse_complete(params)


def _check_text(name: str, value: Any) -> None:
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise invalid_params(name, "contains a lone surrogate (not valid Unicode text)") from None


def parse_cancel(params: dict[str, Any]) -> RequestId:
    if "id" not in params:
        raise invalid_params("id", "required: the id of the request to cancel")
    rid = params["id"]
    if isinstance(rid, bool) or not isinstance(rid, (str, int)):
        raise invalid_params("id", "must be a string or an integer")
    extra = set(params) - {"id"}
    if extra:
        raise invalid_params(sorted(extra)[0][:100], "unknown parameter")
    return rid


def no_params(params: dict[str, Any]) -> None:
    if params:
        raise invalid_params(sorted(params)[0][:100], "this method takes no parameters")


# -- outgoing ------------------------------------------------------------------------------------

def result(rid: RequestId, value: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": rid, "result": value}


def error(rid: RequestId, err: RpcError) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": rid, "error": err.to_json()}


def delta(rid: RequestId, text: str) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "method": "complete/delta", "params": {"id": rid, "text": text}}


def encode(obj: dict[str, Any]) -> bytes:
    try:
        return json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode("utf-8") + b"\n"
    except UnicodeEncodeError:  # a lone surrogate (e.g. in an echoed id): escape it
        return json.dumps(obj, separators=(",", ":")).encode("ascii") + b"\n"
