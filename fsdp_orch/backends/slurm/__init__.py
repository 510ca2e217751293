"""The SLURM kind: our rendered sbatch, the supervisor on the allocation's first node."""
