"""An estimate of each GPU's peak as ``fit`` prints it, and as ``submit`` prints it when it refuses
a job that does not fit: the heading, the table by category, the verdict and what would make it
fit; or one JSON object."""

from __future__ import annotations

from typing import Any

TYPE_CHECKING = False
if TYPE_CHECKING:
    from fsdp_orch.fit.estimate import Estimate
    from fsdp_orch.fit.suggestions import Suggestion


def report_text(job: str, cluster: str, found: Estimate,
                suggestions: list[Suggestion] | None, *, device: str = "gpu",
                one_node: bool = False) -> str:
    """``device``: the cluster's (a profile's ``device: cpu`` runs processes, not GPUs);
    ``one_node``: its kind has one node (``local``), where more nodes is no change to make."""
    from fsdp_orch.fit.budget import table
    from fsdp_orch.fit.suggestions import table as suggestions_table

    text = table(found.budget, heading(job, cluster, found, device))
    if suggestions is not None:
        said = suggestions_table(suggestions)
        if one_node:
            said = said.replace(") ranks)", ") ranks; not on this one-node cluster)")
        return text + said
    if found.budget.tight:
        return text + "less than a tenth of the GPU to spare: fsdp-orch fit --suggest says what " \
                      "single change would lower the peak\n"
    return text


def count(n: float) -> str:
    """A number of parameters as a reader says it: 1.24 B, 7.0 M, 52.3 K, 640."""
    for scale, unit in ((1e9, "B"), (1e6, "M"), (1e3, "K")):
        if n >= scale:
            return f"{n / scale:.{2 if unit == 'B' else 1}f} {unit}"
    return f"{int(n)}"


def heading(job: str, cluster: str, found: Estimate, device: str = "gpu") -> list[str]:
    setup, measured, fit = found.setup, found.measured, found.setup.fit
    lora = ""
    if fit.lora is not None:
        lora = (f"; LoRA r={fit.lora.r} on {measured['adapted']} Linear layers"
                + (" (base weights in nf4)" if fit.lora.quantize == "nf4" else ""))
    how = "cached" if found.cached else f"measured in {measured['seconds']:g} s"
    nodes = f"{setup.nodes} node" + ("s" if setup.nodes != 1 else "")
    each = (f"{setup.procs_per_node} CPU process" + ("es" if setup.procs_per_node != 1 else "")
            if device == "cpu" else
            f"{setup.procs_per_node} GPU" + ("s" if setup.procs_per_node != 1 else ""))
    checkpointing = {"none": "off", "full": "on"}.get(setup.checkpointing, setup.checkpointing)
    tracker = "MemTracker (FSDP1)" if setup.fsdp_version == 1 else "FSDPMemTracker"
    return [
        f"{job} on {cluster}: {nodes} x {each}"
        f" = {setup.world_size} ranks, FSDP{setup.fsdp_version} {setup.strategy}, mixed "
        f"precision {setup.mixed_precision}, activation checkpointing {checkpointing}, offload "
        f"{'on' if setup.offload_params else 'off'}",
        f"model {fit.model}: {count(measured['params'])} parameters, "
        f"{count(measured['trainable'])} trainable{lora}; batch {fit.batch_size} x "
        f"{fit.seq_len} tokens a GPU, {fit.optimizer}",
        f"one rank's tensors by {tracker} under FakeTensorMode ({how})",
    ]


def report_json(job: str, cluster: str, found: Estimate,
                suggestions: list[Suggestion] | None) -> dict[str, Any]:
    """``suggestions``: None where they were not worked out (the job fits with room to spare)."""
    from fsdp_orch.fit.budget import as_json

    setup, measured = found.setup, found.measured
    return {"job": job, "cluster": cluster, "ranks": setup.world_size, "nodes": setup.nodes,
            "procs_per_node": setup.procs_per_node, "strategy": setup.strategy,
            "parameters": measured["params"], "trainable_parameters": measured["trainable"],
            "cached": found.cached, "measured_s": measured["seconds"],
            "layers": measured.get("layers"), **as_json(found.budget),
            "suggestions": None if suggestions is None else [s.as_json() for s in suggestions],
            "tracked_bytes": measured["peak"]}


__all__ = ["count", "heading", "report_json", "report_text"]
