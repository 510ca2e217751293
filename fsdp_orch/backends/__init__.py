"""The cluster kinds: ``base`` says what a kind provides, ``registry`` finds one by name, and each
kind is one module (``local``, ``slurm``, ``ssh``, ``tpu_vm``, ``kubernetes``) with its profile
model, planning hook, artifacts and the doing."""
