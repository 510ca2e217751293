"""``fsdp-orch metrics``: the jobs' goodput, restarts, failures, steps and checkpoints for
Prometheus, read from the index at each scrape (docs/guides/metrics.md)."""

from __future__ import annotations

import os
import sys

from fsdp_orch.cli.common import EXIT_OK
from fsdp_orch.vocab.errors import InputError

TYPE_CHECKING = False
if TYPE_CHECKING:
    import argparse

HELP = ("export the jobs' metrics for Prometheus: an HTTP exporter (--serve) or a .prom file for "
        "node_exporter's textfile collector (--textfile)")
USES_HOME = True


def add_arguments(p: argparse.ArgumentParser) -> None:
    from fsdp_orch.cli.arg_types import listen_address, seconds_above_0

    out = p.add_mutually_exclusive_group(required=True)
    out.add_argument("--serve", metavar="[ADDR:]PORT", type=listen_address,
                     help="serve /metrics over HTTP until stopped (ADDR: 127.0.0.1 unless given; "
                          "PORT 0: one the kernel picks, printed)")
    out.add_argument("--textfile", metavar="DIR",
                     help="write DIR/fsdp_orch.prom (mode 0644, replaced whole) for "
                          "node_exporter's --collector.textfile.directory")
    p.add_argument("--token-file", metavar="FILE",
                   help="--serve: answer only scrapes carrying 'Authorization: Bearer <the token "
                        "in FILE>' (a file of yours, mode 0600; Prometheus: authorization: "
                        "{credentials_file: FILE}); without it every account on the machine can "
                        "read the metrics")
    p.add_argument("--every", metavar="SECONDS", type=seconds_above_0,
                   help="--textfile: write it again every SECONDS until stopped (default: once)")


def run(args: argparse.Namespace) -> int:
    from fsdp_orch.prometheus.collector import registry

    if args.every is not None and (args.textfile is None or not args.every > 0):
        raise InputError("expected a number of seconds above 0, with --textfile", field="--every")
    if args.token_file is not None and args.serve is None:
        raise InputError("a token guards the HTTP exporter: use it with --serve",
                         field="--token-file")
    if args.serve is not None:
        token = None if args.token_file is None else _token(args.token_file)
        return _serve(args.serve, registry(), token)
    return _textfiles(args.textfile, args.every, registry())


def _token(path: str) -> str:
    """The token in ``path``, read from the file that was checked (its owner, its folders, its
    mode: others must neither change nor read it)."""
    from fsdp_orch.places.trust import load_problem
    from fsdp_orch.prometheus.serve import token_problem

    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError as exc:
        raise InputError(f"cannot read it: {exc.strerror}", field="--token-file",
                         file=path) from None
    with os.fdopen(fd, encoding="utf-8", errors="replace") as f:
        text = f.read(4096)
        why = load_problem(path) or token_problem(text, os.fstat(f.fileno()).st_mode)
    if why is not None:
        raise InputError(f"refused the token file: {why}; it must be a file of yours (mode "
                         "0600) in folders only you (or root) can write", field="--token-file",
                         file=path)
    return text.strip()


def _serve(text: str, found: object, token: str | None) -> int:
    import signal
    import threading

    from fsdp_orch.prometheus.serve import listen_address, serve

    try:
        address, port = listen_address(text)
    except ValueError as exc:
        raise InputError(str(exc), field="--serve") from None
    try:
        server, port = serve(address, port, found, token)  # type: ignore[arg-type]
    except OSError as exc:
        raise InputError(f"cannot listen on {address}:{port}: {exc.strerror or exc}",
                         field="--serve") from None
    host = f"[{address}]" if ":" in address else address
    print(f"serving http://{host}:{port}/metrics", flush=True)
    if token is None:
        print(f"fsdp-orch: notice: every account that can reach {host}:{port} (on this machine: "
              "all of them) can read these metrics: your user name, your jobs' names, states "
              "and goodput; --token-file FILE asks each scrape for a bearer token",
              file=sys.stderr, flush=True)
    stopped = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopped.set())
    while not stopped.wait(3600):
        pass
    server.shutdown()  # type: ignore[attr-defined]
    return EXIT_OK


def _textfiles(folder: str, every: float | None, found: object) -> int:
    import time

    from fsdp_orch.prometheus.textfile import write_textfile

    if not os.path.isdir(folder):
        raise InputError("expected an existing directory (node_exporter's "
                         "--collector.textfile.directory)", field="--textfile", file=folder)
    while True:
        try:
            path = write_textfile(folder, found)  # type: ignore[arg-type]
        except OSError as exc:
            raise InputError(f"cannot write the metrics: {exc.strerror or exc}",
                             field="--textfile", file=folder) from None
        if every is None:
            print(path)
            sys.stdout.flush()
            return EXIT_OK
        time.sleep(every)
