"""One exception tree for the whole package.

::

    HealError                      root: catch this to catch everything below
    ├── HealWriteError             a heal could not be written to the session store
    ├── StoreError                 a session database could not be used as asked
    │   ├── UnsupportedStoreError  wrong URL form, sync driver, unknown or legacy schema
    │   └── ReadOnlyStoreError     a write was needed but the database refuses writes
    └── LedgerError                the heal ledger is missing or out of date, or no such revision

Driver errors are translated once, where storage is touched
(``raise StoreError(...) from exc``). Every message says what was wrong and
what to do, and never contains a password.
"""

from __future__ import annotations

__all__ = [
    "HealError",
    "HealWriteError",
    "LedgerError",
    "ReadOnlyStoreError",
    "ResolutionError",
    "StoreError",
    "UnsupportedStoreError",
]


class HealError(Exception):
    """Root of every error this package raises."""


class HealWriteError(HealError):
    """A heal could not be written (raised only when the policy says raise)."""


class StoreError(HealError):
    """A session database could not be used as asked."""


class UnsupportedStoreError(StoreError):
    """The URL, driver or schema is not one this package can work with."""


class ReadOnlyStoreError(StoreError):
    """A write was needed but the database refuses writes."""


class LedgerError(HealError):
    """The heal ledger is missing or out of date, or a migration revision is unknown.

    Args:
        message: What is wrong and what to do.
        missing: The ledger's tables are missing or older than the work needs
            (``db upgrade`` mends it; a command that can do without may say so).
    """

    def __init__(self, message: str, *, missing: bool = False) -> None:
        super().__init__(message)
        self.missing = missing


class ResolutionError(HealError):
    """An operator cannot resolve a call: no heal answers it, or several sessions hold it."""
