"""The kinds of failure kgd reports, and nothing else.

Each transport maps them to the wire in exactly one function: MCP tools turn them into
`isError` results (kg/api/tools.py), REST into status codes (kg/api/rest.py). Anything that is not
a KgError is a bug: it is logged with its traceback and reaches the client as a plain
internal-error message.
"""


class KgError(Exception):
    """Base: a message written for the caller, saying what went wrong and what to do."""

    status = 400
    kind = "bad_input"

    def __init__(self, message):
        super().__init__(message)
        self.message = message


class BadInput(KgError):
    status = 400
    kind = "bad_input"


class NotFound(KgError):
    status = 404
    kind = "not_found"


class Conflict(KgError):
    status = 409
    kind = "conflict"


class SecretRefused(KgError):
    """A write holding a credential (contract section 10): nothing was written."""

    status = 422
    kind = "secret"


class StorageError(KgError):
    """The disk refused a write (full, read-only, permissions): nothing was changed."""

    status = 507
    kind = "storage"
