"""What a checkpoint is, seen from the supervisor: found, judged complete or partial, and moved
aside, without torch (the runtime, which writes them, imports this; nothing here imports it).

storage (the ``Storage`` protocol a remote filesystem also meets), info (``CheckpointInfo``),
formats and pickles (is a zip, safetensors, pickle or torch.save file whole), layouts/ and
registry (one ``Layout`` entry per framework: name pattern, completeness rule, step rule),
folders (``checkpoint.dir`` scanned by the registry), single_file (``checkpoint.file``), globs,
aside (moving out of a script's way), source (one object for either), resume (what an attempt
resumes from) and polls (the latest one across the supervisor's polls).
"""
