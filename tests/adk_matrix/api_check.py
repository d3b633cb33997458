"""Does ``HealingSessionService`` cover every public method of this ADK's ``BaseSessionService``?

``python api_check.py``: every public callable of this ADK version's
``BaseSessionService`` (``flush`` from 1.33, ``get_user_state`` from 2.2, and
whatever comes next) must resolve on ``HealingSessionService`` to an
implementation of its own, not to the base class's: a base default would
silently bypass the wrapped service. Prints ``{"methods": [...]}``; exits 1
with the methods left to the base class.
"""

from __future__ import annotations

from google.adk.sessions.base_session_service import BaseSessionService
from matrix_adk import emit, fail

from adk_session_heal import HealingSessionService


def public_methods(cls: type) -> list[str]:
    """Returns the names of a class's public callables, inherited ones included."""
    return sorted(n for n in dir(cls) if not n.startswith("_") and callable(getattr(cls, n)))


def owner(cls: type, name: str) -> type:
    """Returns the class in ``cls``'s MRO whose ``__dict__`` defines ``name``."""
    return next(c for c in cls.__mro__ if name in vars(c))


def main() -> None:
    """Fails when a public method of the base resolves to the base's own code."""
    methods = public_methods(BaseSessionService)
    left = [n for n in methods
            if owner(HealingSessionService, n) in BaseSessionService.__mro__]
    if left:
        fail(f"HealingSessionService leaves {', '.join(left)} to BaseSessionService "
             f"(of {len(methods)} public methods)")
    emit({"methods": methods})


if __name__ == "__main__":
    main()
