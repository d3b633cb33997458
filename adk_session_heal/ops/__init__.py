"""Operator runs by URL (private): scan, repair, undo, review and their reports.

``scan`` reads a whole store through the one per-session decision, ``repair``
plans and applies heals over it (plan + apply), ``undo`` takes a run back,
``operator_review`` lists and resolves healed calls; ``scan_report``,
``repair_report``, ``ledger_documents`` and ``migration_report`` are the
documents the command line prints, ``text_output`` their lines and columns. Public through the
package root (``scan``, ``repair``, ...); these modules may change.
"""
