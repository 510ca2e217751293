"""Planning, pure: job + kind hook + attempt context -> plan -> rendered
artifacts; the frozen submission."""
