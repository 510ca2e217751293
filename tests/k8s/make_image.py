"""Make a container image without a registry: an OCI image-layout tar of one layer holding a root
folder, named for ``ctr -n k8s.io images import`` (the ``io.containerd.image.name`` annotation).

    python3 make_image.py --root ROOT --name fsdp-orch.local/base:1 --cmd /bin/sh --out base.tar

The layer is reproducible: entries sorted, owned by root, mtime 0, gzip without a timestamp. Used by
tests/k8s/cluster.sh for the base image (busybox as /bin/sh) and the pod sandbox's pause image.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import io
import json
import os
import platform
import tarfile
from pathlib import Path

ARCHITECTURES = {"x86_64": "amd64", "aarch64": "arm64", "ppc64le": "ppc64le", "s390x": "s390x"}
DEFAULT_PATH = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def layer_tar(root: Path) -> bytes:
    """An uncompressed tar of everything under ``root`` (paths relative to it), reproducibly."""

    def normalise(info: tarfile.TarInfo) -> tarfile.TarInfo:
        info.uid = info.gid = 0
        info.uname = info.gname = "root"
        info.mtime = 0
        return info

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames.sort()
            rel_dir = Path(dirpath).relative_to(root)
            names = sorted(filenames + [d for d in dirnames if os.path.islink(Path(dirpath, d))])
            # symlinks to folders are entries, not folders to walk into
            dirnames[:] = [d for d in dirnames if not os.path.islink(Path(dirpath, d))]
            entries = [*(rel_dir / d for d in dirnames), *(rel_dir / n for n in names)]
            for rel in entries:
                tar.add(root / rel, arcname=str(rel), recursive=False, filter=normalise)
    return buf.getvalue()


def image_layout(root: Path, name: str, entrypoint: list[str] | None, cmd: list[str] | None,
                 env: list[str]) -> bytes:
    """The OCI image-layout tar (``oci-layout``, ``index.json``, ``blobs/sha256/...``)."""
    blobs: dict[str, bytes] = {}

    def blob(data: bytes) -> tuple[str, int]:
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        blobs[digest] = data
        return digest, len(data)

    raw = layer_tar(root)
    layer_digest, layer_size = blob(gzip.compress(raw, mtime=0))
    arch = ARCHITECTURES.get(platform.machine(), platform.machine())
    config: dict[str, object] = {"Env": env}
    if entrypoint:
        config["Entrypoint"] = entrypoint
    if cmd:
        config["Cmd"] = cmd
    config_digest, config_size = blob(json.dumps({
        "architecture": arch, "os": "linux", "config": config,
        "rootfs": {"type": "layers", "diff_ids": ["sha256:" + hashlib.sha256(raw).hexdigest()]},
        "history": [{"created_by": "tests/k8s/make_image.py"}],
    }, sort_keys=True).encode())
    manifest_digest, manifest_size = blob(json.dumps({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                   "digest": config_digest, "size": config_size},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
                    "digest": layer_digest, "size": layer_size}],
    }, sort_keys=True).encode())
    index = {
        "schemaVersion": 2,
        "manifests": [{
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "digest": manifest_digest, "size": manifest_size,
            "platform": {"architecture": arch, "os": "linux"},
            "annotations": {"io.containerd.image.name": name,
                            "org.opencontainers.image.ref.name": name.rpartition(":")[2]},
        }],
    }
    files = {"oci-layout": json.dumps({"imageLayoutVersion": "1.0.0"}).encode(),
             "index.json": json.dumps(index, sort_keys=True).encode()}
    for digest, data in blobs.items():
        files["blobs/sha256/" + digest.split(":", 1)[1]] = data
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for folder in ("blobs", "blobs/sha256"):
            info = tarfile.TarInfo(folder)
            info.type, info.mode = tarfile.DIRTYPE, 0o755
            tar.addfile(info)
        for path, data in sorted(files.items()):
            info = tarfile.TarInfo(path)
            info.size, info.mode = len(data), 0o644
            tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", type=Path, required=True, help="the folder that is the image's /")
    parser.add_argument("--name", required=True,
                        help="the image's name, e.g. fsdp-orch.local/base:1")
    parser.add_argument("--out", type=Path, required=True, help="the tar to write")
    parser.add_argument("--entrypoint", nargs="+", help="the image's entrypoint")
    parser.add_argument("--cmd", nargs="+", help="the image's command")
    parser.add_argument("--env", action="append", default=None,
                        help=f"NAME=value, repeatable (default {DEFAULT_PATH})")
    args = parser.parse_args(argv)
    if not args.root.is_dir():
        parser.error(f"--root {args.root} is not a folder")
    data = image_layout(args.root, args.name, args.entrypoint, args.cmd, args.env or [DEFAULT_PATH])
    tmp = args.out.with_name(args.out.name + ".tmp")
    tmp.write_bytes(data)
    tmp.replace(args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
