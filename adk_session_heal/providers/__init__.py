"""Provider formats (private, pure): each provider's rules, validators and request repair.

``provider_rules`` states each provider's sequencing rule once; ``validators``,
``request_repair`` and ``formats`` read it. Public through
:mod:`adk_session_heal.validators`, :mod:`adk_session_heal.messages` and
:mod:`adk_session_heal.plugins`; these modules may change.
"""
