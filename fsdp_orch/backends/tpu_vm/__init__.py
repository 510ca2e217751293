"""The TPU VM kind: gcloud brings the VM to READY; its workers are hosts reached over SSH."""
