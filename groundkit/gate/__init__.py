"""The permission gate (``groundkit eval gate``): does search ever show a reader what it must not?

Fail-closed, on throwaway databases only. One module per section, plus what they share:

- :mod:`~groundkit.gate.runner`: runs the sections in order and sums them up (``run_gate``).
- :mod:`~groundkit.gate.golden`: the golden permission set (``data/golden.toml``, ``data/grid.txt``).
- :mod:`~groundkit.gate.planted`: broken search variants the golden set must catch.
- :mod:`~groundkit.gate.stateful`: a hypothesis state machine against :mod:`~groundkit.gate.model`.
- :mod:`~groundkit.gate.concurrency`, :mod:`~groundkit.gate.faults`, :mod:`~groundkit.gate.roles`
  (``data/privileges.txt``), :mod:`~groundkit.gate.bad_input`: the other sections.
- :mod:`~groundkit.gate.model` (the pure oracle), :mod:`~groundkit.gate.integrity`,
  :mod:`~groundkit.gate.tap` (TAP output and counts), :mod:`~groundkit.gate.throwaway` (the databases).

Retrieval quality (nDCG, recall) is another job: :mod:`groundkit.quality`.
"""
