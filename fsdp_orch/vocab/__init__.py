"""One source for each word: job states, failure categories, hints, checks, errors, the version."""
