"""The job spec: ``schema`` (the models), ``loading`` (YAML, ``--set``, an accelerate config), and
``accelerate`` (what an accelerate config implies)."""
