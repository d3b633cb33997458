"""Deprecated name of :mod:`adk_session_heal.scan_report`.

It keeps working, with a ``DeprecationWarning``, until the next minor release.
"""

from __future__ import annotations

import warnings

from .scan_report import *  # noqa: F403
from .scan_report import __all__ as __all__

warnings.warn(
    "adk_session_heal.reports is deprecated: import from adk_session_heal.scan_report",
    DeprecationWarning,
    stacklevel=2,
)
