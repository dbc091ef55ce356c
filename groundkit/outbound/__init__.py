"""The outbound gate: what may leave the database, scrubbed, metered and recorded (docs/outbound.md).

- :mod:`groundkit.outbound.policy`: the policy (data in the database, versioned, append-only);
- :mod:`groundkit.outbound.gate`: :func:`~groundkit.outbound.gate.send`, the one function every
  provider call that carries text goes through;
- :mod:`groundkit.outbound.scrub`: the redaction boundary;
- :mod:`groundkit.llm`: the LLM seam (``run.complete``) that sends through it.
"""

from __future__ import annotations

from typing import Any

from groundkit.outbound.policy import (
    Allowance,
    Classes,
    ClassPolicy,
    OutboundPolicy,
    PolicyVersion,
    current_policy,
    default_policy,
    policy_hash,
    policy_history,
    set_policy,
)
from groundkit.session import Session

__all__ = [
    "Allowance", "ClassPolicy", "Classes", "OutboundPolicy", "PolicyVersion", "current_policy", "default_policy",
    "outbound_policy_hash", "policy_hash", "policy_history", "set_policy",
]


def outbound_policy_hash(target: Session | Any) -> tuple[int, str]:
    """The version in force and its hash (``groundkit.outbound_policy()``): what a gate
    certificate names of the outbound policy. Equal content, equal hash; the hash can be
    recomputed offline from the content with :func:`policy_hash`."""
    version = current_policy(target)
    return version.version, version.policy_hash
