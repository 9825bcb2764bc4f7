"""The suite's front door (python -m suite, or the `scaling-study` command): one word routes to the room that owns it."""
