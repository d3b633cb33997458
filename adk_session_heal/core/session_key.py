"""SessionKey: the three values that name one stored ADK session."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


class _SessionLike(Protocol):
    app_name: str
    user_id: str
    id: str


@dataclass(frozen=True, slots=True, order=True)
class SessionKey:
    """Names one session: every store keys sessions by these three values.

    Attributes:
        app_name: The ADK app.
        user_id: The user.
        session_id: The session's id.
    """

    app_name: str
    user_id: str
    session_id: str

    @classmethod
    def of(cls, session: _SessionLike) -> SessionKey:
        """Returns the key of an ADK ``Session`` (or anything shaped like one)."""
        return cls(session.app_name, session.user_id, session.id)

    def __str__(self) -> str:
        """Returns ``app/user/session``, as the CLI prints it."""
        return f"{self.app_name}/{self.user_id}/{self.session_id}"
