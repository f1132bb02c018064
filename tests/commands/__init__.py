"""The commands end to end, as a user runs them: a sweep, an install."""
