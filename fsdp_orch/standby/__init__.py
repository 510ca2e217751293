"""The warm standby: a keeper process per node and attempt that has imported torch (never CUDA) and
forks the attempt's ranks, and the launcher that asks it for them in torchrun's place."""
