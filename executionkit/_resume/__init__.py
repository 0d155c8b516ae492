"""What a checkpoint means now, for this workflow: restoring it, forking it. Pure."""
