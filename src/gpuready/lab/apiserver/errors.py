"""API errors rendered as `metav1.Status` objects.

Clients branch on `reason` and `code` (kubectl prints `message`; the Python client raises `ApiException` with
`status` and `reason`), so every failure path raises `ApiError` and the HTTP layer turns it into the same JSON shape
the real kube-apiserver sends.
"""

from __future__ import annotations

from typing import Any


class ApiError(Exception):
    """A failure the HTTP layer renders as a Status object."""

    def __init__(
        self,
        code: int,
        reason: str,
        message: str,
        details: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details

    def status(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
        }
        if self.details is not None:
            body["details"] = self.details
        body["code"] = self.code
        return body


def _details(name: str | None, group: str, plural: str) -> dict[str, Any]:
    details: dict[str, Any] = {}
    if name:
        details["name"] = name
    if group:
        details["group"] = group
    details["kind"] = plural
    return details


def _qualified(group: str, plural: str) -> str:
    return f"{plural}.{group}" if group else plural


def not_found(group: str, plural: str, name: str) -> ApiError:
    return ApiError(
        404, "NotFound", f'{_qualified(group, plural)} "{name}" not found', _details(name, group, plural)
    )


def already_exists(group: str, plural: str, name: str) -> ApiError:
    return ApiError(
        409,
        "AlreadyExists",
        f'{_qualified(group, plural)} "{name}" already exists',
        _details(name, group, plural),
    )


def conflict(group: str, plural: str, name: str, why: str) -> ApiError:
    return ApiError(
        409,
        "Conflict",
        f'Operation cannot be fulfilled on {_qualified(group, plural)} "{name}": {why}',
        _details(name, group, plural),
    )


def invalid(kind: str, group: str, name: str, causes: list[tuple[str, str, str]]) -> ApiError:
    """422 Invalid; `causes` are (field, reason type, message) like apimachinery's field.Error list."""
    parts = [f"{field}: {msg}" for field, _, msg in causes]
    summary = parts[0] if len(parts) == 1 else "[" + ", ".join(parts) + "]"
    details = {
        "name": name,
        **({"group": group} if group else {}),
        "kind": kind,
        "causes": [{"reason": reason, "message": msg, "field": field} for field, reason, msg in causes],
    }
    label = f"{kind}.{group}" if group else kind
    return ApiError(422, "Invalid", f'{label} "{name}" is invalid: {summary}', details)


def bad_request(message: str) -> ApiError:
    return ApiError(400, "BadRequest", message)


def method_not_allowed(
    message: str = "the server does not allow this method on the requested resource",
) -> ApiError:
    return ApiError(405, "MethodNotAllowed", message, {})


def unauthorized() -> ApiError:
    return ApiError(401, "Unauthorized", "Unauthorized")


def gone(message: str) -> ApiError:
    return ApiError(410, "Expired", message)


def service_unavailable(message: str) -> ApiError:
    return ApiError(503, "ServiceUnavailable", message)
