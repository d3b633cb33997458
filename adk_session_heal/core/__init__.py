"""The pure core (private): events in, findings and heals out, with no I/O.

Pairing calls with responses (``pairing``), classifying every call of a session
(``findings``), planning and building heals (``heal_plan``, ``healing``), late
results, re-runnable calls, tool-run outcomes, removals and operator review
decisions. Nothing here reads or writes storage. The public names live at the
package root and in the public modules (docs/api.md); these modules may change.
"""
