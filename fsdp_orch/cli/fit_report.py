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
                suggestions: list[Suggestion] | None) -> str:
    from fsdp_orch.fit.budget import table
    from fsdp_orch.fit.suggestions import table as suggestions_table

    text = table(found.budget, heading(job, cluster, found))
    if suggestions is not None:
        return text + suggestions_table(suggestions)
    if found.budget.tight:
        return text + "less than a tenth of the GPU to spare: fsdp-orch fit --suggest says what " \
                      "single change would lower the peak\n"
    return text


def heading(job: str, cluster: str, found: Estimate) -> list[str]:
    setup, measured, fit = found.setup, found.measured, found.setup.fit
    lora = ""
    if fit.lora is not None:
        lora = (f"; LoRA r={fit.lora.r} on {measured['adapted']} Linear layers"
                + (" (base weights in nf4)" if fit.lora.quantize == "nf4" else ""))
    how = "cached" if found.cached else f"measured in {measured['seconds']:g} s"
    return [
        f"{job} on {cluster}: {setup.nodes} node(s) x {setup.procs_per_node} GPU(s)"
        f" = {setup.world_size} ranks, {setup.strategy}, mixed precision "
        f"{setup.mixed_precision}, activation checkpointing "
        f"{'on' if setup.activation_checkpointing else 'off'}, offload "
        f"{'on' if setup.offload_params else 'off'}",
        f"model {fit.model}: {measured['params'] / 1e9:.2f} B parameters, "
        f"{measured['trainable'] / 1e6:.1f} M trainable{lora}; batch {fit.batch_size} x "
        f"{fit.seq_len} tokens a GPU, {fit.optimizer}",
        f"one rank's tensors by FSDPMemTracker under FakeTensorMode ({how})",
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


__all__ = ["heading", "report_json", "report_text"]
