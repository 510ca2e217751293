"""Supervision: watching attempts, classifying failures, deciding restarts."""
