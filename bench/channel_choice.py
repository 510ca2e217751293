"""Which transport carries the node summaries: the supervisor's CPU per node summary, measured.

    .venv/bin/python bench/channel_choice.py [--nodes 256,1024] [--seconds 10]

N simulated nodes each send one real node summary (8 ranks, ``nodeagent.summary.summary_line``) a
second to one supervisor process, over loopback, for ``--seconds``; the supervisor decodes every
summary into heartbeats (``parse_summary``). Two transports, the same summaries, in the same run:
- **asyncio streams, JSON lines**: the real ``SummaryServer``; the clients keep one connection each.
- **torch's TCPStore** (libuv server, in the supervisor process): each node ``set``s its key; the
  supervisor ``multi_get``s every node's key once a second (a store has no push: it polls).
Printed: the supervisor process's CPU (core-seconds per wall second), per summary (µs), and the
ratio.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fsdp_orch.nodeagent.handshake import agent_proof, nonce  # noqa: E402
from fsdp_orch.nodeagent.summary import parse_summary, summary_line  # noqa: E402
from fsdp_orch.observe.heartbeats import Heartbeat  # noqa: E402

CLIENT_PROCS = 2


def summary_of(node: int, now: float, step: int) -> str:
    beats = [json.loads(Heartbeat(rank=node * 8 + r, attempt=0, step=step, loss=2.5, time=now,
                                  state="training", pid=10000 + r, progress_at=now, python_at=now,
                                  host=f"node{node}").to_json())
             for r in range(8)]
    return summary_line(node, f"node{node}", now, beats)


def cpu_seconds() -> float:
    t = os.times()
    return t.user + t.system


# --- asyncio streams ---------------------------------------------------------------------------

def asyncio_supervisor(port_q, result_q, seconds: float, warmup: float) -> None:
    from fsdp_orch.nodeagent.server import SummaryServer

    server = SummaryServer("tok")
    port_q.put(server.start())
    time.sleep(warmup)
    lines0, cpu0, t0 = server.lines, cpu_seconds(), time.monotonic()
    time.sleep(seconds)
    result_q.put((cpu_seconds() - cpu0, time.monotonic() - t0, server.lines - lines0))


def asyncio_clients(nodes: list[int], port: int, until: float) -> None:
    import asyncio

    async def one(node: int) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        challenge = json.loads(await reader.readline())["challenge"]
        mine = nonce()
        writer.write((json.dumps({"node": node, "host": f"node{node}", "nonce": mine,
                                  "proof": agent_proof("tok", challenge, mine)})
                      + "\n").encode())
        await reader.readline()  # the supervisor's proof
        step = 0
        await asyncio.sleep((node % 100) / 100)
        try:
            while time.time() < until:
                step += 1
                writer.write((summary_of(node, time.time(), step) + "\n").encode())
                await writer.drain()
                await asyncio.sleep(1.0)
        except ConnectionError:
            pass  # the supervisor measured and ended
        writer.close()

    async def main() -> None:
        await asyncio.gather(*(one(n) for n in nodes))
    asyncio.run(main())


# --- TCPStore ----------------------------------------------------------------------------------

def store_supervisor(port_q, result_q, n: int, seconds: float, warmup: float) -> None:
    import torch.distributed as dist

    store = dist.TCPStore("127.0.0.1", 0, is_master=True, use_libuv=True, wait_for_workers=False)
    port_q.put(store.port)
    keys = [f"node/{i}" for i in range(n)]
    deadline = time.monotonic() + warmup + 120  # every node has connected and set its key once
    while time.monotonic() < deadline and not store.check(keys):
        time.sleep(0.2)
    print(f"  tcpstore: {sum(store.check([k]) for k in keys)} of {n} nodes set their key",
          flush=True)
    taken, cpu0, t0 = 0, cpu_seconds(), time.monotonic()
    seen: dict[int, bytes] = {}
    while time.monotonic() - t0 < seconds:
        tick = time.monotonic()
        present = [k for k in keys if store.check([k])]
        for key, value in zip(present, store.multi_get(present) if present else [], strict=True):
            node = int(key.split("/")[1])
            if seen.get(node) != value:
                seen[node] = value
                parse_summary(json.loads(value))
                taken += 1
        time.sleep(max(0.0, 1.0 - (time.monotonic() - tick)))
    result_q.put((cpu_seconds() - cpu0, time.monotonic() - t0, taken))


def store_clients(nodes: list[int], port: int, until: float) -> None:
    from datetime import timedelta

    import torch.distributed as dist

    stores = {n: dist.TCPStore("127.0.0.1", port, is_master=False, use_libuv=True,
                               timeout=timedelta(seconds=120))
              for n in nodes}
    step = 0
    try:
        while time.time() < until:
            tick = time.time()
            step += 1
            for n, store in stores.items():
                store.set(f"node/{n}", summary_of(n, time.time(), step))
            time.sleep(max(0.0, 1.0 - (time.time() - tick)))
    except RuntimeError:
        pass  # the supervisor measured and ended


def measure(kind: str, n: int, seconds: float) -> dict:
    ctx = mp.get_context("spawn")
    port_q, result_q = ctx.Queue(), ctx.Queue()
    warmup = 4.0 + n / 200
    if kind == "asyncio":
        sup = ctx.Process(target=asyncio_supervisor, args=(port_q, result_q, seconds, warmup))
        client = asyncio_clients
    else:
        sup = ctx.Process(target=store_supervisor, args=(port_q, result_q, n, seconds, warmup))
        client = store_clients
    sup.start()
    port = port_q.get(timeout=60)
    until = time.time() + warmup + seconds + (150 if kind == "tcpstore" else 2)
    chunks = [list(range(n))[i::CLIENT_PROCS] for i in range(CLIENT_PROCS)]
    clients = [ctx.Process(target=client, args=(chunk, port, until)) for chunk in chunks]
    for c in clients:
        c.start()
    cpu, wall, lines = result_q.get(timeout=warmup + seconds + 300)
    for c in clients:
        c.join(timeout=30)
    sup.join(timeout=10)
    if sup.is_alive():
        sup.kill()
    return {"transport": kind, "nodes": n, "cores": cpu / wall, "summaries": lines,
            "us_per_summary": 1e6 * cpu / max(1, lines)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", default="256,1024")
    parser.add_argument("--seconds", type=float, default=10.0)
    args = parser.parse_args()
    line = len(summary_of(1, time.time(), 1))
    print(f"one node summary (8 ranks): {line} bytes")
    print(f"{'transport':<10} {'nodes':>6} {'summaries':>10} {'cores':>7} {'µs/summary':>11}")
    for n in (int(x) for x in args.nodes.split(",")):
        rows = [measure(kind, n, args.seconds) for kind in ("asyncio", "tcpstore")]
        for r in rows:
            print(f"{r['transport']:<10} {r['nodes']:>6} {r['summaries']:>10} {r['cores']:>7.3f} "
                  f"{r['us_per_summary']:>11.1f}")
        print(f"  ratio tcpstore/asyncio supervisor CPU at {n} nodes: "
              f"{rows[1]['cores'] / max(rows[0]['cores'], 1e-9):.2f}")


if __name__ == "__main__":
    main()
