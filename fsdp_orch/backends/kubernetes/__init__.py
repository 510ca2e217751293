"""The Kubernetes kind: one pod per node in an Indexed Job (or a JobSet), a headless Service for
the rendezvous, the run folder on a volume the supervisor and the pods share."""
