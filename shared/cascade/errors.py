"""One exception tree for Cascade.

Every error Cascade raises on purpose derives from :class:`CascadeError`; the
subclasses also inherit the matching builtin so callers can catch either, and
they carry their data as attributes (file, line, kernel, limit, ...).
"""

from __future__ import annotations

from collections.abc import Iterable


class CascadeError(Exception):
    """Root of every error Cascade raises on purpose."""

    #: HTTP status the api uses when this error reaches a client.
    http_status: int = 500
    #: Short machine-readable code used in JSON error bodies.
    code: str = "internal"

    def to_dict(self) -> dict[str, object]:
        """JSON-able description for API error bodies (never a repr)."""
        return {"error": self.code, "message": str(self)}


class ConfigError(CascadeError, ValueError):
    """A setting has an invalid value."""

    http_status = 400
    code = "invalid_config"

    def __init__(self, variable: str, value: object, expected: str) -> None:
        self.variable = variable
        self.value = value
        self.expected = expected
        super().__init__(f"{variable}={value!r} is invalid: expected {expected}")


class ValidationError(CascadeError, ValueError):
    """A request or input value is invalid."""

    http_status = 400
    code = "invalid_request"

    def __init__(self, message: str, *, field: str | None = None) -> None:
        self.field = field
        super().__init__(f"{field}: {message}" if field else message)

    def to_dict(self) -> dict[str, object]:
        d = super().to_dict()
        if self.field:
            d["field"] = self.field
        return d


class UnprocessableError(ValidationError):
    """A request that matches its schema but cannot be carried out as given (a rule across
    fields, a limit that depends on other values): a 422 naming the field."""

    http_status = 422
    code = "unprocessable"


class NotFoundError(CascadeError, LookupError):
    """A named thing (trace, run, sim, object) does not exist."""

    http_status = 404
    code = "not_found"


class ConflictError(CascadeError, RuntimeError):
    """The thing exists but is in a state that forbids the request."""

    http_status = 409
    code = "conflict"

    def __init__(self, message: str, *, state: str | None = None) -> None:
        self.state = state
        super().__init__(message)

    def to_dict(self) -> dict[str, object]:
        d = super().to_dict()
        if self.state is not None:
            d["state"] = self.state
        return d


class UnauthorizedError(CascadeError, PermissionError):
    """Missing or wrong bearer token."""

    http_status = 401
    code = "unauthorized"


class TooLargeError(CascadeError, ValueError):
    """An upload or input is over a configured limit."""

    http_status = 413
    code = "too_large"

    def __init__(self, what: str, size: int, limit: int) -> None:
        self.what = what
        self.size = size
        self.limit = limit
        super().__init__(f"{what} is {size} bytes, over the limit of {limit} bytes")


class TooManyError(CascadeError, RuntimeError):
    """A concurrency limit is reached (e.g. open event streams); retry later."""

    http_status = 429
    code = "too_many_requests"

    def __init__(self, message: str, *, limit: int) -> None:
        self.limit = limit
        super().__init__(message)

    def to_dict(self) -> dict[str, object]:
        return {"error": self.code, "message": str(self), "limit": self.limit}


class RateLimitedError(TooManyError):
    """One client made too many attempts within a window (wrong sign-in codes): it may try
    again after ``retry_after_s`` seconds (the api sends them as ``Retry-After``)."""

    code = "too_many_attempts"

    def __init__(self, message: str, *, limit: int, retry_after_s: int) -> None:
        self.retry_after_s = retry_after_s
        super().__init__(message, limit=limit)

    def to_dict(self) -> dict[str, object]:
        return {**super().to_dict(), "retry_after_s": self.retry_after_s}


class UnknownGPUError(CascadeError, KeyError):
    """A GPU spec id or device name that Cascade does not know."""

    http_status = 400
    code = "unknown_gpu"

    def __init__(self, name: str, known: Iterable[str], *, suggestions: Iterable[str] = (),
                 hint: str = "") -> None:
        self.name = name
        self.known = sorted(known)
        self.suggestions = list(suggestions)
        self.hint = hint
        super().__init__(name)

    def __str__(self) -> str:
        close = f"; closest: {', '.join(self.suggestions)}" if self.suggestions else ""
        hint = f" ({self.hint})" if self.hint else ""
        return f"unknown GPU config {self.name!r}{close}{hint}; known: {', '.join(self.known)}"

    def to_dict(self) -> dict[str, object]:
        return {"error": self.code, "message": str(self), "known": self.known,
                "suggestions": self.suggestions}


class UnknownNameError(CascadeError, KeyError):
    """A registry lookup (model, scheduler, router, backend...) failed."""

    http_status = 400
    code = "unknown_name"

    def __init__(self, kind: str, name: str, known: Iterable[str]) -> None:
        self.kind = kind
        self.name = name
        self.known = sorted(known)
        super().__init__(name)

    def __str__(self) -> str:
        return f"unknown {self.kind} {self.name!r}; known: {', '.join(self.known)}"

    def to_dict(self) -> dict[str, object]:
        return {"error": self.code, "message": str(self), "known": self.known}


class DuplicateNameError(CascadeError, ValueError):
    """A registry already has an entry under this name."""


class TraceFormatError(CascadeError, ValueError):
    """A trace file does not follow its format; names the file, line and expectation."""

    http_status = 422
    code = "trace_format"

    def __init__(self, file: str, line: int | None, expected: str, got: str | None = None) -> None:
        self.file = file
        self.line = line
        self.expected = expected
        self.got = got
        where = f"{file}:{line}" if line is not None else file
        msg = f"{where}: expected {expected}"
        if got is not None:
            msg += f", got {got[:120]!r}"
        super().__init__(msg)


class TruncatedStreamError(TraceFormatError):
    """A compressed stream ended before its end marker."""


class BusUnavailableError(CascadeError, ConnectionError):
    """NATS could not be reached within the bounded connect timeout."""

    http_status = 503
    code = "bus_unavailable"


class StorageError(CascadeError, OSError):
    """S3 could not be reached or refused an operation."""

    http_status = 503
    code = "storage_unavailable"


class BusConfigDriftError(CascadeError, RuntimeError):
    """An existing stream or KV bucket differs from the configuration Cascade expects."""


class JobTimeoutError(CascadeError, TimeoutError):
    """A job or simulation ran past its deadline."""


class AccelSimError(CascadeError, RuntimeError):
    """Accel-Sim crashed or exited non-zero; carries the exit status and the output's tail."""

    def __init__(self, message: str, *, returncode: int | None = None, tail: str = "") -> None:
        self.returncode = returncode
        self.tail = tail
        super().__init__(message)


class CancelledRunError(CascadeError, RuntimeError):
    """The run or sim was cancelled on request."""
