"""What goes into an ADK app (private): the wrapper, the URI schemes, the plugins.

``service`` (:class:`HealingSessionService`), ``adk_services`` (``heal+`` URIs for
``adk web``), ``tool_run_plugin``, ``rerun_plugin`` and ``context_filter``. Public
through the package root, :mod:`adk_session_heal.plugins` and
:mod:`adk_session_heal.register`; these modules may change.
"""
