"""Deprecated name of :mod:`adk_session_heal.event_access`.

It keeps working, with a ``DeprecationWarning``, until the next minor release.
"""

from __future__ import annotations

import warnings

from .event_access import *  # noqa: F403
from .event_access import __all__ as __all__

warnings.warn(
    "adk_session_heal.views is deprecated: import from adk_session_heal.event_access",
    DeprecationWarning,
    stacklevel=2,
)
