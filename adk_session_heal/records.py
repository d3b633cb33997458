"""Deprecated name of :mod:`adk_session_heal.heal_record`.

It keeps working, with a ``DeprecationWarning``, until the next minor release.
"""

from __future__ import annotations

import warnings

from .heal_record import *  # noqa: F403
from .heal_record import __all__ as __all__

warnings.warn(
    "adk_session_heal.records is deprecated: import from adk_session_heal.heal_record",
    DeprecationWarning,
    stacklevel=2,
)
