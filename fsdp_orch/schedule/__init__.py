"""Recurring jobs: cron schedules kept under ``$FSDP_ORCH_HOME/schedules`` and the scheduler that
submits their ticks. ``ticks`` and ``decide`` are pure;
``book`` keeps the files; ``scheduler`` acts."""
