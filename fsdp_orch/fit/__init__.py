"""Will it fit? Each GPU's peak memory for a job, estimated before it waits in the queue
(``fsdp-orch fit``).

``setup`` (pure) reads what the estimate runs from the job and the cluster; ``tracked_run`` builds
the model under ``FakeTensorMode`` (no memory is taken), shards it with the real ``fully_shard``
for every rank of the job over a fake process group, in one CPU process, and runs a forward,
backward and optimizer step under torch's ``FSDPMemTracker``; ``budget`` (pure) adds what fake
tensors cannot see, each part a stated model, and turns the peak into the table and the verdict.
Only ``tracked_run`` and ``model_source`` import torch, and only when ``fit`` runs.
``real_run`` runs the same step for real (torchrun ranks, real tensors), to check the estimate on
models small enough to run.
"""
