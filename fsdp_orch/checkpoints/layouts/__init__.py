"""Each framework's completeness and step rules, one module per framework family; the registry
(fsdp_orch.checkpoints.registry) pairs them with the names they are found by."""
