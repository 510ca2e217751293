"""The node agent: one process on every node of an attempt, between that node's ranks and the
supervisor.

Ranks write their heartbeats to node-local files (``beat_dir``); the agent folds them into one node
summary (``summary``) and streams it to the supervisor over one TCP connection (``agent``,
``endpoint``), where ``server`` keeps the latest summary of every node. Stdlib only: it runs with
the copy of fsdp_orch the nodes import, beside torchrun.
"""
