"""Operator runs by URL (private): scan, repair, undo, review and their reports.

``bulk`` plans and applies repairs over a whole store, ``undo`` takes a run back,
``operator_review`` lists and resolves healed calls, and ``scan_report`` /
``migration_report`` are the documents the command line prints. Public through the
package root (``scan``, ``repair``, ...); these modules may change.
"""
