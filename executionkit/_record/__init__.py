"""What one run knows: its record, each kind of step's room, and the checkpoints of it. Pure."""
