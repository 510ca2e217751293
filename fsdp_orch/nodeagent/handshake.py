"""How a node agent and its supervisor know each other on the node channel without the token ever
crossing it: each proves that it holds the attempt's token by an HMAC of the other's fresh nonce
(a challenge–response). A listener that took the supervisor's recorded port learns nothing from an
agent and is obeyed in nothing; a stranger at the supervisor's port learns nothing either. Pure.

    supervisor -> agent  {"challenge": NONCE_S}                                   at once
    agent -> supervisor  {"node": N, "host": "...", "nonce": NONCE_A,
                          "proof": HMAC(token, "agent", NONCE_S, NONCE_A)}         its hello
    supervisor -> agent  {"proof": HMAC(token, "supervisor", NONCE_S, NONCE_A)}    then the lines
"""

from __future__ import annotations

import hashlib
import hmac
import secrets

NONCE_BYTES = 16


def nonce() -> str:
    return secrets.token_hex(NONCE_BYTES)


def _mac(token: str, role: str, challenge: str, answer: str) -> str:
    message = "\n".join(("fsdp-orch node channel", role, challenge, answer)).encode()
    return hmac.new(token.encode(), message, hashlib.sha256).hexdigest()


def agent_proof(token: str, challenge: str, agent_nonce: str) -> str:
    return _mac(token, "agent", challenge, agent_nonce)


def supervisor_proof(token: str, challenge: str, agent_nonce: str) -> str:
    return _mac(token, "supervisor", challenge, agent_nonce)


def proven(expected: str, given: object) -> bool:
    """``given`` is the proof expected, compared in constant time (anything else is not)."""
    return isinstance(given, str) and hmac.compare_digest(expected.encode(), given.encode())


__all__ = ["agent_proof", "nonce", "proven", "supervisor_proof"]
