"""An ADK agent folder with healing switched on (see services.py)."""

from . import agent

__all__ = ["agent"]
